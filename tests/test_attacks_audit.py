"""Empirical ε lower bounds: below a known mechanism's ε, close to it with many canaries, 0 without signal."""

from __future__ import annotations

import numpy as np
import pytest

from sdp_core.attacks import empirical_epsilon
from sdp_core.attacks.audit import one_run_p_value
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


def test_empty_side_is_a_user_error():
    with pytest.raises(UserError):
        empirical_epsilon([], [1.0])
