"""Shared fixtures: small trial configs, a session-wide tokenizer, and a CLI runner."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Two intra-op threads on a 2-core machine shared with Ray workers thrash (10x slower DPLSTM steps).
torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]


def _private_ray_token() -> Path:
    """This test run's own Ray token, readable by its owner only: every Ray head and `ray.init` of the tests (and
    their subprocesses, which inherit the variable) reads it instead of `~/.ray/auth_token`, so no test needs a token
    an earlier run left in the home folder, and none writes one there."""
    path = Path(tempfile.mkdtemp(prefix="sdp-test-ray-")) / "auth_token"
    path.touch(mode=0o600)
    path.write_text(secrets.token_hex(32))
    atexit.register(shutil.rmtree, path.parent, True)
    return path


os.environ["RAY_AUTH_TOKEN_PATH"] = str(_private_ray_token())


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A private local Ray for one test module (never a cluster someone else started); its Train storage folder."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield tmp_path_factory.mktemp("ray-train")
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Detection and tokenizer caches of tests live in one temp folder of the session (shared by its xdist
    workers), never in the repo or the user's home. Session-scoped, so it is set before any module fixture starts
    a CLI, a sweep or a Ray head, whose processes inherit it (a per-test setting came after those, and their caches
    went to ~/.cache)."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one folder for the session's workers: entries are written atomically
        session = session.parent
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SDP_CACHE_DIR", str(session / "detection-cache"))
        yield


def small_trial_dict(**sections) -> dict:
    """A trial that trains in seconds: 200 CustomerSim dialogs, regex policy, a few steps."""
    base = {
        "name": "tiny",
        "seed": 0,
        "data": {"n_train": 200, "n_validation": 40, "n_test": 40, "max_length": 128},
        "detector": {"policy": "phone,order_number,tracking_number"},
        "tokenizer": {"vocab_size": 600},
        "training": {"batch_size": 16, "epochs": 1, "max_steps": 6, "learning_rate": 2e-3},
        "evaluation": {"exposure": False, "mia": False},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return base


def run_main(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI's `main(ARGS)` in this process (the same code path as `sdp-sweep`, without a new
    interpreter's start-up), capturing its exit code, stdout and stderr. An uncaught exception propagates."""
    import contextlib
    import io

    from sdp_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    try:
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse usage errors
                code = e.code if isinstance(e.code, int) else 2
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(["sdp-sweep", *args], code, out.getvalue(), err.getvalue())


def run_cli(*args: str, cwd: Path | None = None, timeout: int = 600, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    """Run `sdp-sweep ARGS` as a user would, in a subprocess (with `env` added to this process's environment)."""
    return subprocess.run([sys.executable, "-m", "sdp_core.cli", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=timeout, env={**os.environ, **(env or {})})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with `slow` tests (Ray clusters, sweeps, Ray Train) run first: side by side (pytest-xdist, one file per
    process at a time), the long files start early and the short ones fill in around them, instead of a long file
    running alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order inside each group is kept
