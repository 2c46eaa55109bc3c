"""The privacy ledger: plan, spending, refusal to overspend, reports, persistence."""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from dp_accounting import pld as dp_pld

from sdp_core.errors import PrivacyError
from sdp_core.privacy import (
    GaussianEvent,
    PrivacyLedger,
    assert_no_bare_epsilon,
    bayesian_confidentiality,
    epsilon_from_ledger,
    get_accountant,
)

G = GaussianEvent


def jft_ledger(notion: str = "SDP") -> PrivacyLedger:
    return PrivacyLedger(
        notion,
        1e-5,
        "rdp",
        [
            G(0.01, 0.0, 200, "phase1", "jft", touches="public"),  # redacted fine-tune: reads no secret
            G(0.01, 1.0, 300, "phase2", "jft"),
        ],
    )


def test_recording_spends_steps_and_refuses_to_overspend():
    ledger = jft_ledger()
    ledger.record_steps("phase2", 250)
    assert ledger.spent_steps == {"phase1": 0, "phase2": 250}
    with pytest.raises(PrivacyError, match="budget exhausted.*phase2.*301.*300"):
        ledger.record_steps("phase2", 51)
    assert ledger.spent_steps["phase2"] == 250  # the refused steps were not spent
    ledger.record_steps("phase2", 50)
    assert ledger.complete is False
    ledger.record_steps("phase1", 200)
    assert ledger.complete is True
    with pytest.raises(PrivacyError, match="budget exhausted"):
        ledger.record_steps("phase1")


def test_unknown_phase_and_negative_steps_are_refused():
    ledger = jft_ledger()
    with pytest.raises(PrivacyError, match="not in the privacy plan"):
        ledger.record_steps("phase3")
    with pytest.raises(PrivacyError, match="negative"):
        ledger.record_steps("phase2", -1)


def test_events_of_one_phase_must_share_their_steps():
    with pytest.raises(PrivacyError, match="mixes events"):
        PrivacyLedger("DP", 1e-5, "rdp", [G(0.01, 1.0, 100, "p"), G(0.01, 2.0, 50, "p")])


def test_spent_epsilon_grows_with_the_steps_and_stays_within_the_plan():
    ledger = jft_ledger()
    plan_eps = get_accountant("rdp").epsilon([G(0.01, 1.0, 300)], 1e-5, "replace_one")  # SDP: replace-one
    seen = [ledger.epsilon()]
    for _ in range(3):
        ledger.record_steps("phase2", 100)
        seen.append(ledger.epsilon())
    assert seen[0] == 0.0 and seen == sorted(seen) and seen[-1] == pytest.approx(plan_eps)
    report = ledger.report()
    assert report["plan"]["epsilon"] == pytest.approx(plan_eps)


def test_public_events_are_free_under_sdp_but_not_under_dp():
    sdp, dp = jft_ledger("SDP"), jft_ledger("DP")
    for ledger in (sdp, dp):
        ledger.record_steps("phase1", 200)
        ledger.record_steps("phase2", 300)
    assert math.isfinite(sdp.epsilon())
    assert dp.epsilon() == math.inf  # a non-private step on every record is infinitely costly under DP


def test_report_carries_epsilon_with_delta_notion_accountant_and_events():
    ledger = jft_ledger()
    ledger.record_steps("phase2", 120)
    report = ledger.report()
    assert set(report) >= {"epsilon", "delta", "notion", "accountant", "neighbouring", "events", "plan", "complete"}
    assert (report["delta"], report["notion"], report["accountant"]) == (1e-5, "SDP", "rdp")
    assert report["neighbouring"] == report["plan"]["neighbouring"] == "replace_one"
    assert [e["steps"] for e in report["events"]] == [0, 120]
    assert [e["steps"] for e in report["plan"]["events"]] == [200, 300]
    assert_no_bare_epsilon(report)


def test_round_trip_and_recompute_from_the_saved_dict():
    ledger = jft_ledger()
    ledger.record_steps("phase2", 120)
    saved = json.loads(json.dumps(ledger.to_dict()))
    again = PrivacyLedger.from_dict(saved)
    assert again.plan == ledger.plan and again.spent_steps == ledger.spent_steps
    assert again.to_dict() == ledger.to_dict()
    assert epsilon_from_ledger(saved) == ledger.report()


def test_a_saved_ledger_that_overspends_is_refused():
    saved = jft_ledger().to_dict()
    saved["spent_steps"]["phase2"] = 301
    with pytest.raises(PrivacyError, match="budget exhausted"):
        epsilon_from_ledger(saved)
    with pytest.raises(PrivacyError, match="not a privacy ledger"):
        epsilon_from_ledger({"epsilon": 1.0})
    del saved["plan"]
    with pytest.raises(PrivacyError, match="missing the key 'plan'"):
        PrivacyLedger.from_dict(saved)


def test_bayesian_confidentiality_ledger():
    events = [G(0.05, 1.0, 400, "private", "crt", "private"), G(0.05, 0.0, 400, "public", "crt", "public")]
    ledger = PrivacyLedger("bayesian_confidentiality", 1e-5, "rdp", events, gamma=0.1, delta2=1e-6)
    ledger.record_steps("private", 400)
    ledger.record_steps("public", 400)
    report = ledger.report()
    base = get_accountant("rdp").epsilon(events[:1], 1e-5, "replace_one")
    assert report["confidentiality"]["epsilon"] == pytest.approx(base)
    assert (report["epsilon"], report["delta"]) == pytest.approx(bayesian_confidentiality(base, 1e-5, 0.1, 1e-6))
    assert (report["gamma"], report["delta2"]) == (0.1, 1e-6)
    assert epsilon_from_ledger(ledger.to_dict()) == report
    assert_no_bare_epsilon(report)
    with pytest.raises(PrivacyError, match="gamma and delta2"):
        PrivacyLedger("bayesian_confidentiality", 1e-5, "rdp", events)
    with pytest.raises(PrivacyError, match="gamma and delta2"):
        PrivacyLedger("DP", 1e-5, "rdp", events, gamma=0.1, delta2=0.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"notion": "LDP"}, "unknown privacy notion"),
        ({"delta": 0.0}, "delta"),
        ({"accountant": "moments"}, "unknown accountant"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    settings = {"notion": "DP", "delta": 1e-5, "accountant": "rdp", **kwargs}
    with pytest.raises(PrivacyError, match=message):
        PrivacyLedger(settings["notion"], settings["delta"], settings["accountant"])


def test_events_round_trip_and_validate():
    event = G(0.01, 1.2, 30, "phase2", "jft", "private")
    assert G.from_dict(event.to_dict()) == event
    with pytest.raises(PrivacyError, match="unknown event field"):
        G.from_dict({**event.to_dict(), "epsilon": 1.0})
    for bad in ({"sample_rate": 1.5}, {"noise_multiplier": -1.0}, {"steps": 2.5}, {"touches": "secret"}):
        with pytest.raises(PrivacyError):
            G.from_dict({**event.to_dict(), **bad})
    with pytest.raises(AttributeError):
        event.steps = 3  # frozen


def test_notion_none_has_infinite_epsilon_whatever_the_events():
    from sdp_core.privacy import GaussianEvent, PrivacyLedger

    ledger = PrivacyLedger("none", 1e-5, "rdp", plan=[GaussianEvent(0.01, 5.0, 10, phase="p")])
    ledger.record_steps("p", 10)
    report = ledger.report()
    assert report["epsilon"] == float("inf") and report["notion"] == "none"


# -------------------------------------------------------------------------------------- neighbouring relation


def opacus_rdp_epsilon(events: list[GaussianEvent], delta: float) -> float:
    """Add/remove RDP ε by Opacus' code at our order grid (the same bound, independent code)."""
    from opacus.accountants.analysis import rdp as opacus_rdp

    from sdp_core.privacy.accountants.rdp import ORDERS

    curve = sum(opacus_rdp.compute_rdp(q=e.sample_rate, noise_multiplier=e.noise_multiplier, steps=e.steps,
                                       orders=ORDERS) for e in events)
    return float(opacus_rdp.get_privacy_spent(orders=ORDERS, rdp=curve, delta=delta)[0])


def test_compare_add_remove_adds_the_papers_figure_labelled_as_not_the_guarantee():
    events = [G(0.01, 1.0, 300, "phase2", "jft")]
    ledger = PrivacyLedger("SDP", 1e-5, "rdp", events, compare_add_remove=True)
    ledger.record_steps("phase2", 200)
    report = ledger.report()
    comparison = report["add_remove"]
    assert report["neighbouring"] == "replace_one" and comparison["neighbouring"] == "add_remove"
    assert comparison["notion"] == "SDP" and "not the guarantee" in comparison["label"]
    assert comparison["epsilon"] == pytest.approx(opacus_rdp_epsilon([G(0.01, 1.0, 200)], 1e-5), rel=1e-6)
    assert report["epsilon"] > 1.1 * comparison["epsilon"]
    assert_no_bare_epsilon(report)
    assert epsilon_from_ledger(json.loads(json.dumps(ledger.to_dict()))) == report
    # Without the option, or under DP (already add/remove), there is nothing to compare.
    assert "add_remove" not in PrivacyLedger("SDP", 1e-5, "rdp", events).report()
    assert "add_remove" not in PrivacyLedger("DP", 1e-5, "rdp", events, compare_add_remove=True).report()


def test_compare_add_remove_under_bayesian_confidentiality():
    events = [G(0.05, 1.0, 400, "private", "crt", "private")]
    ledger = PrivacyLedger("bayesian_confidentiality", 1e-5, "rdp", events, gamma=0.1, delta2=1e-6,
                           compare_add_remove=True)
    ledger.record_steps("private", 400)
    comparison = ledger.report()["add_remove"]
    base = opacus_rdp_epsilon(events, 1e-5)
    assert comparison["confidentiality"]["epsilon"] == pytest.approx(base, rel=1e-6)
    assert comparison["epsilon"] == pytest.approx(bayesian_confidentiality(base, 1e-5, 0.1, 1e-6)[0], rel=1e-6)
    assert comparison["neighbouring"] == comparison["confidentiality"]["neighbouring"] == "add_remove"
    assert_no_bare_epsilon(ledger.report())


def test_a_ledger_saved_before_the_relation_reloads_and_is_accounted_for_its_notions_relation():
    ledger = jft_ledger()
    ledger.record_steps("phase2", 300)
    saved = ledger.to_dict()
    del saved["compare_add_remove"]  # the saved form before the option existed
    report = epsilon_from_ledger(saved)
    assert report["neighbouring"] == "replace_one" and "add_remove" not in report
    # Its ε is the replace-one one, whatever a report saved with it said: checked by dp_accounting's PLD.
    pld_saved = {**saved, "accountant": "pld"}
    reference = dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3)
    reference.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 300)
    assert epsilon_from_ledger(pld_saved)["epsilon"] == pytest.approx(reference.get_epsilon(1e-5), rel=1e-9)
