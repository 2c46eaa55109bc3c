"""Conformance of every registered accountant, plus independent cross-checks and golden values."""

from __future__ import annotations

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting import pld as dp_pld

from sdp_core.errors import PrivacyError
from sdp_core.privacy import ACCOUNTANTS, GaussianEvent, get_accountant
from sdp_core.privacy.accountants import rdp as rdp_module

G = GaussianEvent
MNIST_Q, MNIST_SIGMA, MNIST_STEPS, MNIST_DELTA = 256 / 60000, 1.1, 14063, 1e-5


def opacus_rdp_epsilon(events: list[GaussianEvent], delta: float, orders=rdp_module.ORDERS) -> float:
    from opacus.accountants.analysis import rdp as opacus_rdp

    curve = sum(opacus_rdp.compute_rdp(q=e.sample_rate, noise_multiplier=e.noise_multiplier, steps=e.steps, orders=orders) for e in events)
    return float(opacus_rdp.get_privacy_spent(orders=orders, rdp=curve, delta=delta)[0])


def opacus_prv_epsilon(events: list[GaussianEvent], delta: float) -> float:
    from opacus.accountants import PRVAccountant

    accountant = PRVAccountant()
    accountant.history = [(e.noise_multiplier, e.sample_rate, e.steps) for e in events]
    return float(accountant.get_epsilon(delta))


def dp_accounting_pld_epsilon(events: list[GaussianEvent], delta: float) -> float:
    """PLDs built and composed one by one through dp_accounting's PLD objects, not its accountant."""
    composed = None
    for e in events:
        one = dp_pld.privacy_loss_distribution.from_gaussian_mechanism(
            e.noise_multiplier, sampling_prob=e.sample_rate, value_discretization_interval=1e-3
        ).self_compose(e.steps)
        composed = one if composed is None else composed.compose(one)
    return composed.get_epsilon_for_delta(delta)


# For each accountant: an implementation that is not its backend, with a relative and an absolute tolerance.
INDEPENDENT = {
    "rdp": (opacus_rdp_epsilon, 1e-6, 0.0),  # the same bound in Opacus' code: must agree almost exactly
    # PRV and PLD discretise the same tight ε differently; PRV reports its estimate + ε_error = 0.01.
    "pld": (opacus_prv_epsilon, 0.02, 0.01),
    "prv": (dp_accounting_pld_epsilon, 0.02, 0.01),
}


def random_grid(n: int, seed: int, max_steps: int) -> list[tuple[float, float, int, float]]:
    rng = np.random.default_rng(seed)
    return [
        (float(10 ** rng.uniform(-3, -1)), float(rng.uniform(0.7, 3.0)), int(rng.integers(1, max_steps)), float(10 ** rng.uniform(-7, -4)))
        for _ in range(n)
    ]


@pytest.fixture(params=sorted(ACCOUNTANTS))
def name(request) -> str:
    return request.param


def test_registry_holds_the_three_accountants():
    assert set(ACCOUNTANTS) == {"rdp", "prv", "pld"}
    with pytest.raises(PrivacyError, match="unknown accountant"):
        get_accountant("moments")


def test_monotone_in_sigma_rate_and_steps(name):
    acc = get_accountant(name)
    eps = lambda q, s, t: acc.epsilon([G(q, s, t)], 1e-5)  # noqa: E731
    by_sigma = [eps(0.01, s, 100) for s in (0.8, 1.2, 2.5)]
    by_rate = [eps(q, 1.2, 100) for q in (0.003, 0.01, 0.03)]
    by_steps = [eps(0.01, 1.2, t) for t in (20, 100, 300)]
    assert all(a > b for a, b in zip(by_sigma, by_sigma[1:])), by_sigma
    assert all(a < b for a, b in zip(by_rate, by_rate[1:])), by_rate
    assert all(a < b for a, b in zip(by_steps, by_steps[1:])), by_steps


def test_composition_of_heterogeneous_lists(name):
    acc = get_accountant(name)
    first = [G(0.01, 0.9, 300, "a"), G(0.02, 1.4, 200, "b")]
    second = [G(0.005, 0.7, 400, "c")]
    both = acc.epsilon(first + second, 1e-5)
    assert both == pytest.approx(acc.epsilon(second + first, 1e-5), rel=1e-9)
    assert both > max(acc.epsilon(first, 1e-5), acc.epsilon(second, 1e-5))
    # Splitting an event into two of the same mechanism changes nothing.
    assert acc.epsilon([G(0.01, 0.9, 120), G(0.01, 0.9, 180)], 1e-5) == pytest.approx(acc.epsilon([G(0.01, 0.9, 300)], 1e-5), rel=1e-9)


@pytest.mark.parametrize(
    "reference",
    [
        ("rdp", lambda events, delta: opacus_rdp_epsilon(events, delta)),
        ("pld", dp_accounting_pld_epsilon),
        ("prv", opacus_prv_epsilon),  # Opacus' own heterogeneous composition (pairwise convolution tree)
    ],
    ids=lambda r: r[0],
)
def test_heterogeneous_composition_matches_the_library_path(reference):
    name, ref = reference
    events = [G(0.01, 0.9, 300), G(0.02, 1.4, 200), G(0.005, 0.7, 400)]
    assert get_accountant(name).epsilon(events, 1e-5) == pytest.approx(ref(events, 1e-5), rel=2e-3)


def test_rdp_composition_is_the_sum_of_curves():
    acc = get_accountant("rdp")
    first, second = [G(0.01, 0.9, 300)], [G(0.02, 1.4, 200), G(0.005, 0.7, 400)]
    summed = acc.curve(first) + acc.curve(second)
    np.testing.assert_allclose(acc.curve(first + second), summed, rtol=1e-12)
    assert acc.epsilon(first + second, 1e-5) == pytest.approx(
        dp_accounting.rdp.compute_epsilon(acc.orders, summed, 1e-5)[0], rel=1e-12
    )


@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")  # Opacus' PRV sizes its domain by RDP
def test_agrees_with_an_independent_implementation(name):
    ref, rel, abs_ = INDEPENDENT[name]
    acc = get_accountant(name)
    # RDP is cheap: a wide grid; PRV/PLD discretise on grids that grow with the steps, so fewer, shorter runs.
    grid = random_grid(50, seed=1, max_steps=20_000) if name == "rdp" else random_grid(10, seed=2, max_steps=200)
    off = []
    for q, sigma, steps, delta in grid:
        events = [G(q, sigma, steps)]
        ours, theirs = acc.epsilon(events, delta), ref(events, delta)
        if abs(ours - theirs) > rel * theirs + abs_:
            off.append((q, sigma, steps, delta, ours, theirs))
    assert not off, f"{name} disagrees on {len(off)} of {len(grid)} points, e.g. {off[:3]}"


@pytest.mark.parametrize("name, low, high", [("rdp", 2.592, 2.602), ("pld", 2.37, 2.40), ("prv", 2.37, 2.40)])
def test_golden_mnist_dpsgd(name, low, high):
    eps = get_accountant(name).epsilon([G(MNIST_Q, MNIST_SIGMA, MNIST_STEPS)], MNIST_DELTA)
    assert low <= eps <= high


def test_free_and_non_private_events(name):
    acc = get_accountant(name)
    assert acc.epsilon([], 1e-5) == 0.0
    assert acc.epsilon([G(0.0, 1.0, 100), G(0.01, 1.0, 0)], 1e-5) == 0.0
    assert acc.epsilon([G(0.01, 0.0, 10)], 1e-5) == math.inf
    with pytest.raises(PrivacyError, match="delta"):
        acc.epsilon([G(0.01, 1.0, 10)], 0.0)


def test_full_batch_is_the_gaussian_mechanism():
    # q = 1: RDP(α) = α T / (2σ²) exactly (Mironov 2017, Prop. 7).
    curve = get_accountant("rdp").curve([G(1.0, 2.0, 10)])
    np.testing.assert_allclose(curve, rdp_module.ORDERS * 10 / 8, rtol=1e-12)


def test_rdp_integer_orders_match_dp_accounting():
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

    integer = slice(len(rdp_module.FRACTIONAL_ORDERS), None)
    for q, sigma in [(1e-4, 0.8), (0.003, 1.1), (0.05, 0.6), (0.3, 2.0), (0.9, 5.0)]:
        ours = rdp_module.sampled_gaussian_rdp(q, sigma)[integer]
        theirs = dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, rdp_module.INTEGER_ORDERS)
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)


@pytest.mark.parametrize("q, sigma", [(1e-6, 1.0), (1e-3, 0.5), (0.05, 0.4), (0.3, 4.0)])
def test_rdp_fractional_orders_match_mpmath(q, sigma):
    mpmath.mp.dps = 25
    qm = mpmath.mpf(q)

    def log_a(alpha: float) -> float:  # log E_{z~N(0,σ²)}[(1 − q + q e^{(2z−1)/(2σ²)})^α], remainder form
        ratio = lambda z: qm * mpmath.expm1((2 * z - 1) / (2 * sigma**2))  # noqa: E731
        f = lambda z: mpmath.npdf(z, 0, sigma) * ((1 + ratio(z)) ** alpha - 1 - alpha * ratio(z))  # noqa: E731
        # Break at 0, 1 (the loss turns on) and α (the peak of the tilted Gaussian); tails are negligible.
        return float(mpmath.log1p(mpmath.quad(f, [-12 * sigma, 0, 1, alpha, alpha + 12 * sigma])))

    ours = rdp_module.sampled_gaussian_rdp(q, sigma)
    for i in (0, len(rdp_module.FRACTIONAL_ORDERS) - 1):
        alpha = rdp_module.FRACTIONAL_ORDERS[i]
        assert ours[i] == pytest.approx(log_a(alpha) / (alpha - 1), rel=1e-8)


def test_rdp_grid_is_as_tight_as_dp_accountings_default_orders():
    # Same RDP bound, different order grids: ours must not be looser by more than 0.3 % where ε <= 12.
    for q, sigma, steps in [(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), (0.01, 0.7, 3000), (0.1, 1.0, 100), (0.05, 1.0, 1000), (1.0, 1.0, 3)]:
        ours = get_accountant("rdp").epsilon([G(q, sigma, steps)], 1e-5)
        theirs = dp_accounting.rdp.RdpAccountant().compose(
            dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
        ).get_epsilon(1e-5)
        assert ours <= theirs * 1.003, (q, sigma, steps, ours, theirs)
