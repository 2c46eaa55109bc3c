"""`sdp-sweep run` / `resume` / `report` as a user runs them: bad input, a crash and its resume, the report rebuilt
from the stored results of that real sweep, a Ray job on a real head, and the cluster-launcher config."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import ray
import yaml
from optuna.trial import TrialState

from sdp_core.config.loading import load_sweep_config, load_trial_config
from sdp_core.sweep.driver import open_studies
from sdp_core.sweep.store import SweepStore
from tests.conftest import REPO, run_main

SMOKE = REPO / "sweeps" / "smoke.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_sweep(path: Path, **changes) -> Path:
    data = yaml.safe_load(SMOKE.read_text())
    path.write_text(yaml.safe_dump({**data, **changes}))
    return path


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("case", ["unknown mechanism", "empty search space", "unreachable address"])
def test_bad_input_is_one_line_exit_2_and_no_folder(tmp_path, case):
    if case == "unknown mechanism":
        args = [str(write_sweep(tmp_path / "s.yaml", mechanisms=["dpsgd", "magic"]))]
    elif case == "empty search space":
        for folder in ("sweeps", "search_spaces"):
            (tmp_path / folder).mkdir()
        (tmp_path / "search_spaces" / "empty.yaml").write_text("parameters: {}\n")
        args = [str(write_sweep(tmp_path / "sweeps" / "s.yaml", search_space="empty.yaml"))]
    else:
        args = [str(SMOKE), "--address", f"127.0.0.1:{free_port()}"]
    out = tmp_path / "out"
    result = run_main("run", *args, "--out", str(out))  # in this process, as tests/test_bad_inputs' cases
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert {"unknown mechanism": "magic", "empty search space": "search space is empty",
            "unreachable address": "no Ray cluster answers"}[case] in lines[0]
    assert not out.exists()


# ---------------------------------------------------------------------------------------- crash + resume


def session_pids(sid: int) -> list[int]:
    """Live processes of session `sid` (zombies left out: dead already, only waiting to be reaped)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-s", str(sid)], capture_output=True, text=True).stdout
    return [int(pid) for pid, stat in (line.split() for line in out.splitlines()) if not stat.startswith("Z")]


def stop_session(sid: int, first: signal.Signals = signal.SIGTERM) -> None:
    """Stop every process of a session this test started (its own Ray), by PID; SIGKILL what is left."""
    for sig in (first, signal.SIGKILL):
        for pid in session_pids(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        for _ in range(20):
            if not session_pids(sid):
                return
            time.sleep(0.5)


@pytest.fixture(scope="module")
def resumed_sweep(tmp_path_factory) -> tuple[Path, dict[str, str], subprocess.CompletedProcess]:
    """The smoke sweep of 4 trials, SIGKILLed (driver and its local Ray) once a trial finished, then resumed: its
    folder, the rows stored before the kill, and the resume's result."""
    out = tmp_path_factory.mktemp("killed") / "out"
    proc = subprocess.Popen([sys.executable, "-m", "sdp_core.cli", "run", str(SMOKE), "--out", str(out),
                             "--set", "num_trials=4"], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not list((out / "trials").glob("*.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before any trial finished"
            time.sleep(0.5)
    finally:
        stop_session(proc.pid, signal.SIGKILL)  # the driver and the local Ray it started, as in a crash
        proc.wait()
    before = {p.name: p.read_text() for p in (out / "trials").glob("*.json")}
    return out, before, run_main("resume", str(out))  # in this process: a new interpreter only imports the stack again


@pytest.mark.slow
def test_sigkilled_sweep_resumes_to_exactly_the_planned_trials(resumed_sweep):
    out, before, result = resumed_sweep
    assert 1 <= len(before) < 4
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {p.name: json.loads(p.read_text()) for p in (out / "trials").glob("*.json")}
    assert sorted(rows) == [f"trial_{i:04d}.json" for i in range(4)]
    assert all(r["state"] == "finished" for r in rows.values())
    assert all((out / "trials" / name).read_text() == text for name, text in before.items())  # kept as they were
    assert "4/4 trials" in result.stdout
    shown = Path(result.stdout.strip().splitlines()[-1])
    assert shown == out / "report" / "index.html" and shown.is_file()  # sweep -> report, the page itself
    # Only the Pareto front's models are kept (DP noise is secret: they cannot be re-trained from their configs).
    objectives = [(r["privacy"]["notion"], list(r["objectives"].values())) for r in rows.values()]  # a front per notion
    front = {name[:-5] for (name, row), (notion, mine) in zip(rows.items(), objectives)
             if not any(n == notion and all(o <= m for o, m in zip(other, mine)) and other != mine
                        for n, other in objectives)}
    assert {p.name for p in (out / "models").iterdir()} == front
    assert all((out / "models" / t / "model").is_dir() and (out / "models" / t / "result.json").is_file() for t in front)

    import optuna

    summaries = optuna.get_all_study_summaries(optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))))
    assert len(summaries) == 2  # one study per mechanism
    # the trials running at the kill were re-run as themselves, not added
    assert sorted(s.n_trials for s in summaries) == [2, 2]


def test_a_sigterm_stops_the_sweep_with_the_resume_line(tmp_path, monkeypatch, capsys):
    """`kill PID` (a scheduler's stop) while the sweep prepares: the line that says how to continue, exit 130, not
    Ray's SIGTERM handler's exit (`ray.init` installs one: a stack dump)."""
    from sdp_core.sweep import cli, driver

    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs before this ends
        raise AssertionError("SIGTERM did not stop the sweep")

    monkeypatch.setattr(driver, "run_sweep", killed)
    cfg = load_sweep_config(SMOKE)
    store = SweepStore(tmp_path / "out")
    store.create(cfg)
    original = signal.getsignal(signal.SIGTERM)
    try:
        assert cli._sweep(store, cfg) == 130
    finally:
        signal.signal(signal.SIGTERM, original)
    assert capsys.readouterr().err.splitlines()[-1] == (f"interrupted; continue the sweep with: sdp-sweep resume "
                                                        f"{store.root}")


def test_a_sigterm_during_the_tune_run_is_its_graceful_stop(capsys):
    """Inside Tune's run, SIGTERM is Ctrl-C: Tune's stop (the trials running are re-run on resume), whose closing
    lines then say `sdp-sweep resume DIR` (`closing_lines`)."""
    from ray.tune.tune import _setup_signal_catching

    from sdp_core.sweep.cli import stop_as_on_ctrl_c

    original = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        stopped = _setup_signal_catching()
        signal.signal(signal.SIGTERM, stop_as_on_ctrl_c)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stopped.wait(5)
    finally:
        signal.signal(signal.SIGINT, original[0])
        signal.signal(signal.SIGTERM, original[1])


# -------------------------------------------------------------------------------------- cluster config


def test_cluster_config_validates_against_rays_schema():
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    types = config["available_node_types"]
    assert types[config["head_node_type"]]["resources"].get("GPU", 0) == 0
    assert any(t["resources"].get("GPU", 0) >= 1 for t in types.values())
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert any(t["resources"].get("GPU", 0) == 0 and t["resources"]["CPU"] >= 8 for t in workers)  # preparation's
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)
    assert any("--dashboard-host=127.0.0.1" in c for c in config["head_start_ray_commands"])
    setup = config["setup_commands"]
    assert next(i for i, c in enumerate(setup) if "torch==" in c) < next(i for i, c in enumerate(setup) if "-e " in c)


def test_cluster_config_with_fractional_resources_is_rejected():
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    config["available_node_types"]["worker_gpu"]["resources"]["CPU"] = 0.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, schema)


def test_a_ctrl_c_prints_the_sweeps_own_line_not_tunes_restore_advice(capsys, caplog):
    """Tune's own SIGINT handler announces the stop, and Tune's run ends with `Tuner.restore(...)` advice: both give
    way to the sweep's line (its closing lines then say `sdp-sweep resume DIR`); other warnings pass."""
    import logging

    from ray.tune.tune import _setup_signal_catching

    from sdp_core.sweep.driver import InterruptionNotes

    logger = logging.getLogger("ray.tune.tune")
    notes = InterruptionNotes()
    logger.addFilter(notes)
    original = signal.getsignal(signal.SIGINT)
    try:
        _setup_signal_catching()
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # what Ctrl-C calls: Tune's handler
        logger.warning('Experiment has been interrupted, but the most recent state was saved.\nResume experiment '
                       'with: Tuner.restore(path="/x", trainable=...)')
        logger.error("Trials did not complete: %s", ["trial_0001"])
        logger.warning("another warning")
    finally:
        logger.removeFilter(notes)
        signal.signal(signal.SIGINT, original)
    assert [r.getMessage() for r in caplog.records if r.name == "ray.tune.tune"] == ["another warning"]
    assert capsys.readouterr().err.splitlines() == [InterruptionNotes.STOPPING]


def test_without_a_terminal_the_live_view_prints_a_line_per_trial_started(tmp_path, capsys):
    """`make quickstart > log`: the log shows each trial starting, not only minutes later when one finishes."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from sdp_core.sweep.live import LiveView
    from sdp_core.sweep.store import SweepStore

    view = LiveView(SweepStore(tmp_path / "out"), lambda rows: 4, console=Console(file=io.StringIO()))
    trial = SimpleNamespace(config={"trial_id": "trial_0001", "trial": {"mechanism": {"name": "jft"}},
                                    "params": {"mechanism.name": "jft", "training.learning_rate": 0.00241}})
    with view:
        view.on_trial_start(0, [], trial)
    assert capsys.readouterr().out == "trial_0001 started: jft learning_rate=0.00241\n"


@pytest.mark.slow
def test_every_trial_of_the_multi_objective_sweep_spends_exactly_its_target(resumed_sweep):
    """The resumed smoke sweep (DP-SGD and JFT, two objectives, a JFT-only parameter): every trial finished at its
    ε target under its mechanism's notion, with its seed and objectives, and the Optuna studies hold each trial once."""
    out = resumed_sweep[0]
    cfg = load_sweep_config(SMOKE, ["num_trials=4"])
    rows = {p.stem: json.loads(p.read_text()) for p in (out / "trials").glob("*.json")}
    for tid, row in rows.items():
        assert row["state"] == "finished", row["error"]
        target = row["config"]["privacy"]["target_epsilon"]
        assert 0.99 * target <= row["privacy"]["epsilon"] <= target
        assert row["privacy"]["notion"] == {"dpsgd": "DP", "jft": "SDP"}[row["config"]["mechanism"]["name"]]
        assert row["seed"] == cfg.seed + int(tid[-4:])
        assert row["objectives"] == {o.metric: row["metrics"][o.metric] for o in cfg.objectives}
    studies = open_studies(cfg, SweepStore(out))
    trials = [t for study in studies.values() for t in study.get_trials()]
    assert [t.state for t in trials] == [TrialState.COMPLETE] * cfg.num_trials
    assert sorted(t.user_attrs["trial_id"] for t in trials) == sorted(rows)
    assert [len(study.get_trials()) for study in studies.values()] == [cfg.per_cell] * len(cfg.cells)


@pytest.mark.slow
def test_a_report_is_rebuilt_from_the_stored_results_and_nothing_re_runs(resumed_sweep, tmp_path):
    sweep_dir = resumed_sweep[0]
    rows = [json.loads(p.read_text()) for p in sorted((sweep_dir / "trials").glob("*.json"))]
    assert len(rows) == 4
    stored = {p: p.stat().st_mtime_ns for p in (sweep_dir / "trials").iterdir()}

    result = run_main("report", str(sweep_dir), "--out", str(tmp_path / "report"))  # in this process, as the resume
    assert result.returncode == 0, result.stderr
    out = tmp_path / "report"
    assert result.stdout.strip() == str(out / "index.html")
    assert {p: p.stat().st_mtime_ns for p in (sweep_dir / "trials").iterdir()} == stored  # nothing re-ran

    frame = pd.read_parquet(out / "trials.parquet")
    assert sorted(frame["trial_id"]) == sorted(r["trial_id"] for r in rows)
    assert set(frame["privacy.notion"]) <= {"DP", "SDP"} and frame["privacy.accountant"].eq("rdp").all()

    # The front: finished trials not dominated on (val perplexity, private-token perplexity) by one of their notion.
    points = {r["trial_id"]: (r["privacy"]["notion"], r["metrics"]["val_perplexity"],
                              r["metrics"]["val_private_perplexity"]) for r in rows if r["state"] == "finished"}
    front = {i for i, p in points.items()
             if not any(q[0] == p[0] and q[1] <= p[1] and q[2] <= p[2] and q != p for q in points.values())}
    assert {p.stem for p in (out / "frontier").glob("*.yaml")} == front
    for path in (out / "frontier").glob("*.yaml"):
        row = next(r for r in rows if r["trial_id"] == path.stem)
        assert load_trial_config(path).model_dump(mode="json") == row["config"]

    summary = (out / "summary.md").read_text()
    assert "The best model of each guarantee: at ε = 3 (" in summary and "δ = 1e-5, RDP)" in summary
    assert "| DP-SGD |" in summary or "| JFT |" in summary
