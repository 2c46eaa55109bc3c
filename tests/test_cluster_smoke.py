"""A cluster sweep file end to end at smoke scale on CPU, with no hub: `sweeps/glue_roberta.yaml` on a local copy
of an SST-2-like dataset (as `save_to_disk` leaves GLUE: its test labels hidden as -1) and a local tiny RoBERTa,
everything else as the file says but for sizes, resources and a small search space."""

from __future__ import annotations

import json

import datasets
import pytest

from tests.conftest import run_main
from tests.test_hf_local import make_pretrained, review_columns

TINY_SPACE = "{parameters: {training.learning_rate: {type: loguniform, low: 1.0e-3, high: 5.0e-3}}}"


@pytest.mark.slow
def test_glue_roberta_sweep_runs_offline_from_local_folders(tmp_path):
    model = make_pretrained(tmp_path / "models")["roberta"]
    sst2 = {split: review_columns(n, seed) for split, n, seed in (("train", 160, 0), ("validation", 40, 1),
                                                                  ("test", 40, 2))}
    sst2["test"]["label"] = [-1] * 40  # GLUE hides its test labels
    datasets.DatasetDict({k: datasets.Dataset.from_dict(v) for k, v in sst2.items()}).save_to_disk(tmp_path / "sst2")
    out = tmp_path / "out"
    settings = [f"base.data.hf_name={tmp_path / 'sst2'}", "base.data.text_fields=[sentence]",
                "base.data.splits.test=validation", "base.data.max_length=64",
                f"base.model.name_or_path={model}", f"base.tokenizer.name_or_path={model}",
                "base.training.workers=1", "base.training.epochs=1", "base.training.max_steps=2",
                "base.training.batch_size=16", f"search_space={TINY_SPACE}", "mechanisms=[jft]",
                "trials_per_mechanism=1", "resources.cpu=1",
                "resources.gpu=0", "report_interval=0", "base.detector.estimate_per_type=100"]
    # The CLI's main in this process (the same code path as `sdp-sweep run`): a new interpreter would only import
    # the training stack again (about 9 CPU-s); the sweep's local Ray, its trial actors and their output are the same.
    result = run_main("run", "sweeps/glue_roberta.yaml", "--out", str(out), *[a for s in settings for a in ("--set", s)])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    # One trial (JFT: detection, redaction and the private phase): that DP-SGD and JFT classifiers each spend their
    # target under their notion is tests/test_classification.py's claim, on the trial code each actor runs.
    rows = [json.loads(p.read_text()) for p in (out / "trials").glob("*.json")]
    assert len(rows) == 1 and all(r["state"] == "finished" for r in rows), [r["error"] for r in rows]
    assert {r["config"]["mechanism"]["name"] for r in rows} == {"jft"}
    for row in rows:
        assert row["config"]["model"]["name_or_path"] == str(model) and row["config"]["model"]["arch"] == "roberta"
        assert row["detector"]["train_records"] == 144  # 160 less the held-out validation; GLUE's dev set is test
        assert 0 <= row["metrics"]["test_accuracy"] <= 1 and row["privacy"]["epsilon"] <= 3.0
    assert (out / "report" / "index.html").is_file()
