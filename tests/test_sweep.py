"""The sweep layer in one process: search space, search algorithm and rows (no Ray), then a real local Ray for a
multi-objective sweep of real trials (the 2-worker Ray Train private phase: test_data_parallel.py)."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sdp_core.config import parse_model
from sdp_core.config.sweep import Cell, SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError, PrivacyError
from sdp_core.sweep import driver
from sdp_core.sweep.driver import SweepSearch, open_studies, reconcile, sweep_trial
from sdp_core.sweep.space import check_space, sample, trial_config_dict
from sdp_core.sweep.store import SweepStore
from sdp_core import trial as trial_module  # the trial function reads run_trial from here
from sdp_core.row import TrialRow
from sdp_core.trial import TrainingProgress
from tests.conftest import small_trial_dict

OBJECTIVES = ["val_perplexity", "val_private_perplexity"]


def tiny_sweep(**fields) -> SweepConfig:
    """Two DP mechanisms, a conditional JFT parameter, 3-step trials."""
    data = {
        "name": "tiny", "seed": 5, "base": small_trial_dict(training={"max_steps": 3}),
        "mechanisms": ["dpsgd", "jft"],
        "objectives": [{"metric": m, "mode": "min"} for m in OBJECTIVES],
        "search_space": {"parameters": {
            "training.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 5e-3},
            "mechanism.phase1_epochs": {"type": "int", "low": 1, "high": 2},
        }},
        "num_trials": 4, "concurrency": 2,
    }
    return parse_model(SweepConfig, {k: v for k, v in {**data, **fields}.items() if v is not None})  # None: left out


# ------------------------------------------------------------------------------------------ space


def test_mechanism_fields_are_sampled_only_for_their_mechanism():
    cfg = tiny_sweep()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for mechanism in ("dpsgd", "jft"):
        params = sample(study.ask(), cfg.search_space, Cell(mechanism), cfg.mechanisms)
        assert params["mechanism.name"] == mechanism
        assert ("mechanism.phase1_epochs" in params) == (mechanism == "jft")
    single = sample(study.ask(), cfg.search_space, Cell("dpsgd"), ["dpsgd"])
    assert set(single) == {"training.learning_rate"}  # one mechanism: nothing to record


def test_trials_per_mechanism_sets_the_trial_count_and_an_uneven_count_is_refused():
    assert tiny_sweep(trials_per_mechanism=3, num_trials=None).num_trials == 6
    with pytest.raises(ConfigError, match="do not divide evenly over 2 mechanisms"):
        tiny_sweep(num_trials=5)
    with pytest.raises(ConfigError, match="not trials_per_mechanism × mechanisms = 6"):
        tiny_sweep(trials_per_mechanism=3, num_trials=4)


def test_trial_config_is_base_plus_mechanism_plus_samples_with_seed_offset():
    cfg = tiny_sweep()
    data = trial_config_dict(cfg, {"mechanism.name": "jft", "mechanism.phase1_epochs": 2,
                                   "training.learning_rate": 0.004}, number=3)
    trial = parse_model(TrialConfig, data)
    assert trial.mechanism.name == "jft" and trial.mechanism.phase1_epochs == 2
    assert trial.training.learning_rate == 0.004 and trial.training.max_steps == 3
    assert trial.seed == 5 + 3 and trial.name == "tiny-trial_0003"


@pytest.mark.parametrize("parameters, message", [
    ({"mechanism.w": {"type": "uniform", "low": 0.1, "high": 0.9}}, "none of the sweep's mechanisms has this field"),
    ({"training.learning_rat": {"type": "uniform", "low": 0.1, "high": 0.9}}, "unknown key"),
    ({"training.batch_size": {"type": "int", "low": 0, "high": 8}}, "must be >= 1"),
])
def test_space_that_no_trial_accepts_is_rejected_before_running(parameters, message):
    cfg = tiny_sweep(search_space={"parameters": parameters})
    with pytest.raises(ConfigError, match=message):
        check_space(cfg, cfg.search_space, "sweep.yaml")


# --------------------------------------------------------------------------- trainable and search


@pytest.mark.parametrize("interval, early_stopping, expected", [
    (0.0, True, [(1, 4.0, False), (2, 3.5, False), (2, 3.5, True)]),
    (3600.0, False, [(2, None, True)]),  # throttled: only the final report, which still carries the last step
])
def test_trial_function_reports_held_out_progress_then_one_final_row(monkeypatch, interval, early_stopping, expected):
    reports = []
    monkeypatch.setattr(driver.tune, "report", reports.append)
    config = {"trial_id": "trial_0000", "params": {}, "objectives": OBJECTIVES,
              "trial": small_trial_dict(name="t", seed=1)}
    held_out = iter([4.0, 3.5])

    def fake_run_trial(cfg, out_dir, on_step, on_plan, prepared):
        on_step(TrainingProgress(1, "dp", None, lambda: next(held_out)))
        on_step(TrainingProgress(2, "dp", None, lambda: next(held_out)))
        return TrialRow(name=cfg.name, state="finished", seed=cfg.seed, config={}, metrics={"val_perplexity": 9.0})

    monkeypatch.setattr(trial_module, "run_trial", fake_run_trial)
    monkeypatch.setattr(driver.time, "monotonic", iter(range(100)).__next__)  # one second per call
    sweep_trial(config, report_interval=interval, early_stopping=early_stopping)
    assert [(r["step"], r["val_loss"], r["final"]) for r in reports] == [(s, v, f) for s, v, f in expected]
    assert reports[-1]["val_perplexity"] == 9.0
    assert "train_loss" not in reports[0]  # no statistic of a private batch
    assert json.loads(reports[-1]["row"])["state"] == "finished"


@pytest.mark.parametrize("error, state, message", [
    (PrivacyError("target epsilon 1e-09 needs sigma > 1000"), "infeasible", "target epsilon 1e-09"),
    (RuntimeError("boom"), "failed", "RuntimeError: boom"),
])
def test_trial_function_turns_errors_into_rows(monkeypatch, error, state, message):
    reports = []
    monkeypatch.setattr(driver.tune, "report", reports.append)

    def failing_run_trial(cfg, out_dir, on_step, on_plan, prepared):
        raise error

    monkeypatch.setattr(trial_module, "run_trial", failing_run_trial)
    sweep_trial({"trial_id": "trial_0001", "params": {}, "objectives": OBJECTIVES,
                 "trial": small_trial_dict(name="t", seed=1)})
    (final,) = reports
    row = json.loads(final["row"])
    assert final["final"] and row["state"] == state and message in row["error"]


def _final(config: dict, state: str = "finished", **metrics) -> dict:
    row = TrialRow.stub(config, state, None if state == "finished" else "reason", metrics)
    return {"final": True, "row": json.dumps(row.to_dict())}


def test_search_records_each_end_and_resume_reruns_only_the_unfinished(tmp_path):
    cfg = tiny_sweep(num_trials=6)
    store = SweepStore(tmp_path)
    store.create(cfg)
    studies = open_studies(cfg, store)
    search = SweepSearch(cfg, cfg.search_space, store, studies, orphans={}, stopped_by_scheduler={"b"})
    configs = {t: search.suggest(t) for t in "abcde"}
    assert [c["trial_id"] for c in configs.values()] == [f"trial_000{i}" for i in range(5)]
    assert [c["trial"]["mechanism"]["name"] for c in configs.values()] == ["dpsgd", "jft"] * 2 + ["dpsgd"]

    search.on_trial_complete("a", _final(configs["a"], val_perplexity=30.0, val_private_perplexity=40.0))
    search.on_trial_complete("b", {"final": False, "step": 2, "val_loss": 5.0})  # stopped by ASHA
    search.on_trial_complete("c", error=True)  # its worker died
    search.on_trial_complete("d", _final(configs["d"], "infeasible"))
    search.on_trial_complete("e", {"final": False, "step": 1, "val_loss": 6.0})  # interrupted: no row

    rows = store.rows()
    assert {t: r["state"] for t, r in rows.items()} == {
        "trial_0000": "finished", "trial_0001": "early_stopped", "trial_0002": "failed", "trial_0003": "infeasible"}
    assert rows["trial_0000"]["objectives"] == {"val_perplexity": 30.0, "val_private_perplexity": 40.0}
    assert rows["trial_0001"]["objectives"] == {"val_perplexity": None, "val_private_perplexity": None}
    assert rows["trial_0002"]["params"] == configs["c"]["params"]
    dpsgd, jft = studies["dpsgd"], studies["jft"]
    assert [t.state for t in dpsgd.get_trials()] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING]
    assert [t.state for t in jft.get_trials()] == [TrialState.PRUNED, TrialState.FAIL]
    assert dpsgd.get_trials()[0].values == [30.0, 40.0]  # stopped trials never reach Optuna as COMPLETE

    # A crash after writing a row but before telling Optuna: resume tells it; trial_0005 is re-run as itself.
    late = TrialRow.stub(configs["e"], "finished", None, {"val_perplexity": 1.0, "val_private_perplexity": 2.0})
    late = late.in_sweep("trial_0004", configs["e"]["params"], ["val_perplexity", "val_private_perplexity"]).to_dict()
    new = search.suggest("f")
    assert new["trial_id"] == "trial_0005" and new["trial"]["mechanism"]["name"] == "jft"
    assert search.suggest("g") == "FINISHED"  # three trials each: the budget is spent
    store.write_row(late)
    with open(store.journal_file, "ab") as journal:  # and the kill cut Optuna's last append short
        journal.write(b'{"op_code": 6, "worker_id": "x", "trial_id": 4, "us')
    studies = open_studies(cfg, store)
    orphans = reconcile(cfg, studies, store)
    assert {m: [t.number for t in ts] for m, ts in orphans.items()} == {"jft": [2]}
    assert studies["dpsgd"].get_trials()[2].state == TrialState.COMPLETE
    again = SweepSearch(cfg, cfg.search_space, store, studies, orphans, set())
    assert again.suggest("h") == new  # same id, parameters and seed: `reopen_trial` still reopens a running trial
    assert again.suggest("i") == "FINISHED"


def test_each_mechanism_searches_alone_with_an_equal_share(tmp_path):
    """Past TPE's random start-up trials, one mechanism's draws follow its own results only: two runs in which
    JFT's results differ hand DP-SGD the same parameters, and every mechanism gets exactly its share."""
    cfg = tiny_sweep(trials_per_mechanism=12, num_trials=None)

    def run(jft_value: float, folder) -> list[dict]:
        store = SweepStore(folder)
        store.create(cfg)
        studies = open_studies(cfg, store)
        for i, study in enumerate(studies.values()):
            study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + 10_000 * i)
        search = SweepSearch(cfg, cfg.search_space, store, studies, {}, set())
        configs = []
        for i in range(cfg.num_trials):
            config = search.suggest(str(i))
            lr = config["params"]["training.learning_rate"]
            value = 100 * abs(lr - 2e-3) if config["trial"]["mechanism"]["name"] == "dpsgd" else jft_value + i
            search.on_trial_complete(str(i), _final(config, val_perplexity=value, val_private_perplexity=value))
            configs.append(config)
        assert search.suggest("last") == "FINISHED"
        return configs

    first, second = run(1.0, tmp_path / "a"), run(-50.0, tmp_path / "b")
    for configs in (first, second):
        counts = {m: sum(c["trial"]["mechanism"]["name"] == m for c in configs) for m in cfg.mechanisms}
        assert counts == {"dpsgd": 12, "jft": 12}
    dpsgd = lambda configs: [c["params"] for c in configs if c["trial"]["mechanism"]["name"] == "dpsgd"]  # noqa: E731
    assert dpsgd(first) == dpsgd(second)


def test_an_epsilon_ladder_gives_every_mechanism_and_epsilon_the_same_budget_and_survives_a_resume(tmp_path):
    """`privacy.target_epsilon: [8, 1, 3]` in base: one study per (mechanism, ε), each given exactly its trials, every
    trial calibrated to its cell's ε and recording it; No-DP, calibrated to no ε, is one cell. Half-way the driver
    dies with two trials running: resume hands those out again as themselves and fills every cell to its budget."""
    base = small_trial_dict(training={"max_steps": 3}, privacy={"target_epsilon": [8, 1, 3]})
    cfg = tiny_sweep(base=base, mechanisms=["dpsgd", "jft", "nodp"], trials_per_mechanism=2, num_trials=None)
    assert cfg.target_epsilons == [1.0, 3.0, 8.0] and cfg.num_trials == 2 * 7
    store = SweepStore(tmp_path)
    store.create(cfg)
    assert parse_model(SweepConfig, yaml.safe_load(store.config_file.read_text())) == cfg  # the stored sweep.yaml

    def cell_of(config: dict) -> tuple:
        trial = config["trial"]
        epsilon = trial["privacy"]["target_epsilon"] if trial["mechanism"]["name"] != "nodp" else None
        assert config["params"].get("privacy.target_epsilon") == epsilon
        return trial["mechanism"]["name"], epsilon

    search = SweepSearch(cfg, cfg.search_space, store, open_studies(cfg, store), {}, set())
    configs = [search.suggest(str(i)) for i in range(9)]
    for i, config in enumerate(configs[:7]):
        search.on_trial_complete(str(i), _final(config, val_perplexity=10.0 + i, val_private_perplexity=20.0))
    studies = open_studies(cfg, store)  # the driver died: trials 7 and 8 were running
    orphans = reconcile(cfg, studies, store)
    assert sum(map(len, orphans.values())) == 2
    again = SweepSearch(cfg, cfg.search_space, store, studies, orphans, set())
    rest = [again.suggest(f"r{i}") for i in range(cfg.num_trials - 7)]
    assert again.suggest("last") == "FINISHED"
    assert rest[:2] == configs[7:]  # the same ids, parameters and seeds
    handed = [cell_of(c) for c in configs[:7] + rest]
    expected = {("nodp", None)} | {(m, e) for m in ("dpsgd", "jft") for e in (1.0, 3.0, 8.0)}
    assert {cell: handed.count(cell) for cell in expected} == dict.fromkeys(expected, 2)
    assert sorted(c["trial_id"] for c in configs[:7] + rest) == [f"trial_{i:04d}" for i in range(14)]
    assert sorted(studies) == ["dpsgd@eps1", "dpsgd@eps3", "dpsgd@eps8", "jft@eps1", "jft@eps3", "jft@eps8", "nodp"]


@pytest.mark.parametrize("gap,per_mechanism", [(0.0, 9), (100.0, 5)])
def test_an_adaptive_budget_adds_trials_to_a_tied_ranking_until_the_cap_and_survives_a_resume(
        tmp_path, monkeypatch, gap, per_mechanism):
    """DP-SGD and ATDP (both DP) with 5 planned trials, 2 more while tied, cap 9. Tied utilities get 2 more each
    twice and stop at the cap; separated ones stop after the first look. The first run stops mid-round (as on
    Ctrl-C, one trial left running): the resume knows the round from the stored trials and ends where an
    uninterrupted run does. Tune is replaced by a loop over the search that scores each trial by its number."""
    cfg = tiny_sweep(mechanisms=["dpsgd", "atdp"], trials_per_mechanism=5, num_trials=None,
                     adaptive={"max_trials_per_mechanism": 9, "step": 2})
    store = SweepStore(tmp_path)
    store.create(cfg)
    left = {"trials": 12}  # the first run's: round one's 10, then 2 of round two's

    def fake_tune_run(cfg, store, search, scheduler, num_samples, callbacks, prepared):
        for i in range(num_samples):
            tune_id = f"{len(store.rows())}-{i}"
            config = search.suggest(tune_id)
            if not left["trials"]:
                return  # interrupted: that trial stays running in its study, without a row
            left["trials"] -= 1
            number = int(config["trial_id"].removeprefix("trial_")) // len(cfg.cells)  # its study's trial number
            value = number + (gap if config["trial"]["mechanism"]["name"] == "atdp" else 0.0)
            search.on_trial_complete(tune_id, _final(config, val_perplexity=value, val_private_perplexity=value))

    monkeypatch.setattr(driver, "tune_run", fake_tune_run)
    monkeypatch.setattr(driver, "prepare_once", lambda configs, processes: {})
    driver.run_sweep(cfg, cfg.search_space, store)
    assert len(store.rows()) == min(12, 2 * per_mechanism)
    left["trials"] = 100
    rows = driver.run_sweep(cfg, cfg.search_space, store)
    mechanisms = [r["config"]["mechanism"]["name"] for r in rows.values()]
    assert {m: mechanisms.count(m) for m in cfg.mechanisms} == dict.fromkeys(cfg.mechanisms, per_mechanism)
    assert sorted(rows) == [f"trial_{i:04d}" for i in range(2 * per_mechanism)]
    studies = open_studies(cfg, store)
    assert [len(studies[m].trials) for m in cfg.mechanisms] == [per_mechanism] * 2


def test_a_ladder_is_not_searched_and_needs_targets():
    base = small_trial_dict(privacy={"target_epsilon": [1, 3]})
    cfg = tiny_sweep(base=base, search_space={"parameters": {"privacy.target_epsilon": {
        "type": "uniform", "low": 1, "high": 8}}})
    with pytest.raises(ConfigError, match="the sweep's ε ladder sets it"):
        check_space(cfg, cfg.search_space, "sweep.yaml")
    for ladder in ([], [3, 3], [0, 1]):
        with pytest.raises(ConfigError, match="distinct finite targets > 0"):
            tiny_sweep(base=small_trial_dict(privacy={"target_epsilon": ladder}))
    with pytest.raises(ConfigError, match="over 6 \\(mechanism, ε\\) cells"):
        tiny_sweep(base=small_trial_dict(privacy={"target_epsilon": [1, 3, 8]}), num_trials=4)


def test_live_view_prints_epsilon_with_notion_delta_and_accountant():
    from sdp_core.sweep.live import epsilon_text

    assert epsilon_text({"epsilon": 2.994, "delta": 1e-5, "notion": "SDP", "accountant": "rdp",
                         "neighbouring": "replace_one"}) == "3 (SDP, replace-one neighbours, δ=1e-05, rdp)"
    assert epsilon_text({"epsilon": float("inf"), "delta": 1e-5, "notion": "none", "accountant": "rdp"}) == "∞ (none)"
