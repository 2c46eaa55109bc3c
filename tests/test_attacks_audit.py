"""Empirical ε lower bounds: below a known mechanism's ε, close to it with many canaries, 0 without signal; the
one-run bound equals a direct binomial computation of Steinke, Nasr & Jagielski (2023)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from sdp_core.attacks.audit import empirical_epsilon
from sdp_core.attacks.audit import gaussian_mu, one_run_epsilon, one_run_p_value, perfect_attack_bound
from sdp_core.errors import UserError

METHODS = ["one_run", "clopper_pearson"]


def _randomized_response(epsilon: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores of an ε-DP mechanism: each canary's bit is reported truthfully with probability e^ε/(1+e^ε)."""
    rng = np.random.default_rng(seed)
    truthful = 1 / (1 + np.exp(-epsilon))
    return (rng.random(n) < truthful).astype(float), (rng.random(n) >= truthful).astype(float)


@pytest.mark.parametrize("method", METHODS)
def test_bound_is_below_and_near_the_true_epsilon(method):
    members, nonmembers = _randomized_response(2.0, 1000, seed=0)
    result = empirical_epsilon(members, nonmembers, delta=1e-5, method=method)
    assert 1.2 < result["epsilon_lower_bound"] < 2.0
    assert result["notion"] == "empirical lower bound" and result["accountant"] == f"audit:{method}"
    assert result["delta"] == 1e-5 and result["confidence"] == 0.95


@pytest.mark.parametrize("method", METHODS)
def test_no_signal_gives_no_bound(method):
    rng = np.random.default_rng(1)
    assert empirical_epsilon(rng.normal(size=300), rng.normal(size=300), method=method)["epsilon_lower_bound"] < 0.2
    # Members listed first with all scores tied: an order-dependent tie break would "find" them.
    assert empirical_epsilon(np.zeros(200), np.zeros(200), method=method)["epsilon_lower_bound"] == 0.0


def test_one_run_p_value_grows_with_epsilon_and_delta():
    p = [one_run_p_value(100, 100, 80, e, 0.0) for e in (0.5, 1.0, 2.0)]
    assert p[0] < p[1] < p[2]
    assert one_run_p_value(100, 100, 80, 1.0, 1e-3) > p[1]


def test_few_canaries_bound_is_modest_even_when_perfectly_separated():
    result = empirical_epsilon([100.0] * 10, [0.0] * 10)
    assert 0 < result["epsilon_lower_bound"] < 3  # 20 guesses cannot prove a large ε
    assert result["guesses"] == 20 and result["correct"] == 20


def _direct_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Steinke et al. 2023's p-value, term by term: P[B >= v] + 2mδ·max_i P[v > B >= v - i]/i, B ~ Binom(r, q)."""
    q = math.exp(epsilon) / (1 + math.exp(epsilon))
    pmf = stats.binom.pmf(np.arange(r + 1), r, q)
    below = np.cumsum(pmf[:v][::-1])  # below[i - 1] = P[v > B >= v - i]
    slack = (below / np.arange(1, v + 1)).max(initial=0.0)
    return min(1.0, pmf[v:].sum() + 2 * m * delta * slack)


def _direct_bound(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest ε whose p-value is at most alpha, by bisection on the direct p-value."""
    if _direct_p_value(m, r, v, 0.0, delta) > alpha:
        return 0.0
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _direct_p_value(m, r, v, mid, delta) <= alpha else (lo, mid)
    return lo


@pytest.mark.parametrize("m,r,v,delta", [(40, 20, 20, 1e-5), (100, 100, 80, 1e-5), (1000, 600, 600, 1e-5),
                                         (200, 50, 45, 0.0), (20, 20, 12, 1e-5)])
def test_one_run_bound_equals_a_direct_binomial_computation(m, r, v, delta):
    assert one_run_epsilon(m, r, v, delta, 0.05) == pytest.approx(_direct_bound(m, r, v, delta, 0.05), abs=1e-4)


def test_perfect_guesses_on_forty_canaries_give_a_positive_bound_it_states_with_its_parameters():
    result = empirical_epsilon([10.0] * 20, [1.0] * 20, delta=1e-5)
    # m = 40 gives guess counts k in {20, 10, 5, 2, 1}: the Bonferroni share of 5 %, and all 40 guesses right.
    assert result["canaries"] == 40 and result["guesses"] == 40 and result["correct"] == 40
    assert result["epsilon_lower_bound"] == pytest.approx(_direct_bound(40, 40, 40, 1e-5, 0.05 / 5), abs=1e-4)
    assert result["epsilon_lower_bound"] > 2
    assert result["epsilon_lower_bound_per_record"] == result["epsilon_lower_bound"]  # one record per canary


def test_per_record_bound_of_repeated_canaries_is_below_the_group_bound_over_n():
    members, nonmembers = _randomized_response(3.0, 1000, seed=2)
    result = empirical_epsilon(members, nonmembers, delta=1e-5, group_size=4)
    assert result["group_size"] == 4
    assert 0 < result["epsilon_lower_bound_per_record"] <= result["epsilon_lower_bound"] / 4 + 1e-9


def test_a_side_without_canaries():
    """One-run guesses need no canary on each side (which are members is a coin per canary); the threshold
    analysis needs rates of both."""
    assert empirical_epsilon([5.0, 4.0, 3.0], [])["epsilon_lower_bound"] == 0.0  # three guesses prove nothing
    with pytest.raises(UserError):
        empirical_epsilon([], [])
    with pytest.raises(UserError):
        empirical_epsilon([], [1.0], method="clopper_pearson")


def test_ceiling_is_the_bound_of_a_perfect_attack_and_a_thousand_canaries_reach_three():
    """What an audit can show at most: the bound of perfectly separated scores. 20 canaries cannot show ε ≈ 1.5;
    1,000 (half inserted) can show more than 3 (Steinke, Nasr & Jagielski 2023, Fig. 1)."""
    for m, at_most, at_least in ((20, 1.5, 1.0), (1000, 6.0, 3.0)):
        perfect = empirical_epsilon(np.arange(m // 2) + 1e3, np.arange(m - m // 2), delta=1e-5)
        none = empirical_epsilon(np.zeros(m // 2), np.zeros(m - m // 2), delta=1e-5)
        assert perfect["ceiling"] == none["ceiling"] == pytest.approx(perfect["epsilon_lower_bound"])
        assert at_least < perfect["ceiling"] < at_most


@pytest.mark.parametrize("inserted", [480, 500, 520, 300])
def test_ceiling_comes_from_the_canaries_the_coin_flips_inserted(inserted):
    """The most an audit can show is what a perfect attack on these very members and non-members shows: with 480
    or 520 of 1,000 inserted that is 4.47 at δ = 1e-5 and 95 % (not the 5.16 of an even split), by the direct
    binomial computation at the best guess count with every guess right."""
    perfect = empirical_epsilon(np.arange(inserted) + 1e3, np.arange(1000 - inserted), delta=1e-5)
    assert perfect["ceiling"] == pytest.approx(perfect["epsilon_lower_bound"], abs=1e-6)
    ks = [1, 3, 7, 15, 31, 62, 125, 250, 500]  # m = 1000: k = m/2, m/4, ... (Bonferroni over 9)
    direct = max(_direct_bound(1000, 2 * k, min(k, inserted) + min(k, 1000 - inserted), 1e-5, 0.05 / len(ks))
                 for k in ks)
    assert perfect["ceiling"] == pytest.approx(direct, abs=1e-4)
    if inserted in (480, 520):
        assert perfect["ceiling"] == pytest.approx(4.47, abs=0.005)


def test_the_bound_is_on_replace_one_neighbours():
    """Canaries go into existing records: the audit tells apart datasets of the same records, one changed."""
    assert empirical_epsilon([3.0, 2.0], [1.0, 0.0])["neighbouring"] == "replace_one"


def test_gaussian_mu_meets_its_delta_by_the_privacy_loss_distribution():
    """The Gaussian mechanism's δ(ε) is E[(1 − e^{ε−L})₊] for its privacy loss L ~ N(μ²/2, μ²) (the hockey-stick
    divergence), integrated here numerically: an independent route to `gaussian_mu`'s closed form."""
    for epsilon, delta in ((1.0, 1e-5), (3.0, 1e-5), (8.0, 1e-6)):
        mu = gaussian_mu(epsilon, delta)
        loss = stats.norm(mu**2 / 2, mu)
        integral, _ = integrate.quad(lambda x: (1 - math.exp(epsilon - x)) * loss.pdf(x), epsilon, np.inf)
        assert integral == pytest.approx(delta, rel=1e-4)


def test_a_perfect_attacks_bound_is_what_the_audit_finds_on_gaussian_scores():
    """Scores drawn as the best attack on an (ε, δ) Gaussian mechanism sees them (N(μ, 1) inserted, N(0, 1) held
    out): the audit's bounds over many draws centre on `perfect_attack_bound`, which grows with ε and m."""
    m, epsilon = 1000, 3.0
    mu = gaussian_mu(epsilon, 1e-5)
    rng = np.random.default_rng(0)
    bounds = [empirical_epsilon(rng.normal(mu, 1, m // 2), rng.normal(0, 1, m // 2))["epsilon_lower_bound"]
              for _ in range(40)]
    assert np.median(bounds) == pytest.approx(perfect_attack_bound(epsilon, m), abs=0.15)
    at = [perfect_attack_bound(e, m) for e in (1.0, 3.0, 8.0)]
    assert at == sorted(at) and at[0] < 0.3 < at[2] < epsilon * 8
    assert perfect_attack_bound(3.0, 100) < at[1] and perfect_attack_bound(0.0, m) == 0.0
