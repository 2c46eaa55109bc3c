"""A report rebuilt from the stored results of a real (small) Ray Tune + Optuna sweep, nothing re-run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import run_cli, small_trial_dict

from sdp_core.config.loading import load_trial_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """Four real trials (two each of DP-SGD and JFT, a few steps each), stored by `sdp-sweep run`."""
    root = tmp_path_factory.mktemp("real-sweep")
    base = small_trial_dict()
    base.pop("name"), base.pop("seed")
    sweep = {
        "name": "tiny-real", "seed": 0, "base": base, "mechanisms": ["dpsgd", "jft"],
        "objectives": [{"metric": "val_perplexity", "mode": "min"}, {"metric": "val_private_perplexity", "mode": "min"}],
        "search_space": {"parameters": {"training.learning_rate": {"type": "loguniform", "low": 5e-4, "high": 5e-3}}},
        "num_trials": 4, "concurrency": 1,
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(sweep))
    result = run_cli("run", str(root / "tiny.yaml"), "--out", str(root / "out"), cwd=root, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "out"


def test_report_from_stored_sweep_results(sweep_dir, tmp_path):
    rows = [json.loads(p.read_text()) for p in sorted((sweep_dir / "trials").glob("*.json"))]
    assert len(rows) == 4
    stored = {p: p.stat().st_mtime_ns for p in (sweep_dir / "trials").iterdir()}

    result = run_cli("report", str(sweep_dir), "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "report"
    assert result.stdout.strip() == str(out / "index.html")
    assert {p: p.stat().st_mtime_ns for p in (sweep_dir / "trials").iterdir()} == stored  # nothing re-ran

    frame = pd.read_parquet(out / "trials.parquet")
    assert sorted(frame["trial_id"]) == sorted(r["trial_id"] for r in rows)
    assert set(frame["privacy.notion"]) <= {"DP", "SDP"} and frame["privacy.accountant"].eq("rdp").all()

    # The front: finished trials not dominated on (val perplexity, private-token perplexity).
    points = {r["trial_id"]: (r["metrics"]["val_perplexity"], r["metrics"]["val_private_perplexity"])
              for r in rows if r["state"] == "finished"}
    front = {i for i, p in points.items()
             if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points.values())}
    assert {p.stem for p in (out / "frontier").glob("*.yaml")} == front
    for path in (out / "frontier").glob("*.yaml"):
        row = next(r for r in rows if r["trial_id"] == path.stem)
        assert load_trial_config(path).model_dump(mode="json") == row["config"]

    summary = (out / "summary.md").read_text()
    assert "The best model of each guarantee: at ε = 3 (" in summary and "δ = 1e-5, RDP)" in summary
    assert "| DP-SGD |" in summary or "| JFT |" in summary
