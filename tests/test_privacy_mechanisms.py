"""Mechanism-specific privacy: CRT confidentiality, JFT light noise, S-DPSGD releases, the sweep's own cost,
the CLI helper, and the no-bare-ε rule on every report."""

from __future__ import annotations

import argparse
import json
import math
import re

import dp_accounting
import pytest
from dp_accounting import pld as dp_pld
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from scipy.stats import binom

from sdp_core.errors import PrivacyError, UserError
from sdp_core.privacy import (
    GaussianEvent,
    PrivacyLedger,
    assert_no_bare_epsilon,
    basic_composition,
    bayesian_confidentiality,
    bayesian_confidentiality_report,
    composed_sweep_cost,
    confidentiality_report,
    crt_gamma_delta2,
    epsilon_command,
    get_accountant,
    joint_noise_multiplier,
    light_noise_epsilon,
    missing_rate_interval,
    random_search_cost,
)
from sdp_core.privacy.accountants import rdp as rdp_module
from sdp_core.privacy.cli import add_epsilon_arguments, run_epsilon

G = GaussianEvent
MNIST = [G(256 / 60000, 1.1, 14063, "train", "dpsgd")]

# ------------------------------------------------------------------------------------------------ CRT


def test_bayesian_confidentiality_formula_on_hand_computed_values():
    # ε = 1, γ = 0.1: log(1 + 0.1·(e − 1)) = log(1.17182818...) = 0.15856508...
    eps_b, delta_b = bayesian_confidentiality(1.0, 1e-5, 0.1, 1e-6)
    assert eps_b == pytest.approx(0.15856508, abs=1e-8)
    assert delta_b == pytest.approx(0.1 * 1e-5 + 1e-6, rel=1e-12)
    assert bayesian_confidentiality(2.0, 1e-5, 0.5, 0.0) == pytest.approx((math.log(1 + 0.5 * (math.e**2 - 1)), 5e-6))
    assert bayesian_confidentiality(3.0, 1e-5, 1.0, 0.0) == pytest.approx((3.0, 1e-5))  # nothing redacted
    assert bayesian_confidentiality(math.inf, 1e-5, 0.0, 0.0) == (0.0, 0.0)  # perfect recall
    with pytest.raises(PrivacyError):
        bayesian_confidentiality(1.0, 1e-5, 1.5, 0.0)


def test_crt_gamma_and_delta2_are_upper_confidence_bounds_on_shares_of_secrets():
    # 10 of 100 gold secrets not fully masked by π, 0 by π and π_c together.
    est = crt_gamma_delta2(10, 0, 100)
    assert (est["gamma_estimate"], est["delta2_estimate"]) == (0.1, 0.0)
    # One-sided 95 % Clopper–Pearson: the upper bound p is where P(X <= k | n, p) = 5 % (binomial tail).
    assert binom.cdf(10, 100, est["gamma"]) == pytest.approx(0.05, rel=1e-9)
    assert est["delta2"] == pytest.approx(1 - 0.05 ** (1 / 100))  # exact when k = 0
    with pytest.raises(PrivacyError):
        crt_gamma_delta2(3, 5, 100)  # π and π_c together cannot miss more than π alone


def test_crt_reports_confidentiality_of_the_private_part_only():
    d_pri = [G(32 / 800, 1.0, 25 * 5, "private", "crt", "private")]
    d_pub = [G(32 / 9200, 0.0, 288 * 5, "public", "crt", "public")]
    conf = confidentiality_report(d_pri + d_pub, 8e-5, "rdp")
    assert conf["notion"] == "confidentiality"
    assert conf["epsilon"] == pytest.approx(get_accountant("rdp").epsilon(d_pri, 8e-5, "replace_one"))
    assert conf["neighbouring"] == "replace_one"
    bayes = bayesian_confidentiality_report(d_pri + d_pub, 8e-5, "rdp", gamma=0.1, delta2=0.0)
    assert bayes["notion"] == "bayesian_confidentiality"
    assert (bayes["gamma"], bayes["delta2"], bayes["accountant"]) == (0.1, 0.0, "rdp")
    assert bayes["epsilon"] < conf["epsilon"] and bayes["delta"] == pytest.approx(8e-6)
    assert bayes["confidentiality"] == conf
    assert len(bayes["events"]) == 2


# ------------------------------------------------------------------------------------------ JFT light noise


def test_clopper_pearson_interval():
    low, high = missing_rate_interval(5, 1000)
    # The defining property, checked on binomial tails rather than the beta quantiles the code uses.
    assert binom.sf(4, 1000, low) == pytest.approx(0.025, rel=1e-9)  # P(X >= 5 | low)
    assert binom.cdf(5, 1000, high) == pytest.approx(0.025, rel=1e-9)  # P(X <= 5 | high)
    assert (low, high) == pytest.approx((0.00162542, 0.01162947), abs=1e-8)
    assert missing_rate_interval(0, 200) == pytest.approx((0.0, 1 - 0.025 ** (1 / 200)))  # exact when k = 0
    assert missing_rate_interval(200, 200)[1] == 1.0
    with pytest.raises(PrivacyError):
        missing_rate_interval(5, 0)


def test_light_noise_epsilon_at_both_ends_of_the_interval():
    phase1 = [G(0.01, 0.6, 1000, "phase1", "jft")]
    phase2 = [G(0.01, 1.2, 1000, "phase2", "jft")]
    report = light_noise_epsilon(phase1, (0.003, 0.012), 1e-5, "rdp", other_events=phase2)
    low, high = report["at_low"], report["at_high"]
    assert high["epsilon"] >= low["epsilon"] > get_accountant("rdp").epsilon(phase2, 1e-5, "replace_one")
    assert report["epsilon"] == high["epsilon"] and report["notion"] == "SDP"
    assert report["guarantee"] == "empirical estimate" and "not a formal guarantee" in report["caveat"]
    assert (low["missing_rate"], high["missing_rate"]) == (0.003, 0.012)
    assert [e["sample_rate"] for e in high["events"]] == pytest.approx([0.01 * 0.012, 0.01])
    formal = report["formal"]  # beside the estimate: phase 1 at its real sampling rate
    assert [e["sample_rate"] for e in formal["events"]] == [0.01, 0.01]
    assert (formal["notion"], formal["accountant"]) == ("SDP", "rdp") and formal["epsilon"] > report["epsilon"]
    # Amplification: phase 1 alone at the amplified rate is far cheaper than un-amplified.
    alone = light_noise_epsilon(phase1, (0.003, 0.012), 1e-5, "rdp")
    assert alone["epsilon"] < 0.25 * get_accountant("rdp").epsilon(phase1, 1e-5, "replace_one")
    assert_no_bare_epsilon(report)


# ---------------------------------------------------------------------------------------------- S-DPSGD


def test_sdpsgd_hidden_state_releases_increase_epsilon():
    q, steps = 0.01, 2000
    grad_only = [G(q, 1.0, steps, "private", "sdpsgd")]
    hidden = G(q, 2.0, steps, "private", "sdpsgd:hidden")
    rdp = get_accountant("rdp")
    separate = rdp.epsilon(grad_only + [hidden], 1e-5)  # as if each release had its own Poisson sample
    joint = rdp.epsilon([G(q, joint_noise_multiplier(1.0, 2.0), steps, "private", "sdpsgd")], 1e-5)
    assert rdp.epsilon(grad_only, 1e-5) < separate < joint
    # The releases share one batch, so the joint event is the correct one; counting them separately
    # under-states ε (here by more than 5 %).
    assert joint > 1.05 * separate
    assert joint_noise_multiplier(1.0, 1.0) == pytest.approx(1 / math.sqrt(2))


# ------------------------------------------------------------------------------------------- sweep cost


def test_naive_sweep_cost_grows_with_the_number_of_trials():
    trial = get_accountant("rdp").epsilon(MNIST, 1e-5)
    reports = [{"epsilon": trial, "delta": 1e-5, "notion": "DP", "accountant": "rdp", "events": [e.to_dict() for e in MNIST]}] * 4
    basic = [basic_composition(reports[:k]) for k in (1, 2, 4)]
    assert [b["epsilon"] for b in basic] == pytest.approx([trial, 2 * trial, 4 * trial])
    assert [b["delta"] for b in basic] == pytest.approx([1e-5, 2e-5, 4e-5])
    assert basic[-1]["events"][3]["phase"] == "trial3/train"
    composed = [composed_sweep_cost([MNIST] * k, 1e-5)["epsilon"] for k in (1, 2, 4)]
    assert composed[0] == pytest.approx(trial) and composed == sorted(composed)
    assert composed[2] < basic[2]["epsilon"]  # RDP composition is tighter than basic composition
    with pytest.raises(PrivacyError, match="different notions"):
        basic_composition([reports[0], {**reports[0], "notion": "SDP"}])


def test_basic_composition_keeps_the_relation_of_its_reports():
    replace = {"epsilon": 2.0, "delta": 1e-5, "notion": "SDP", "accountant": "rdp", "neighbouring": "replace_one"}
    assert basic_composition([replace, replace])["neighbouring"] == "replace_one"
    # A report saved before reports named their relation was computed for add/remove neighbours; a replace-one ε
    # also bounds add/remove, so a mix sums to an add/remove bound.
    old = {k: v for k, v in replace.items() if k != "neighbouring"}
    assert basic_composition([old, old])["neighbouring"] == "add_remove"
    mixed = basic_composition([replace, old])
    assert (mixed["neighbouring"], mixed["epsilon"]) == ("add_remove", 4.0)


def test_papernot_steinke_under_replace_one():
    add_remove = random_search_cost([MNIST], 1e-5, 10)
    replace_one = random_search_cost([MNIST], 1e-5, 10, relation="replace_one")
    assert (add_remove["neighbouring"], replace_one["neighbouring"]) == ("add_remove", "replace_one")
    single = get_accountant("rdp").epsilon(MNIST, 1e-5, "replace_one")
    assert single < replace_one["epsilon"] and replace_one["epsilon"] > add_remove["epsilon"] + 1.0


def dp_accounting_repeat_and_select(mean: float, shape: float) -> float:
    one_run = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(256 / 60000, dp_accounting.GaussianDpEvent(1.1)), 14063)
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(rdp_module.ORDERS))
    return accountant.compose(RepeatAndSelectDpEvent(one_run, mean, shape)).get_epsilon(1e-5)


@pytest.mark.parametrize("distribution, shape", [("poisson", None), ("truncated_negative_binomial", 1.0)])
def test_papernot_steinke_bound(distribution, shape):
    eps = [random_search_cost([MNIST], 1e-5, m, distribution, shape)["epsilon"] for m in (2, 10, 100)]
    single = get_accountant("rdp").epsilon(MNIST, 1e-5)
    assert single < eps[0] < eps[1] < eps[2]
    # The public dp_accounting path (its own RDP curves, RepeatAndSelectDpEvent) gives the same bound.
    reference = [dp_accounting_repeat_and_select(m, math.inf if shape is None else shape) for m in (2, 10, 100)]
    assert eps == pytest.approx(reference, rel=1e-4)
    report = random_search_cost([MNIST], 1e-5, 10, distribution, shape)
    assert "only the selected trial" in report["conditions"] and report["accountant"] == "rdp"
    assert_no_bare_epsilon(report)


def test_papernot_steinke_golden_and_versus_naive():
    # Golden (frozen from this implementation, = dp_accounting's RepeatAndSelectDpEvent to 1e-5):
    # MNIST DP-SGD (ε = 2.597), Poisson mean 10 -> 5.749; geometric mean 10 -> 5.050.
    assert random_search_cost([MNIST], 1e-5, 10)["epsilon"] == pytest.approx(5.7494, abs=2e-3)
    assert random_search_cost([MNIST], 1e-5, 10, "truncated_negative_binomial", 1.0)["epsilon"] == pytest.approx(5.0499, abs=2e-3)
    # With many trials, releasing one selected trial is far cheaper than releasing them all.
    assert random_search_cost([MNIST], 1e-5, 100, "truncated_negative_binomial", 1.0)["epsilon"] < composed_sweep_cost([MNIST] * 100, 1e-5)["epsilon"]


def test_papernot_steinke_takes_the_worst_trial():
    cheap, costly = [G(0.004, 1.5, 5000)], [G(0.004, 0.9, 5000)]
    mixed = random_search_cost([cheap, costly], 1e-5, 10)["epsilon"]
    assert mixed == pytest.approx(random_search_cost([costly], 1e-5, 10)["epsilon"], rel=1e-3)
    assert mixed > random_search_cost([cheap], 1e-5, 10)["epsilon"]


@pytest.mark.parametrize(
    "args, message",
    [
        ((10, "poisson", 1.0), "takes no shape"),
        ((10, "truncated_negative_binomial", None), "needs a shape"),
        ((10, "uniform", None), "unknown trial-count distribution"),
        ((0.5, "poisson", None), ">= 1"),
    ],
)
def test_papernot_steinke_bad_arguments(args, message):
    with pytest.raises(PrivacyError, match=message):
        random_search_cost([MNIST], 1e-5, *args)


# ------------------------------------------------------------------------------------------------- CLI


def run_epsilon_cli(capsys, *argv: str) -> str:
    parser = argparse.ArgumentParser()
    add_epsilon_arguments(parser)
    assert run_epsilon(parser.parse_args(list(argv))) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("q, steps, target", [(0.01, 1000, 3.0), (256 / 60000, 14063, 8.0), (0.1, 50, 4.0)])
def test_a_printed_sigma_run_again_spends_at_most_the_target(capsys, q, steps, target):
    args = ("--sample-rate", repr(q), "--steps", str(steps))
    line = run_epsilon_cli(capsys, *args, "--target-epsilon", str(target))
    sigma = re.search(r"σ=([0-9.]+)\)", line).group(1)
    again = json.loads(run_epsilon_cli(capsys, *args, "--sigma", sigma, "--json"))
    assert again["epsilon"] <= target
    assert len(sigma.replace(".", "").lstrip("0")) == 6  # six significant digits, rounded up
    # Opacus' RDP code at our orders (the same bound) agrees that the printed σ meets the target.
    from opacus.accountants.analysis import rdp as opacus_rdp

    curve = opacus_rdp.compute_rdp(q=q, noise_multiplier=float(sigma), steps=steps, orders=rdp_module.ORDERS)
    assert opacus_rdp.get_privacy_spent(orders=rdp_module.ORDERS, rdp=curve, delta=1e-5)[0] <= target * (1 + 1e-7)


def test_epsilon_cli_names_the_relation(capsys):
    args = ("--sample-rate", "0.032", "--sigma", "0.8996", "--steps", "60", "--accountant", "pld")
    replace = run_epsilon_cli(capsys, *args, "--relation", "replace_one")
    assert replace.startswith("ε = 2.9472 (DP, replace-one neighbours, δ = 1e-05, pld, σ=0.8996)")
    assert "(DP, add/remove neighbours, δ = 1e-05, pld, σ=0.8996)" in run_epsilon_cli(capsys, *args)
    reference = dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3)
    reference.compose(dp_accounting.PoissonSampledDpEvent(0.032, dp_accounting.GaussianDpEvent(0.8996)), 60)
    report = json.loads(run_epsilon_cli(capsys, *args, "--relation", "replace_one", "--json"))
    assert report["neighbouring"] == "replace_one"
    assert report["epsilon"] == pytest.approx(reference.get_epsilon(1e-5), rel=1e-9)


def test_epsilon_cli_prints_a_ledgers_add_remove_comparison(capsys, tmp_path):
    ledger = PrivacyLedger("SDP", 1e-5, "pld", [G(0.032, 0.8996, 60, "dp")], compare_add_remove=True)
    ledger.record_steps("dp", 60)
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger.to_dict()))
    first, second = run_epsilon_cli(capsys, "--ledger", str(path)).splitlines()
    assert first.startswith("ε = 2.9472 (SDP, replace-one neighbours")
    assert second.startswith("ε = 2.4377 (SDP, add/remove neighbours") and second.endswith("not the guarantee")


def test_epsilon_command_both_ways():
    forward = epsilon_command(256 / 60000, 1.1, 14063, 1e-5, "rdp")
    assert forward["epsilon"] == pytest.approx(2.597, abs=5e-3)
    assert {"epsilon", "delta", "sigma", "accountant", "notion", "events"} <= set(forward)
    backward = epsilon_command(256 / 60000, None, 14063, 1e-5, "rdp", target_epsilon=forward["epsilon"])
    assert backward["sigma"] == pytest.approx(1.1, rel=2e-3)
    assert backward["epsilon"] <= forward["epsilon"]
    for bad in ((None, None), (1.1, 3.0)):
        with pytest.raises(UserError, match="exactly one"):
            epsilon_command(0.01, bad[0], 100, 1e-5, "rdp", target_epsilon=bad[1])


# ------------------------------------------------------------------------------------------- no bare ε


def test_assert_no_bare_epsilon_finds_nested_offenders():
    good = {"trials": [{"privacy": {"epsilon": 1.0, "delta": 1e-5, "notion": "DP", "accountant": "rdp",
                                    "neighbouring": "add_remove"}}]}
    assert_no_bare_epsilon(good)
    bad = {"trials": [good["trials"][0], {"metrics": ({"epsilon": 3.0, "delta": 1e-5},)}]}
    with pytest.raises(AssertionError, match=r"\$\.trials\[1\]\.metrics\[0\]: missing notion, accountant, neighbouring"):
        assert_no_bare_epsilon(bad)


def test_every_report_of_the_package_carries_its_context():
    reports = {  # each report with the neighbouring relation its ε is computed for
        "add_remove": [
            epsilon_command(0.01, 1.0, 100, 1e-5, "rdp"),
            basic_composition([epsilon_command(0.01, 1.0, 100, 1e-5, "rdp")] * 2),
            composed_sweep_cost([MNIST] * 2, 1e-5),
            random_search_cost([MNIST], 1e-5, 5),
        ],
        "replace_one": [
            epsilon_command(0.01, 1.0, 100, 1e-5, "rdp", relation="replace_one"),
            confidentiality_report(MNIST, 1e-5),
            bayesian_confidentiality_report(MNIST, 1e-5, "rdp", 0.1, 0.0),
            bayesian_confidentiality_report(MNIST, 1e-5, "rdp", 0.1, 0.0)["confidentiality"],
            light_noise_epsilon(MNIST, (0.01, 0.02), 1e-5),
            composed_sweep_cost([MNIST] * 2, 1e-5, notion="SDP"),
            random_search_cost([MNIST], 1e-5, 5, relation="replace_one"),
        ],
    }
    for relation, group in reports.items():
        for report in group:
            assert_no_bare_epsilon(report)
            assert {"epsilon", "delta", "notion", "accountant", "neighbouring", "events"} <= set(report)
            assert report["neighbouring"] == relation, report["notion"]
