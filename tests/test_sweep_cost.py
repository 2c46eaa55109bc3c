"""The sweep's own privacy cost counts every trial that took a private step: a trial publishes its calibrated plan
before training, the searchers keep it, the rows of stopped and failed trials carry it, and the report charges
them their whole plan and composes every trial on the same data under the weakest notion."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import dp_accounting
import pytest

from sdp_core.config import parse_model
from sdp_core.config.sweep import SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.privacy import GaussianEvent, PrivacyLedger
from sdp_core.privacy.accountants import rdp as rdp_module
from sdp_core.report import build_report
from sdp_core.report.load import load_sweep
from sdp_core.report.statement import sweep_cost
from sdp_core.sweep import driver
from sdp_core.sweep.driver import GridSearch, completed_row, sweep_trial
from sdp_core.sweep.store import SweepStore
from sdp_core import trial as trial_module  # the trial function reads run_trial from here
from sdp_core.row import TrialRow
from tests.conftest import small_trial_dict

OBJECTIVES = ["val_perplexity", "val_private_perplexity"]
DELTA = 1e-5
ALL_TRIALS = "all trials on the same data (weakest notion)"


def sweep_cfg(n: int) -> SweepConfig:
    base = small_trial_dict()
    base.pop("name"), base.pop("seed")
    return parse_model(SweepConfig, {"name": "cost", "base": base, "mechanisms": ["dpsgd", "jft"],
                                     "objectives": [{"metric": m, "mode": "min"} for m in OBJECTIVES],
                                     "search_space": {"parameters": {"training.learning_rate": {
                                         "type": "loguniform", "low": 1e-3, "high": 5e-3}}},
                                     "num_trials": n})


def trial_config(trial_id: str, mechanism: str = "dpsgd") -> dict:
    trial = parse_model(TrialConfig, small_trial_dict(name=trial_id, mechanism={"name": mechanism}))
    return {"trial_id": trial_id, "params": {}, "objectives": OBJECTIVES, "trial": trial.model_dump(mode="json")}


def ledger(notion: str, *events: GaussianEvent) -> PrivacyLedger:
    return PrivacyLedger(notion, DELTA, "rdp", events)


def in_sweep(row: TrialRow, config: dict) -> dict:
    return row.in_sweep(config["trial_id"], config["params"], config["objectives"]).to_dict()


def finished_row(trial_id: str, plan: PrivacyLedger, mechanism: str = "dpsgd") -> dict:
    for e in plan.plan:
        if e.steps:
            plan.record_steps(e.phase, e.steps)
    config = trial_config(trial_id, mechanism)
    result = TrialRow(name=trial_id, state="finished", seed=0, config=config["trial"],
                      metrics={m: 10.0 for m in OBJECTIVES}, privacy=plan.report(), ledger=plan.to_dict())
    return in_sweep(result, config)


def dp_accounting_epsilon(events: list[tuple[float, float, int]]) -> float:
    """ε at δ of the composed Poisson-subsampled Gaussians, by dp_accounting's own RDP accountant."""
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(rdp_module.ORDERS))
    for q, sigma, steps in events:
        accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return accountant.get_epsilon(DELTA)


# ----------------------------------------------------------------------------------- the trial and the search


def test_a_trial_publishes_its_plan_before_its_first_step_and_in_its_failed_row(monkeypatch):
    reports = []
    monkeypatch.setattr(driver.tune, "report", reports.append)
    plan = ledger("DP", GaussianEvent(0.08, 1.0, 6, "dp")).to_dict()

    def run_trial(cfg, out_dir, on_step, on_plan, prepared):
        on_plan(plan)
        on_step(SimpleNamespace(step=1))
        on_step(SimpleNamespace(step=2))
        raise RuntimeError("loss is NaN")

    monkeypatch.setattr(trial_module, "run_trial", run_trial)
    sweep_trial(trial_config("trial_0000"), report_interval=3600.0)  # progress throttled away: the plan still goes
    assert [json.loads(r["ledger"]) if "ledger" in r else None for r in reports] == [plan, None]
    row = json.loads(reports[-1]["row"])
    assert row["state"] == "failed" and row["ledger"] == plan


def test_the_rows_of_stopped_and_killed_trials_carry_the_plan_they_published(tmp_path):
    plan = ledger("DP", GaussianEvent(0.08, 1.0, 6, "dp")).to_dict()
    store = SweepStore(tmp_path)
    store.create(sweep_cfg(2))
    search = GridSearch([trial_config("killed"), trial_config("quiet")], store)
    search.suggest("a"), search.suggest("b")
    search.on_trial_result("a", {"step": 1, "ledger": json.dumps(plan)})
    search.on_trial_result("a", {"step": 2})  # later reports do not carry it again
    search.on_trial_complete("a", error=True)  # its worker died
    search.on_trial_complete("b", error=True)  # died before its first report
    rows = store.rows()
    assert rows["killed"]["state"] == "failed" and rows["killed"]["ledger"] == plan
    assert rows["quiet"]["ledger"] == {}
    stopped = completed_row(trial_config("stopped"), {"final": False, "step": 2, "val_loss": 4.0}, False, True, plan)
    assert stopped["state"] == "early_stopped" and stopped["ledger"] == plan


# ---------------------------------------------------------------------------------------------- the report


@pytest.fixture()
def sweep_dir(tmp_path):
    """A finished, an early-stopped, a failed-after-calibrating and an infeasible DP-SGD trial, as the sweep
    stores them."""
    store = SweepStore(tmp_path / "sweep")
    store.create(sweep_cfg(4))
    store.write_row(finished_row("trial_0000", ledger("DP", GaussianEvent(0.01, 1.0, 500, "dp"))))
    for trial_id, state, plan in [("trial_0001", "early_stopped", ledger("DP", GaussianEvent(0.02, 1.2, 800, "dp"))),
                                  ("trial_0002", "failed", ledger("DP", GaussianEvent(0.01, 0.9, 300, "dp")))]:
        config = trial_config(trial_id)
        store.write_row(in_sweep(TrialRow.stub(config, state, "reason" if state == "failed" else None,
                                               ledger=plan.to_dict()), config))
    config = trial_config("trial_0003")
    store.write_row(in_sweep(TrialRow.stub(config, "infeasible", "PrivacyError: unreachable"), config))
    return store.root


def test_stopped_and_failed_trials_are_charged_their_whole_plan(sweep_dir):
    cost = sweep_cost(load_sweep(sweep_dir))
    assert {t: c["charged"].split(" ")[0] for t, c in cost.charges.items()} == {
        "trial_0000": "spent", "trial_0001": "whole", "trial_0002": "whole"}  # the infeasible one took no step
    trials = [(0.01, 1.0, 500), (0.02, 1.2, 800), (0.01, 0.9, 300)]
    charged = [dp_accounting_epsilon([t]) for t in trials]
    assert [c["epsilon"] for c in cost.charges.values()] == pytest.approx(charged, rel=1e-3)
    basic = cost.bounds["basic composition"]
    assert basic["epsilon"] == pytest.approx(sum(charged), rel=1e-3) and basic["trials"] == 3
    everything = cost.bounds[ALL_TRIALS]
    assert everything["notion"] == "DP" and everything["trials"] == 3
    assert everything["epsilon"] == pytest.approx(dp_accounting_epsilon(trials), rel=1e-3)
    assert any("trial_0003" in n and "never published a plan" in n for n in cost.notes)


def test_the_report_shows_which_trials_the_cost_counts_and_their_states(sweep_dir, tmp_path):
    html = (build_report(sweep_dir, tmp_path / "report") / "index.html").read_text()
    cost = html[html.index('id="cost"'):]
    for trial_id, state in [("trial_0000", "finished"), ("trial_0001", "early stopped"), ("trial_0002", "failed")]:
        assert f"<td>{trial_id}</td><td>DP-SGD</td><td>{state}</td>" in cost
    assert "<td>trial_0003</td>" not in cost[:cost.index('class="notes"')]
    assert "whole plan (spent steps unknown: an upper bound)" in cost


def test_trials_of_different_notions_are_composed_under_the_weakest(tmp_path):
    store = SweepStore(tmp_path / "sweep")
    store.create(sweep_cfg(2))
    store.write_row(finished_row("trial_0000", ledger("DP", GaussianEvent(0.01, 1.0, 500, "dp"))))
    jft = ledger("SDP", GaussianEvent(0.01, 0.0, 400, "phase1", touches="public"),  # free under SDP
                 GaussianEvent(0.01, 1.1, 500, "phase2"))
    store.write_row(finished_row("trial_0001", jft, "jft"))
    cost = sweep_cost(load_sweep(store.root))
    assert {"basic composition (DP trials)", "basic composition (SDP trials)"} <= set(cost.bounds)
    everything = cost.bounds[ALL_TRIALS]
    assert everything["notion"] == "SDP" and everything["trials"] == 2
    assert "weakest of their notions, SDP" in everything["conditions"]
    assert {e["phase"] for e in everything["events"]} == {"trial0/dp", "trial1/phase2"}  # the public steps are free
    # Every trial touched the same records: the bound charges both, more than either trial alone.
    assert math.isfinite(everything["epsilon"])
    assert everything["epsilon"] > max(cost.charges[t]["epsilon"] for t in cost.charges)


def test_an_adaptive_budget_stopped_below_its_cap_is_charged_every_trial_its_cap_allowed(tmp_path):
    """How many trials an adaptive budget runs depends on their results, so the sweep's own ε is the bound fixed
    before it ran: per notion, every trial the cap allows at its target ε and δ (DP-SGD and ATDP ranked, 9 each at
    ε 1 and 3; JFT alone, its 5 planned), never a composition of the trials that happened to run (here 5 each)."""
    import yaml

    from sdp_core.report.statement import sweep_epsilon
    from tests.synthetic_sweep import write_ladder_sweep

    folder = write_ladder_sweep(tmp_path, ladder=(1.0, 3.0), per_cell=5, mechanisms=("dpsgd", "atdp", "jft"))
    data = yaml.safe_load((folder / "sweep.yaml").read_text())
    data.pop("num_trials")
    (folder / "sweep.yaml").write_text(yaml.safe_dump({**data, "adaptive": {"max_trials_per_mechanism": 9,
                                                                             "step": 2}}))
    cost = sweep_cost(load_sweep(folder))
    dp = cost.bounds["basic composition at the adaptive cap (DP trials)"]
    sdp = cost.bounds["basic composition at the adaptive cap (SDP trials)"]
    assert len(cost.bounds) == 2  # the compositions of the 30 trials that ran are no bounds here
    assert (dp["epsilon"], dp["trials"], dp["delta"]) == (pytest.approx(9 * 2 * (1 + 3)), 36, pytest.approx(36e-5))
    assert (sdp["epsilon"], sdp["trials"]) == (pytest.approx(5 * (1 + 3)), 10)
    said = sweep_epsilon(cost)
    assert "ε = 72" in said and "ε = 20" in said
    assert any("30 of at most 46" in note for note in cost.notes)
