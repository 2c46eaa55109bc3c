"""Secrets stay secret: everything a run writes is scanned for every gold secret of its data and every canary value.

The run is the quickstart sweep (`sweeps/quickstart.yaml`, with DP-SGD, JFT, CRT and ATDP, a canary, attacks on:
exposure estimated from a sample), scaled down, through the CLI, plus one `sdp-sweep trial --out` that saves a model
(exposure by exact enumeration). Scanned: the CLI's stdout and stderr at debug log level (`-vv`), the sweep folder
(trial rows, Optuna journal, Ray Tune's own files), the report, Ray's session logs (the workers' stdout/stderr),
and the saved model (weights, config, tokenizer files, metadata). The embedded plotly.js library is the one thing left out: it is third-party code with no data in it,
and its minified digits would collide with short secrets by chance.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from sdp_core.config.loading import load_sweep_config
from sdp_core.data.splits import splits_with_canaries
from sdp_core.detectors.regex import _trie
from sdp_core.logs import configure_logging
from tests.conftest import REPO, run_cli, run_main

pytestmark = pytest.mark.slow

SCALE = ["base.data.n_train=240", "base.data.n_validation=40", "base.data.n_test=40", "base.training.max_steps=3",
         "base.training.batch_size=16", "base.tokenizer.vocab_size=600", "trials_per_mechanism=1",
         "mechanisms=[dpsgd,jft,crt,atdp]",
         'base.data.canaries={format: "My ID is {dddddd}", count: 2, repeats: 5}']
# The sweep's trials estimate exposure from a sample of candidates; the trial below enumerates all 10⁶ (each
# exact enumeration costs a trial ~8 s): both paths' outputs are scanned.
SWEEP_ONLY = ["base.evaluation.exposure_method=estimate"]
MIN_SECRET_CHARS = 4  # shorter gold spans ("Al", "12") occur as ordinary words and numbers


def gold_secrets(data_cfg, seed: int) -> set[str]:
    """Every gold secret of the run's data (train with its canaries, validation, test)."""
    splits, (canaries,) = splits_with_canaries(data_cfg, seed)
    secrets = {s for split in (splits.train, splits.validation, splits.test) for r in split for s in r.secrets()}
    members = {s for s, inserted in zip(canaries.secrets, canaries.inserted) if inserted}
    assert members <= secrets  # inserted canary values are gold spans of their records
    # Held-out canaries are never in the data, and must not leak either: the audit ranks them against the inserted.
    return {s for s in secrets | set(canaries.secrets) if len(s.strip()) >= MIN_SECRET_CHARS}


def written_files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


def scan(files: list[Path], secrets: set[str]) -> list[str]:
    """`file: secret` for every secret found as a whole token (not inside a longer run of letters or digits, where
    a 4-digit secret would match any float), raw or escaped as in JSON."""
    from sdp_core.report.plots import plotly_js

    library = plotly_js().encode()
    forms = {f: s for s in secrets for f in (s.encode(), json.dumps(s)[1:-1].encode())}
    # The forms as one trie-shaped alternation (bytes as latin-1 characters): Python's `re` tries a flat
    # alternation's hundreds of branches at every byte, a trie one byte at a time (40x faster on a run's files).
    alternation = _trie([f.decode("latin-1") for f in forms]).encode("latin-1")
    pattern = re.compile(rb"(?<![0-9A-Za-z])(" + alternation + rb")(?![0-9A-Za-z])")
    hits = []
    for path in files:
        found = {forms[m] for m in pattern.findall(path.read_bytes().replace(library, b""))}
        hits += [f"{path}: {s!r}" for s in sorted(found)]
    return hits


@pytest.fixture(scope="module")
def run_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("leak")
    ray_tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    env = {"RAY_TMPDIR": str(ray_tmp)}
    logs = root / "logs"
    logs.mkdir()
    sets = [a for s in SCALE + SWEEP_ONLY for a in ("--set", s)]
    sweep = run_cli("-vv", "run", str(REPO / "sweeps" / "quickstart.yaml"), "--out", str(root / "sweep"), *sets,
                    cwd=root, timeout=900, env=env)
    (logs / "sweep.out").write_text(sweep.stdout)
    (logs / "sweep.err").write_text(sweep.stderr)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    trial_sets = [a for s in SCALE if s.startswith("base.") for a in ("--set", s.removeprefix("base."))]
    # In this process (the CLI's `main`, its output captured): a new interpreter would only import the stack again.
    trial = run_main("-vv", "trial", "--set", "mechanism.name=jft", *trial_sets, "--out", str(root / "trial"), cwd=root)
    configure_logging(0)  # back to the level every other test of this process runs at
    (logs / "trial.out").write_text(trial.stdout)
    (logs / "trial.err").write_text(trial.stderr)
    assert trial.returncode == 0, trial.stderr[-3000:]
    cfg = load_sweep_config(REPO / "sweeps" / "quickstart.yaml", SCALE)
    yield root, ray_tmp, cfg
    shutil.rmtree(ray_tmp, ignore_errors=True)


def test_no_gold_secret_or_canary_value_in_anything_a_run_writes(run_outputs):
    root, ray_tmp, cfg = run_outputs
    seeds = {json.loads(p.read_text())["seed"] for p in (root / "sweep" / "trials").glob("*.json")}
    secrets = set().union(*(gold_secrets(cfg.base.data, s) for s in seeds | {0}))
    files = written_files(root / "logs", root / "sweep", root / "trial", ray_tmp)
    kinds = {p.suffix for p in files}
    assert {".json", ".html", ".md", ".csv", ".parquet", ".yaml", ".safetensors", ".out", ".err"} <= kinds
    assert any("ray" in str(p.relative_to(ray_tmp)) and p.suffix in (".out", ".err", ".log") for p in files
               if ray_tmp in p.parents)  # Ray's worker logs are in the scan
    assert len(secrets) > 100
    assert scan(files, secrets) == []


def test_the_scan_finds_a_planted_secret(run_outputs, tmp_path):
    root, _, cfg = run_outputs
    secret = sorted(gold_secrets(cfg.base.data, 0))[0]
    planted = tmp_path / "row.json"
    planted.write_text(json.dumps({"note": f"customer said {secret}.", "float": f"0.1{secret}7"}))
    assert scan([planted], {secret}) == [f"{planted}: {secret!r}"]
    planted.write_text(json.dumps({"float": f"0.1{secret}7"}))  # inside a longer token: not this secret
    assert scan([planted], {secret}) == []


def test_results_carry_canary_format_and_exposure_never_the_value(run_outputs):
    root, _, _ = run_outputs
    rows = [json.loads(p.read_text()) for p in sorted((root / "sweep" / "trials").glob("*.json"))]
    row = next(r for r in rows if r["state"] == "finished")
    assert row["canaries"]["format"] == "My ID is {dddddd}" and "exposure" in row["attacks"]
    model_files = {p.name for p in (root / "trial" / "model").iterdir()}
    assert not any(name.endswith((".txt", ".jsonl")) for name in model_files)  # no training text beside the model
