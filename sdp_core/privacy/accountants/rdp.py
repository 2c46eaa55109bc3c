"""Rényi-DP accountant: RDP of the Poisson-subsampled Gaussian, summed over events, converted to (ε, δ).

Our own vectorised numpy code, checked in the tests against Opacus', dp_accounting's and an mpmath reference.

- One step is bounded by the Rényi divergence D_α(P‖Q) of a dominating pair, with P = (1−q)N(0,σ²) + qN(1,σ²):
  - add/remove neighbours: Q = N(0,σ²) (Mironov, Talwar & Zhang 2019, "Rényi Differential Privacy of the
    Sampled Gaussian Mechanism"); D_α = log A_α / (α−1), A_α = E_{z~N(0,σ²)}[(1 − q + q·exp((2z−1)/(2σ²)))^α];
  - replace-one neighbours: Q = (1−q)N(0,σ²) + qN(−1,σ²), the replaced record's clipped contribution and its
    replacement pointing in opposite directions (the pair of dp_accounting's REPLACE_ONE PLD). The pair is
    symmetric under z ↦ −z, so D_α(P‖Q) = D_α(Q‖P) and one direction bounds both.
- Integer α under add/remove use Mironov et al.'s closed form (§3.3) A_α = Σ_{k=0..α} C(α,k) (1−q)^(α−k) q^k
  exp((k²−k)/(2σ²)), a sum of positive terms, so a stable log-sum-exp. Every other (order, relation) integrates
  log ∫ P^α Q^(1−α) with the trapezoid rule in log space, which converges geometrically for these analytic
  integrands; it replaces Mironov et al.'s slowly converging series for fractional α (against mpmath,
  dp_accounting's series over-states log A_α several-fold at α ≤ 2.5 when σ is large, and stops without
  converging when q is large), and dp_accounting has no replace-one RDP for Poisson sampling at all.
- Where the integration grid would exceed `MAX_POINTS` (tiny σ at large α, ε far beyond any useful budget) a
  sound bound replaces the integral: D_α is non-decreasing in α (van Erven & Harremoës 2014, Thm 3), so a
  fractional order takes the add/remove value of ⌈α⌉; and under replace-one Q ≥ (1−q)N(0,σ²) pointwise, so
  ∫ P^α Q^(1−α) ≤ (1−q)^(1−α) A_α, i.e. D_α ≤ D_α^(add/remove) − log(1−q).
- Composition (Mironov 2017, Prop. 1): RDP curves add, so a schedule's curve is Σ steps_i · curve(q_i, σ_i),
  each distinct (q, σ, relation) curve computed once and cached.
- RDP → (ε, δ): `dp_accounting.rdp.compute_epsilon`, the conversion of Canonne, Kamath & Steinke 2020
  (Prop. 12; also Asoodeh et al. 2021), minimised over the fixed order grid `ORDERS`, a superset of
  dp_accounting's default grid (1.1 to 10.9 by 0.1, every integer to 64, then up to 1024).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
from dp_accounting.rdp import compute_epsilon
from scipy.special import gammaln, logsumexp

from sdp_core.privacy.accountants.base import Accountant, Pairs, register_accountant
from sdp_core.privacy.events import GaussianEvent, merge_events
from sdp_core.privacy.relations import ADD_REMOVE, REPLACE_ONE, check_relation

INTEGER_ORDERS = np.array(
    [*range(2, 65), *range(72, 129, 8), *range(160, 257, 32), 320, 384, 512, 768, 1024], dtype=np.float64
)
FRACTIONAL_ORDERS = np.array([k / 10 for k in range(11, 110) if k % 10])
ORDERS = np.concatenate([FRACTIONAL_ORDERS, INTEGER_ORDERS])  # the curve layout: fractional first, then integer

MAX_POINTS = 1 << 14
"""Largest trapezoid grid for one order; beyond it the order takes the sound bound of the module docstring."""
SENSITIVITY = {ADD_REMOVE: 1.0, REPLACE_ONE: 2.0}
"""Distance between the pair's means without sampling (q = 1): N(1,σ²) against N(0,σ²), or against N(−1,σ²)."""

# Flat layout of every (α, k) term of the integer orders, so one vectorised pass computes them all.
_LENGTHS = INTEGER_ORDERS.astype(np.int64) + 1
_STARTS = np.concatenate([[0], np.cumsum(_LENGTHS)[:-1]])
_ALPHA = np.repeat(INTEGER_ORDERS, _LENGTHS)
_K = np.concatenate([np.arange(n, dtype=np.float64) for n in _LENGTHS])
_LOG_BINOM = gammaln(_ALPHA + 1) - gammaln(_K + 1) - gammaln(_ALPHA - _K + 1)
_CEIL = np.searchsorted(INTEGER_ORDERS, np.ceil(ORDERS))  # index of ⌈α⌉ in INTEGER_ORDERS, for every order
_BAND = np.ceil(np.log2(ORDERS))  # orders integrated together on one grid: (2^(b−1), 2^b]


def _log_a_integer(q: float, sigma: float) -> np.ndarray:
    log_terms = _LOG_BINOM + (_ALPHA - _K) * np.log1p(-q) + _K * np.log(q) + (_K**2 - _K) / (2 * sigma**2)
    peak = np.maximum.reduceat(log_terms, _STARTS)
    return peak + np.log(np.add.reduceat(np.exp(log_terms - np.repeat(peak, _LENGTHS)), _STARTS))


def _reach(alphas: np.ndarray, mirrored: bool) -> np.ndarray:
    """σ·u beyond which the integrand of order α only decays like a Gaussian (see `_log_moments`)."""
    return 2 * alphas - 1 if mirrored else alphas


def _ratio(q: float, sigma: float, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x = P/N(0,σ²) − 1 at z = σu (exact even where it is tiny) and log(1 + x)."""
    w = (2 * sigma * u - 1) / (2 * sigma**2)  # log N(z; 1, σ²)/N(z; 0, σ²)
    x = q * np.expm1(np.minimum(w, 700.0))
    return x, np.where(w < 700.0, np.log1p(x), np.log(q) + w)


def _log_moments(q: float, sigma: float, alphas: np.ndarray, mirrored: bool) -> np.ndarray:
    """log ∫ P^α Q^(1−α) at each of `alphas`, by the trapezoid rule on one grid in u = z/σ.

    Q = (1−q)N(0,σ²) + qN(−1,σ²) when `mirrored` (replace-one), else N(0,σ²) (add/remove). With f the log of
    the integrand in u, f'(u) = −u + (α·s₁ + (α−1)·s₂)/σ with s₁, s₂ ∈ [0, 1] (s₂ = 0 unless mirrored): f falls
    at least like a standard Gaussian below u = 0 and above u = reach/σ, so [−12, reach/σ + 12] holds all the
    mass. The step h ≤ σ/2 keeps the trapezoid error below e^(-4π²) relative: the integrand is analytic in a
    strip of half-width πσ.
    """
    alpha = alphas[:, None]
    h = min(0.5, sigma / 2)
    u = np.arange(-12.0, float(_reach(alphas, mirrored).max()) / sigma + 12.0 + h, h)
    log_weight = np.log(h) - u**2 / 2 - 0.5 * np.log(2 * np.pi)
    x1, log1 = _ratio(q, sigma, u)
    x2, log2 = _ratio(q, sigma, -u) if mirrored else (0.0, 0.0)  # Q/N(0,σ²) at z is P/N(0,σ²) at −z
    exponent = alpha * log1 + (1 - alpha) * log2
    log_m = logsumexp(log_weight + exponent, axis=1)
    # Near ∫ = 1 (tiny q) that sum loses digits to the unit mass; integrate the remainder
    # (1+x₁)^α (1+x₂)^(1−α) − 1 − αx₁ − (1−α)x₂ instead (E[x₁] = E[x₂] = 0 exactly), non-negative by the
    # convexity of (a, b) ↦ a^α b^(1−α). Its terms are bounded wherever it is used (log ∫ < 1); elsewhere
    # they may overflow, unused.
    with np.errstate(over="ignore", invalid="ignore"):
        weight = np.exp(log_weight)
        tilted = np.where(  # weight · ((1+x₁)^α (1+x₂)^(1−α) − 1), without 0 · ∞ where the weight underflows
            exponent < 700.0, weight * np.expm1(np.minimum(exponent, 700.0)), np.exp(log_weight + exponent)
        )
        log_m_small = np.log1p(np.sum(tilted - weight * (alpha * x1 + (1 - alpha) * x2), axis=1))
    return np.where(log_m < 1.0, log_m_small, log_m)


def _subsampled_curve(q: float, sigma: float, mirrored: bool) -> np.ndarray:
    integer = np.maximum(_log_a_integer(q, sigma), 0.0) / (INTEGER_ORDERS - 1)  # log A_α >= 0: clip rounding
    curve = integer[_CEIL] - (np.log1p(-q) if mirrored else 0.0)  # the sound bound (exact at add/remove integers)
    points = (_reach(ORDERS, mirrored) / sigma + 24.0) / min(0.5, sigma / 2)
    integrate = (points <= MAX_POINTS) & (mirrored | (ORDERS != np.floor(ORDERS)))
    for band in np.unique(_BAND[integrate]):
        idx = np.flatnonzero(integrate & (_BAND == band))
        curve[idx] = np.maximum(_log_moments(q, sigma, ORDERS[idx], mirrored), 0.0) / (ORDERS[idx] - 1)
    return curve


@lru_cache(maxsize=1 << 16)
def sampled_gaussian_rdp(sample_rate: float, noise_multiplier: float, relation: str = ADD_REMOVE) -> np.ndarray:
    """RDP at `ORDERS` of one step of the Poisson-subsampled Gaussian under `relation` (read-only array).

    Needs 0 < sample_rate <= 1 and noise_multiplier > 0.
    """
    q, sigma = sample_rate, noise_multiplier
    if q == 1.0:  # no sampling: the plain Gaussian mechanism, of sensitivity 1 or 2
        curve = ORDERS * SENSITIVITY[check_relation(relation)] ** 2 / (2 * sigma**2)
    else:
        curve = _subsampled_curve(q, sigma, check_relation(relation) == REPLACE_ONE)
    curve.flags.writeable = False
    return curve


def compose_rdp(pairs: Sequence[tuple[float, float, int]], relation: str = ADD_REMOVE) -> np.ndarray:
    """Σ steps · RDP curve over distinct (q, σ, steps) with q > 0 and σ > 0."""
    total = np.zeros_like(ORDERS)
    for q, sigma, steps in pairs:
        total += steps * sampled_gaussian_rdp(q, sigma, relation)
    return total


def rdp_epsilon(pairs: Sequence[tuple[float, float, int]], delta: float, relation: str = ADD_REMOVE) -> float:
    """ε at δ of the composition of distinct (q, σ, steps) with q > 0 and σ > 0."""
    return float(compute_epsilon(ORDERS, compose_rdp(pairs, relation), delta)[0])


@register_accountant("rdp")
class RDPAccountant(Accountant):
    """Rényi DP (Mironov 2017) of the sampled Gaussian on a fixed order grid; see the module docstring."""

    orders = ORDERS

    def _epsilon(self, pairs: Pairs, delta: float, relation: str) -> float:
        return rdp_epsilon(pairs, delta, relation)

    def curve(self, events: Sequence[GaussianEvent], relation: str = ADD_REMOVE) -> np.ndarray:
        """The composed RDP curve of `events` at `ORDERS` under `relation` (inf where some σ = 0)."""
        pairs = merge_events(events)
        if any(sigma == 0.0 for _, sigma, _ in pairs):
            return np.full_like(ORDERS, np.inf)
        return compose_rdp(pairs, relation)
