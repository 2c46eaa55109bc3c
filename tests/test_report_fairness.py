"""What lets a reader tell the mechanisms apart: per-mechanism spread, a ranking that says when it is within noise,
a privacy objective that says when it did not separate the trials, the audit's bound, compute, the unit, and the
ε of the search that chose a front trial."""

from __future__ import annotations

import dataclasses

import json
import re
import statistics
from pathlib import Path

import pytest

from sdp_core.config import parse_model
from sdp_core.config.sweep import SweepConfig
from sdp_core.privacy import events_from_dicts
from sdp_core.privacy.report import account
from sdp_core.report import build_report
from sdp_core.report.formatting import sigma_text
from sdp_core.report.load import Sweep, Trial, load_sweep
from sdp_core.report.pareto import analyse
from sdp_core.report.statement import sweep_cost, sweep_epsilon
from sdp_core.report.ranking import ranking_note, separation_note
from sdp_core.separation import holm_passes, rank_mechanisms
from sdp_core.report.tables import (
    AUDIT_COLUMN,
    REPLACE_ONE_COLUMN,
    SEARCH_COLUMN,
    audit_text,
    frontier_table,
    mechanism_table,
    trial_charges,
)
from tests.synthetic_sweep import write_synthetic_sweep


def _trial(tid: str, mechanism: str, ppl: float, exposure: tuple[float, float, float] = (1.4, 1.0, 1.8),
           audit: dict | None = None, notion: str = "DP") -> Trial:
    value, low, high = exposure
    return Trial(trial_id=tid, state="finished", seed=0, mechanism=mechanism, params={},
                 metrics={"val_perplexity": ppl, "exposure_mean": value, "exposure_mean_low": low,
                          "exposure_mean_high": high, "steps": 40.0, "tokens": 12_345.0},  # as a row loads them
                 privacy={"notion": notion}, config={"mechanism": {"name": mechanism}}, detector={}, canaries=None,
                 other_guarantees={}, timings={"total": 10.0}, versions={}, error=None, audit=audit or {})


def _analysis(trials: list[Trial], mechanisms: list[str]):
    cfg = parse_model(SweepConfig, {"name": "t", "mechanisms": mechanisms, "num_trials": 3 * len(mechanisms),
                                    "search_space": {"parameters": {"training.learning_rate": {
                                        "type": "loguniform", "low": 1e-4, "high": 1e-2}}}})
    return analyse(Sweep(Path("."), cfg, trials, None))


def test_ranking_is_beyond_noise_only_when_a_rank_test_separates_the_trials():
    """With 4 trials each, the exact two-sided Mann–Whitney p-value is 2/70 only when every trial of one mechanism
    beats every trial of the other; with 3 each it cannot go below 2/20, so no step passes and the note says how many
    more trials it takes."""
    clear = _analysis([_trial(f"a{i}", "dpsgd", p) for i, p in enumerate((10, 11, 12, 13))]
                      + [_trial(f"b{i}", "jft", p) for i, p in enumerate((20, 21, 22, 23))], ["dpsgd", "jft"])
    assert "DP-SGD > JFT" in ranking_note(clear) and "beyond the trials' spread" in ranking_note(clear)
    noisy = _analysis([_trial(f"a{i}", "dpsgd", p) for i, p in enumerate((10, 11, 12, 21.5))]
                      + [_trial(f"b{i}", "jft", p) for i, p in enumerate((20, 21, 22, 23))], ["dpsgd", "jft"])
    assert "DP-SGD ≈ JFT" in ranking_note(noisy) and "within noise" in ranking_note(noisy)
    few = _analysis([_trial(f"a{i}", "dpsgd", p) for i, p in enumerate((10, 11, 12))]
                    + [_trial(f"b{i}", "jft", p) for i, p in enumerate((20, 21, 22))], ["dpsgd", "jft"])
    assert "DP-SGD ≈ JFT" in ranking_note(few) and "run 1 more per mechanism" in ranking_note(few)


@pytest.mark.parametrize("mechanisms,sweeps", [(2, 1500), (4, 400)])
def test_ranking_holds_its_family_wise_level_under_identical_mechanisms(mechanisms, sweeps):
    """Every mechanism's 5 trials from one distribution: the share of sweeps whose ranking passes any step is the
    family-wise error, measured by simulation: at most 0.05 (about 0.03 for 2 mechanisms; a one-sided test in the
    direction the same trials chose measures about 0.09 there). Seeded, so the measurement is the same every run."""
    import random

    rng = random.Random(7)
    claimed = sum(any(rank_mechanisms({m: [rng.gauss(20, 3) for _ in range(5)] for m in range(mechanisms)},
                                      "min").passes) for _ in range(sweeps))
    assert claimed / sweeps <= 0.05


def _holm_adjusted(pvalues: list[float]) -> list[float]:
    """Holm's adjusted p-values (Wright 1992): p̃_(i) = max over j ≤ i of min(1, (m − j)·p_(j)), 0-based."""
    order = sorted(range(len(pvalues)), key=pvalues.__getitem__)
    adjusted, running = [0.0] * len(pvalues), 0.0
    for j, k in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - j) * pvalues[k]))
        adjusted[k] = running
    return adjusted


def test_holm_passes_what_its_adjusted_p_values_reject():
    import random

    rng = random.Random(0)
    for _ in range(500):
        pvalues = [rng.choice([rng.random() * 0.1, rng.random()]) for _ in range(rng.randint(1, 6))]
        assert holm_passes(pvalues, 0.05) == [p <= 0.05 for p in _holm_adjusted(pvalues)]
    assert holm_passes([0.01, 0.04, 0.03], 0.05) == [True, False, False]  # 0.01 ≤ 0.05/3, then 0.03 > 0.05/2


def _separated_mechanisms(trials_each: int) -> list[Trial]:
    """Four mechanisms whose every trial beats every trial of the next: as separated as their trials allow."""
    return [_trial(f"{m}{i}", m, 10 * rank + i) for rank, m in enumerate(("jft", "dpsgd", "atdp", "crt"))
            for i in range(trials_each)]


def test_mechanisms_of_different_notions_are_not_ranked_however_far_apart():
    """DP-SGD (DP) beats JFT (SDP) by every trial, but their guarantees cover different things: the note ranks
    neither above the other; the same trials under one notion are ranked."""
    trials = ([_trial(f"a{i}", "dpsgd", p) for i, p in enumerate((10, 11, 12, 13))]
              + [_trial(f"b{i}", "jft", p, notion="SDP") for i, p in enumerate((20, 21, 22, 23))])
    note = ranking_note(_analysis(trials, ["dpsgd", "jft"]))
    assert "DP: DP-SGD alone, not ranked. SDP: JFT alone, not ranked" in note and ">" not in note
    same = [dataclasses.replace(t, privacy={"notion": "SDP"}) for t in trials]
    assert "DP-SGD > JFT" in ranking_note(_analysis(same, ["dpsgd", "jft"]))


def test_ranking_of_several_mechanisms_is_corrected_for_its_several_steps():
    """Three steps at family-wise level 0.05: 4 trials each (smallest two-sided p 2/70) cannot pass Holm's first
    level 0.05/3, and the note says one more trial each can; 5 each (smallest p 2/252) can, and every step passes."""
    mechanisms = ["jft", "dpsgd", "atdp", "crt"]
    few = ranking_note(_analysis(_separated_mechanisms(4), mechanisms))
    assert "JFT ≈ DP-SGD, DP-SGD ≈ ATDP, ATDP ≈ CRT" in few and "Holm-corrected over 3 steps" in few
    assert "no step can pass" in few and "run 1 more per mechanism" in few
    enough = ranking_note(_analysis(_separated_mechanisms(5), mechanisms))
    assert "JFT > DP-SGD, DP-SGD > ATDP, ATDP > CRT" in enough and "beyond the trials' spread" in enough


def test_mechanism_table_shows_best_median_and_worst_over_its_trials():
    a = _analysis([_trial(f"a{i}", "dpsgd", p) for i, p in enumerate((12.0, 50.0, 31.0))]
                  + [_trial("b0", "jft", 9.0)], ["dpsgd", "jft"])
    table = mechanism_table(a)
    column = next(c for c in table.columns if c.endswith("over its trials"))
    cells = {row[0]: row[table.columns.index(column)] for row in table.rows}
    assert cells["DP-SGD"] == "best 12.0 · median 31.0 · worst 50.0 (3 trials)"
    assert cells["JFT"] == "9 (1 trial: no spread)"
    row = next(r for r in table.rows if r[0] == "DP-SGD")
    assert [row[table.columns.index(c)] for c in ("optimizer steps", "tokens trained on")] == ["40", "12,345"]


def test_privacy_objective_that_does_not_separate_the_trials_is_named():
    overlapping = _analysis([_trial("a", "dpsgd", 10, (1.5, 1.0, 2.0)), _trial("b", "jft", 12, (1.4, 0.9, 1.9))],
                            ["dpsgd", "jft"])
    assert "did not separate the trials" in separation_note(overlapping)
    apart = _analysis([_trial("a", "dpsgd", 10, (1.5, 1.0, 2.0)), _trial("b", "jft", 12, (6.0, 5.0, 7.0))],
                      ["dpsgd", "jft"])
    assert separation_note(apart) == ""


AUDIT = {"epsilon_lower_bound": 0.42, "epsilon_lower_bound_per_record": 0.42, "confidence": 0.95, "canaries": 1000,
         "members": 480, "ceiling": 4.47, "delta": 1e-5, "notion": "empirical lower bound",
         "neighbouring": "replace_one", "accountant": "audit:one_run"}


def _dp_trial(tid: str, audit_bound: float) -> Trial:
    """A DP trial (add/remove ε = 1.45 by RDP, q = 0.016, σ = 1, 60 steps) with a one-run audit."""
    events = [{"sample_rate": 0.016, "noise_multiplier": 1.0, "steps": 60, "phase": "dp", "touches": "all"}]
    privacy = account(events_from_dicts(events), 1e-5, "DP", "rdp")
    trial = _trial(tid, "dpsgd", 10, audit={**AUDIT, "epsilon_lower_bound": audit_bound,
                                            "epsilon_lower_bound_per_record": audit_bound})
    return Trial(**{**trial.__dict__, "privacy": privacy})


def test_the_audit_is_compared_with_the_replace_one_epsilon_and_its_qualifiers_are_said_once():
    """Canaries go into existing records, so the audit bounds the replace-one ε: a DP trial's audit may exceed its
    add/remove ε (1.45) without exceeding its replace-one ε (above dp_accounting's tight PLD figure, 1.18), and only
    a bound above the replace-one ε is flagged. What every row shares is said once, above the table."""
    import dp_accounting as dpa
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    pld = PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
    pld.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.016, dpa.GaussianDpEvent(1.0)), 60))
    a = _analysis([_dp_trial("a", 1.5), _dp_trial("b", 1.7)], ["dpsgd"])
    table = frontier_table(a, "")
    rows = {row[0]: dict(zip(table.columns, row)) for row in table.rows}
    add_remove = a.sweep.trials[0].epsilon
    replace_one = float(rows["a"][REPLACE_ONE_COLUMN])
    assert pld.get_epsilon(1e-5) < replace_one < 2 * add_remove and add_remove < 1.5 < replace_one < 1.7
    assert rows["a"][AUDIT_COLUMN] == "1.5"
    assert rows["b"][AUDIT_COLUMN] == f"⚠ 1.7 > ε {replace_one:g}"
    assert "replace-one neighbours, δ = 1e-5, audit:one run; 95 %; 1,000 canaries, 480 inserted; the most it can " \
           "show: 4.47" in table.note
    assert table.markdown().startswith(table.note)


def test_audit_qualifiers_that_differ_between_rows_stay_in_their_cells():
    a = _analysis([_trial("a", "dpsgd", 10, audit=AUDIT), _trial("b", "jft", 11, audit={**AUDIT, "ceiling": 5.16})],
                  ["dpsgd", "jft"])
    table = mechanism_table(a)
    cells = {row[table.columns.index("best trial")]: row[table.columns.index(AUDIT_COLUMN)] for row in table.rows}
    assert cells == {"a": "0.42 (the most it can show: 4.47)", "b": "0.42 (the most it can show: 5.16)"}
    assert "the most it can show" not in table.note and "480 inserted" in table.note


def test_a_stored_audit_keeps_what_its_bound_means(tmp_path):
    """A trial row's audit, read back by the report, keeps its notion, relation, δ and method (never a canary
    value); a row written before the audit named its relation is on replace-one neighbours too."""
    from sdp_core.report.load import parse_trial

    audit = {"epsilon_lower_bound": 0.5, "epsilon_lower_bound_per_record": 0.5, "delta": 1e-5, "confidence": 0.95,
             "notion": "empirical lower bound", "accountant": "audit:one_run", "method": "one_run",
             "canaries": 1000, "ceiling": 5.16, "exposures": [1.0, 2.0]}
    trial = parse_trial({"trial_id": "t", "state": "finished", "attacks": {"empirical_epsilon": audit}},
                        tmp_path / "t.json")
    assert audit_text(trial) == ("0.5 (empirical lower bound, replace-one neighbours, δ = 1e-5, audit:one run; 95 %; "
                                 "1,000 canaries; the most it can show: 5.16)")
    assert "exposures" not in trial.audit


def _epsilon(text: str) -> float:
    return float(re.search(r"ε = ([0-9.]+)", text).group(1))


def test_front_shows_the_epsilon_of_the_search_that_chose_each_trial(tmp_path):
    """Per mechanism, the composed ε of its charged trials lies between the largest of their own ε (each from its
    events alone) and their sum (basic composition); the whole sweep compared a No-DP trial: no formal bound."""
    a = analyse(load_sweep(write_synthetic_sweep(tmp_path / "s", 24)))
    table = frontier_table(a, sweep_epsilon(sweep_cost(a.sweep)))
    charges = trial_charges(a.sweep)
    checked = 0
    nodp = [t.trial_id for t in a.sweep.trials if t.mechanism == "nodp" and t.trial_id in charges]
    assert nodp and all(f"{t}, No-DP" in table.note for t in nodp)
    assert "the front compares all 24 trials. The sweep's own ε: none. It ran" in table.note
    for t, row in zip(a.front, table.rows):
        text = row[table.columns.index(SEARCH_COLUMN)]
        assert text.startswith(f"its mechanism's {sum(u.mechanism == t.mechanism for u in a.sweep.trials)} trials: ")
        if t.mechanism == "dpsgd":
            alone = [account(events_from_dicts(c["events"]), 1e-5, "DP", "rdp")["epsilon"]
                     for u in a.sweep.trials if u.mechanism == "dpsgd" and (c := charges.get(u.trial_id))]
            assert len(alone) > 1 and max(alone) < _epsilon(text) < sum(alone)
            checked += 1
    assert checked


def test_summary_names_the_evaluation_unit_and_the_per_mechanism_spread(tmp_path):
    sweep_dir = write_synthetic_sweep(tmp_path / "s", 24)
    summary = (build_report(sweep_dir) / "summary.md").read_text()
    assert "measured on the same unit: whole held-out records" in summary
    ppl = [t.metric("val_perplexity") for t in load_sweep(sweep_dir).trials
           if t.mechanism == "dpsgd" and t.state == "finished"]
    assert f"median {statistics.median(ppl):.1f}" in summary
    assert "Mechanisms by their best val perplexity" in summary
    assert "fixed number of trials, so the random-K random-search bound of Papernot & Steinke" in summary


def test_the_evaluation_unit_counts_the_validation_records_the_trials_had(tmp_path):
    """A file's validation set is what the trials held out of it (5 here), not the generator's n_validation."""
    sweep_dir = write_synthetic_sweep(tmp_path / "s", 8)
    assert load_sweep(sweep_dir).config.base.data.n_validation != 5
    for path in (sweep_dir / "trials").glob("*.json"):
        row = json.loads(path.read_text())
        row["detector"]["records"] = {"train": 40, "validation": 5, "test": 5}
        path.write_text(json.dumps(row))
    summary = (build_report(sweep_dir) / "summary.md").read_text()
    assert "whole held-out records (5 validation records, rows of up to 192 tokens)" in summary


def test_sigma_is_one_number_when_every_private_epoch_has_it_else_per_phase():
    def event(phase: str, sigma: float) -> dict:
        return {"phase": phase, "noise_multiplier": sigma, "steps": 10, "sample_rate": 0.03}

    assert sigma_text([event(f"private_{i}/epoch0", 1.11) for i in range(6)]) == "1.11"
    assert sigma_text([event("phase1/epoch0", 0.66), event("phase2/epoch0", 0.763),
                       event("phase2/epoch1", 0.763)]) == "phase1 0.66 · phase2 0.763"
    assert sigma_text([event("atdp/epoch0", 0.76), event("atdp/epoch1", 0.985)]) == "0.76–0.985"
