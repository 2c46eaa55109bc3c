"""Pre-flight: a sweep whose trials cannot run on its data fails before Ray starts (one line, exit 2, no folder);
a sweep's last line says why no trial finished, or how many did not."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sdp_core.config import parse_model
from sdp_core.config.loading import load_sweep_config
from sdp_core.config.sweep import SearchSpace, SweepConfig
from sdp_core.sweep.cli import closing_lines
from sdp_core.sweep.preflight import preflight, resolve_sweep, sweep_setting
from tests.conftest import REPO, run_main


def _chats(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"text": f"USR: my order ORD-{100000 + i} is late.\nSYS: Sorry."}) + "\n"
                            for i in range(n)))
    return path


def test_quickstart_on_200_records_fails_before_ray_with_the_canary_arithmetic(tmp_path):
    data, out = _chats(tmp_path / "chats.jsonl", 200), tmp_path / "out"
    r = run_main("run", str(REPO / "sweeps" / "quickstart.yaml"), "--data", str(data), "--out", str(out))
    # 200 records, 10 % each held out for validation and test: 160 train; two families of 25 x 20 need 1000.
    assert r.returncode == 2 and not out.exists() and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"error: {REPO}/sweeps/quickstart.yaml: base.data.canaries: 25 canaries x 20 repeats x 2 families need 1000 "
        "training records; the data has 160 (of 200 records, validation and test each 10% held out): lower "
        "base.data.canaries.count or base.data.canaries.repeats, or use more data"]


def test_the_advice_of_a_refusal_works_when_followed_and_a_trial_setting_on_a_sweep_blames_set(tmp_path):
    """`--set data.canaries.count=N` on a sweep is no sweep setting: the line blames `--set` (not the sweep file)
    and gives the `base.` form, which, with the refusal's own advice, gets past the check."""
    data, out = _chats(tmp_path / "chats.jsonl", 200), tmp_path / "out"
    sweep = str(REPO / "sweeps" / "quickstart.yaml")
    r = run_main("run", sweep, "--data", str(data), "--out", str(out), "--set", "data.canaries.count=4")
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.splitlines() == ["error: --set: data.canaries.count=4: a sweep's trial settings are under "
                                     "base: --set base.data.canaries.count=4"]
    fixed = r.stderr.split("--set ")[-1].strip()
    cfg = resolve_sweep(sweep, ["base.data.source=file", f"base.data.path={data}", fixed])
    preflight(cfg, sweep)  # two families of 4 canaries x 20 repeats fit the 160 training records
    assert cfg.base.data.canaries.count == 4


def test_a_sweep_refusal_names_the_search_space_or_grid_arm_that_sets_the_value():
    sweep = load_sweep_config(REPO / "sweeps" / "quickstart.yaml")
    space = SearchSpace(parameters={"training.batch_size": {"type": "choice", "values": [16, 400]}})
    searched = sweep.model_copy(update={"search_space": space})
    assert sweep_setting(searched, None, "training.batch_size") == "search_space.training.batch_size"
    assert sweep_setting(searched, None, "data.canaries.count") == "base.data.canaries.count"
    grid = parse_model(SweepConfig, {"name": "grid", "objectives": [{"metric": "val_perplexity", "mode": "min"}],
                                     "experiments": {"few": {"set": {"data.canaries": {"count": 5}}}}})
    assert sweep_setting(grid, "few", "data.canaries.count") == "experiments.few.set.data.canaries.count"
    assert sweep_setting(grid, "few", "training.batch_size") == "base.training.batch_size"


def test_fewer_canaries_fit_and_a_batch_larger_than_the_data_is_refused(tmp_path):
    data, out = _chats(tmp_path / "chats.jsonl", 200), tmp_path / "out"
    r = run_main("run", str(REPO / "sweeps" / "quickstart.yaml"), "--data", str(data), "--out", str(out),
                 "--set", "base.data.canaries.count=4", "--set", "search_space=" + json.dumps(
                     {"parameters": {"training.batch_size": {"type": "choice", "values": [16, 400]}}}))
    assert r.returncode == 2 and not out.exists()
    (line,) = r.stderr.splitlines()
    assert line.endswith(": search_space.training.batch_size: the expected batch of 400 is more than the 160 training records "
                         "(of 200 records, validation and test each 10% held out): every private step would be the "
                         "whole data")


def test_validate_does_the_generated_data_arithmetic_and_mechanism_needs(tmp_path):
    r = run_main("validate", str(REPO / "sweeps" / "quickstart.yaml"))
    assert r.returncode == 0, r.stderr
    sweep = (REPO / "sweeps" / "quickstart.yaml").read_text().replace("n_train: 1000", "n_train: 150")
    (tmp_path / "small.yaml").write_text(sweep.replace("search_space: quickstart.yaml",
                                                       f"search_space: {REPO / 'search_spaces' / 'quickstart.yaml'}"))
    r = run_main("validate", str(tmp_path / "small.yaml"))
    assert r.returncode == 2 and "need 1000 training records; the data has 150 (data.n_train)" in r.stderr
    lstm = sweep.replace("mechanisms: [dpsgd, jft, atdp]", "mechanisms: [sdpsgd]")
    assert lstm != sweep
    lstm = lstm.replace("n_train: 150", "n_train: 1000")
    (tmp_path / "lstm.yaml").write_text(lstm.replace(
        "search_space: quickstart.yaml",
        "search_space: {parameters: {training.learning_rate: {type: loguniform, low: 1.0e-4, high: 1.0e-2}}}"))
    r = run_main("validate", str(tmp_path / "lstm.yaml"))
    assert r.returncode == 2 and "sdpsgd needs model.arch: lstm" in r.stderr


def _row(state: str, error: str | None = None) -> dict:
    return {"state": state, "error": error}


def test_a_sweep_with_no_finished_trial_exits_1_and_says_why_last():
    rows = {"a": _row("failed", "20 canaries x 10 repeats need 200 training records\ntraceback"),
            "b": _row("failed", "20 canaries x 10 repeats need 200 training records\ntraceback"),
            "c": _row("infeasible", "ε target 0.01 cannot be reached")}
    summary, last, code = closing_lines(rows, 3, Path("/r"))
    assert code == 1 and summary == ["3/3 trials: 1 infeasible, 2 failed"]
    assert last == "error: no trial finished; 2 of 3 with: 20 canaries x 10 repeats need 200 training records"


def test_a_sweep_with_some_failed_trials_says_how_many_last():
    rows = {"a": _row("finished"), "b": _row("failed", "worker died"), "c": _row("finished")}
    summary, last, code = closing_lines(rows, 3, Path("/r"))
    assert code == 0 and last.startswith("1 of 3 trials did not finish")
    assert closing_lines({"a": _row("finished")}, 1, Path("/r")) == (["1/1 trials: 1 finished"], None, 0)
    summary, last, code = closing_lines({"a": _row("finished")}, 2, Path("/r"))
    assert code == 1 and summary[-1] == "the sweep stopped early; continue it with: sdp-sweep resume /r"


def test_set_mechanisms_drops_the_parameters_of_the_mechanisms_it_leaves_out():
    """The quickstart without ATDP: ATDP's four search parameters go with it; JFT's phase-1 epochs and the shared
    ones stay (as the search space file lists them for those mechanisms)."""
    quickstart = REPO / "sweeps" / "quickstart.yaml"
    full = yaml.safe_load((REPO / "search_spaces" / "quickstart.yaml").read_text())["parameters"]
    cfg = resolve_sweep(quickstart, ["mechanisms=[dpsgd,jft,crt]"])
    assert cfg.mechanisms == ["dpsgd", "jft", "crt"]
    assert set(cfg.search_space.parameters) == set(full) - {"mechanism.w", "mechanism.escalation",
                                                            "mechanism.jitter", "mechanism.ceiling"}
    assert set(resolve_sweep(quickstart).search_space.parameters) == set(full)
