"""Faults injected into real runs: Ray workers SIGKILLed mid-trial (retried, bounded), a trial that raises
(recorded as failed, the sweep goes on), and a full disk while writing results and reports (one line, exit 2,
nothing half-written). The driver killed with SIGKILL is covered in test_sweep_cli.py."""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import ray

from benchmarks.proctree import descendants
from sdp_core.config import parse_model
from sdp_core.config.sweep import SweepConfig
from sdp_core.errors import UserError
from sdp_core.sweep import driver
from sdp_core.sweep.driver import GridSearch, run_sweep, write_row
from sdp_core.sweep.store import SweepStore
from tests.conftest import run_main, small_trial_dict


def grid(arms: dict[str, dict], **fields) -> SweepConfig:
    data = {"name": "faults", "base": small_trial_dict(training={"max_steps": 30}),
            "objectives": [{"metric": "val_perplexity", "mode": "min"}],
            "experiments": arms, "seeds": [0], "concurrency": 1, **fields}
    return parse_model(SweepConfig, data)


def training_worker(skip: set[int]) -> int | None:
    """A process of ours running a Tune function trial right now (Ray titles it `ray::ImplicitFunc.train`)."""
    for pid in descendants(os.getpid()):
        try:
            if pid not in skip and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::ImplicitFunc.train"):
                return pid
        except OSError:
            continue
    return None


def kill_workers(store: SweepStore, plan: dict[str, int], done: threading.Event, log: list[str]) -> None:
    """Trials run one at a time in grid order: for each trial `t` of `plan` (in order), once the trials before it
    have their rows, SIGKILL the process running it `plan[t]` times; each kill hits a new process (the retry's)."""
    killed: set[int] = set()
    for t, kills in plan.items():
        for _ in range(kills):
            while not done.is_set():
                before = list(plan)[:list(plan).index(t)]
                pid = training_worker(killed) if all(store.read_row(b) for b in before) else None
                if pid:
                    time.sleep(0.3)  # into the trial
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:  # it ended meanwhile: wait for the next process of this trial
                        continue
                    killed.add(pid)
                    log.append(t)
                    break
                time.sleep(0.05)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_killed_workers_are_retried_a_bounded_number_of_times_and_nothing_is_lost(local_ray, tmp_path, monkeypatch):
    # A bound of one retry (the shipped bound is 2): each retry is a new trial actor importing the training stack
    # (about 10 CPU-s); one is enough to tell a bounded retry from none (`once`) and from an unbounded one (`always`),
    # and the bound the driver reads is the one in force, whatever its value.
    retries = 1
    monkeypatch.setattr(driver, "MAX_RETRIES", retries)
    # In this order each fault is followed by a trial that runs to its end: the sweep goes on after a trial that
    # raised (`fails`) and after one whose retries ran out (`always`), without a trial added after the last fault.
    cfg = grid({"fails": {"set": {"data.source": "file", "data.path": "/nonexistent/data.jsonl"}},
                "always": {"set": {"training.learning_rate": 3e-3}}, "once": {"set": {"training.learning_rate": 1e-3}}})
    store = SweepStore(tmp_path / "out")
    store.create(cfg)
    done, log = threading.Event(), []
    plan = {"fails-s0": 0, "always-s0": retries + 1, "once-s0": 1}
    watcher = threading.Thread(target=kill_workers, args=(store, plan, done, log))
    watcher.start()
    try:
        rows = run_sweep(cfg, None, store)
    finally:
        done.set()
        watcher.join()

    assert log == ["always-s0"] * (retries + 1) + ["once-s0"]
    assert sorted(rows) == ["always-s0", "fails-s0", "once-s0"]  # no trial lost
    assert rows["fails-s0"]["state"] == "failed" and "nonexistent" in rows["fails-s0"]["error"]  # raised: no retry
    assert rows["always-s0"]["state"] == "failed" and "worker died" in rows["always-s0"]["error"]  # after a raise
    # killed once, retried from the start, finished: the sweep went on after every fault
    assert rows["once-s0"]["state"] == "finished"


ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_while_writing_a_report_is_one_line_and_leaves_no_partial_folder(tmp_path, monkeypatch):
    from tests.synthetic_sweep import write_synthetic_sweep

    sweep_dir = write_synthetic_sweep(tmp_path / "sweep", n_trials=6)
    real_write = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "summary.md":
            raise ENOSPC
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    result = run_main("report", str(sweep_dir))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "disk full" in result.stderr, result.stderr
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["sweep.yaml", "trials"]  # no report, no temp folder


def test_full_disk_while_writing_a_trial_result_is_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "trial"
    real_fsync = os.fsync

    def full(fd):  # the disk is full where the trial writes its outputs (the detection cache still writes)
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(out)):
            raise ENOSPC
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    result = run_main("trial", "--set", "training.max_steps=1", "--set", "data.n_train=60", "--set",
                      "evaluation.exposure=false", "--set", "evaluation.mia=false", "--set", "tokenizer.vocab_size=400",
                      "--set", "detector.policy=phone", "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "disk full" in result.stderr, result.stderr
    assert not list(out.rglob("result.json")) and not list(out.rglob("*.tmp"))


def test_a_row_that_cannot_be_written_is_kept_for_the_driver_not_raised_into_tune(tmp_path):
    store = SweepStore(tmp_path)
    (tmp_path / "trials").write_text("a file where the trials folder should be")
    search = GridSearch([], store)
    assert write_row(search, store, {"trial_id": "t", "state": "finished"}) is False
    assert isinstance(search.write_error, OSError | UserError)  # raised by tune_run after the run, as one line


def test_a_result_row_on_disk_is_always_complete_json(tmp_path):
    store = SweepStore(tmp_path)
    store.trials_dir.mkdir(parents=True)
    row = {"trial_id": "t", "state": "finished", "metrics": {"x": 1.0}}
    store.write_row(row)
    assert json.loads((store.trials_dir / "t.json").read_text()) == row
    assert not list(store.trials_dir.glob(".*"))  # the temp file was renamed, not left behind
