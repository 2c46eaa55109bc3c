"""A trial and its Ray Train workers as one placement group: the bundles each trial asks for; a sweep whose
`concurrency` trials cannot all hold their workers at once still finishes (no deadlock). Each Ray runs in a child
process of its own session, stopped by PID (`run_isolated`; the multi-node cluster: test_cluster_nodes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sdp_core.config.sweep import ResourcesConfig
from sdp_core.sweep.driver import trial_resources
from tests.conftest import REPO
from tests.test_sweep_cli import free_port, session_pids, stop_session

SMOKE = str(REPO / "sweeps" / "smoke.yaml")


def trial_config(workers: int, cpu_per_worker: float = 0.5) -> dict:
    return {"trial": {"training": {"workers": workers, "cpu_per_worker": cpu_per_worker}}}


@pytest.mark.parametrize("workers, resources, bundles", [
    (1, {"cpu": 1}, [{"CPU": 1}]),
    (2, {"cpu": 1}, [{"CPU": 1}, {"CPU": 0.5}, {"CPU": 0.5}]),
    (3, {"cpu": 2}, [{"CPU": 2}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]),
    # GPU workers cannot be carved out of the trial's group (trial_resources): they ask the cluster themselves.
    (2, {"cpu": 4, "gpu": 1}, [{"CPU": 4, "GPU": 1}]),
])
def test_a_trial_reserves_its_cpu_workers_in_its_own_placement_group(workers, resources, bundles):
    group = trial_resources(trial_config(workers), ResourcesConfig(**resources))
    assert group.bundles == bundles


def run_isolated(code: str, args: list[str], log: Path, timeout: float) -> int:
    """Run `code` in a new Python process and session (its Ray with it), stdout and stderr to `log`; on a timeout
    fail the test. Every process of the session is stopped by PID afterwards, whatever happened."""
    with open(log, "w") as sink:  # a file: Ray's daemons inherit it and never close it
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no result in {timeout:.0f} s (a deadlock?): {log.read_text()[-3000:]}")
    finally:
        stop_session(proc.pid)
        assert not session_pids(proc.pid)


# A local Ray of 2 CPUs holds one trial (1 CPU) and its two workers (0.5 CPU each) at a time. With `concurrency`
# 2 and each trial asking for its CPU alone, both trials would start and wait forever for CPUs for their workers.
ONE_TRIAL_AT_A_TIME = """
    import sys
    from pathlib import Path

    import ray

    from sdp_core.sweep.preflight import resolve_sweep
    from sdp_core.sweep.driver import run_sweep
    from sdp_core.sweep.store import SweepStore

    ray.init(address="local", num_cpus=2, include_dashboard=False, dashboard_port=int(sys.argv[3]),
             log_to_driver=False)
    cfg = resolve_sweep(sys.argv[1], ["base.training.workers=2", "concurrency=2", "num_trials=2", "resources.cpu=1",
                                      "base.training.cpu_per_worker=0.5", "base.training.max_steps=2"])
    store = SweepStore(Path(sys.argv[2]))
    store.create(cfg)
    run_sweep(cfg, cfg.search_space, store)
"""


@pytest.mark.slow
def test_concurrent_trials_that_fit_one_at_a_time_with_their_workers_all_finish(tmp_path):
    out = tmp_path / "out"
    code = run_isolated(ONE_TRIAL_AT_A_TIME, [SMOKE, str(out), str(free_port())], tmp_path / "log", timeout=240)
    assert code == 0, (tmp_path / "log").read_text()[-3000:]
    rows = [json.loads(p.read_text()) for p in (out / "trials").glob("*.json")]
    assert len(rows) == 2 and all(r["state"] == "finished" for r in rows), [r["error"] for r in rows]
