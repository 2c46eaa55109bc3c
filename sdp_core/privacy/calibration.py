"""Noise calibration: the σ scale that makes a schedule spend exactly its ε budget, never more.

A schedule's *shape* is a list of segments (sample rate q_k, steps T_k, relative multiplier m_k); the noise of
segment k is σ_k = s·m_k. ε is decreasing in s, so `calibrate_noise` brackets the target and runs the
Illinois variant of regula falsi on log ε against log s (nearly linear, so a few accountant calls suffice),
keeping the feasible end of the bracket: the returned scale's ε has been computed, is ≤ the target and
within `rel_tol` of it. A point where the accountant cannot compute ε (e.g. ε far off the PRV grid) counts as
infeasible (ε = ∞) and the search goes on. ε is computed under the given neighbouring relation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Union

from sdp_core.errors import PrivacyError
from sdp_core.privacy.accountants import Accountant, get_accountant
from sdp_core.privacy.accountants.base import AccountingFailure, check_delta
from sdp_core.privacy.events import GaussianEvent
from sdp_core.privacy.relations import ADD_REMOVE, check_relation

MAX_NOISE_MULTIPLIER = 1e3
"""Above this σ a target is called unreachable: training would be pure noise."""
MIN_NOISE_MULTIPLIER = 1e-2
"""Below this σ no target is worth a search; a target met even here returns this σ."""
MAX_EVALUATIONS = 100


@dataclass(frozen=True)
class Segment:
    """Part of a schedule: `steps` steps at sampling rate `sample_rate` with σ = scale · `multiplier`."""

    sample_rate: float
    steps: int
    multiplier: float = 1.0
    phase: str = ""
    mechanism: str = ""
    touches: str = "all"

    def __post_init__(self) -> None:
        if not (self.multiplier > 0 and math.isfinite(self.multiplier)):
            raise PrivacyError(f"segment multiplier must be finite and > 0, got {self.multiplier}")

    def event(self, scale: float) -> GaussianEvent:
        return GaussianEvent(
            self.sample_rate, scale * self.multiplier, self.steps, self.phase, self.mechanism, self.touches
        )


Shape = Sequence[Union[Segment, tuple]]
"""Segments, or plain tuples `(sample_rate, steps[, multiplier[, phase, mechanism, touches]])`."""


def segments(shape: Shape) -> list[Segment]:
    return [s if isinstance(s, Segment) else Segment(*s) for s in shape]


def schedule_events(shape: Shape, scale: float) -> list[GaussianEvent]:
    """The events of `shape` at noise scale `scale` (σ_k = scale · m_k)."""
    return [s.event(scale) for s in segments(shape)]


def _epsilon_or_inf(acc: Accountant, events: list[GaussianEvent], delta: float, relation: str) -> float:
    """ε of `events`, or ∞ where the accountant cannot compute it (for a search, an infeasible point)."""
    try:
        return acc.epsilon(events, delta, relation)
    except AccountingFailure:
        return math.inf


def calibrate_noise(
    shape: Shape,
    target_epsilon: float,
    delta: float,
    accountant: str = "rdp",
    fixed_events: Sequence[GaussianEvent] = (),
    rel_tol: float = 1e-3,
    relation: str = ADD_REMOVE,
) -> float:
    """The noise scale s for which `fixed_events` + `shape` at σ_k = s·m_k spend ε ∈ [(1−rel_tol)·target, target]
    under the neighbouring `relation`.

    `fixed_events` are composed as they are (e.g. an already calibrated phase 1). Raises PrivacyError when the
    target cannot be met with σ ≤ MAX_NOISE_MULTIPLIER, or when the fixed events alone already spend it.
    """
    if not target_epsilon > 0 or not math.isfinite(target_epsilon):
        raise PrivacyError(f"target epsilon must be finite and > 0, got {target_epsilon}")
    check_delta(delta)
    check_relation(relation)
    segs = segments(shape)
    if all(s.steps == 0 or s.sample_rate == 0 for s in segs):
        raise PrivacyError("the schedule has no private step, so there is no noise to calibrate")
    acc = get_accountant(accountant)
    fixed = list(fixed_events)
    largest = max(s.multiplier for s in segs)
    lo, hi = math.log(MIN_NOISE_MULTIPLIER / largest), math.log(MAX_NOISE_MULTIPLIER / largest)

    def excess(x: float) -> float:  # log ε(e^x) − log target: decreasing, ≤ 0 means feasible
        eps = _epsilon_or_inf(acc, fixed + schedule_events(segs, math.exp(x)), delta, relation)
        return math.inf if eps == math.inf else math.log(max(eps, 1e-300)) - math.log(target_epsilon)

    if fixed and (spent := _epsilon_or_inf(acc, fixed, delta, relation)) >= target_epsilon:
        raise PrivacyError(
            f"target ε={target_epsilon:g} at δ={delta:g} is unreachable: the fixed events alone spend ε={spent:.4g} ({accountant})"
        )
    x = _solve(excess, min(max(0.0, lo), hi), lo, hi, math.log1p(-rel_tol))
    if x is None:
        at_cap = _epsilon_or_inf(acc, fixed + schedule_events(segs, math.exp(hi)), delta, relation)
        raise PrivacyError(
            f"target ε={target_epsilon:g} at δ={delta:g} is unreachable: even σ={MAX_NOISE_MULTIPLIER:g} spends "
            f"ε={at_cap:.4g} ({accountant}); raise the target or lower the sampling rate or the steps"
        )
    return math.exp(x)


def _solve(excess: Callable[[float], float], x0: float, lo: float, hi: float, tol: float) -> float | None:
    """The feasible x (excess ≤ 0) with excess(x) ≥ tol, in [lo, hi]; None when even hi is infeasible.

    Brackets by doubling steps from x0, then runs Illinois regula falsi (it halves the stale end's value when
    the same end moves twice in a row, which keeps convergence superlinear), always keeping a feasible end.
    """
    step = math.log(2.0)
    a, ga = b, gb = x0, excess(x0)  # a: infeasible end (> 0), b: feasible end (<= 0)
    while ga > 0 and gb > 0:  # move up until feasible
        if b == hi:
            return None
        a, ga = b, gb
        b = min(b + step, hi)
        gb, step = excess(b), 2 * step
    while ga <= 0:  # move down until infeasible
        if a == lo:
            return lo
        b, gb = a, ga
        a = max(a - step, lo)
        ga, step = excess(a), 2 * step

    fa, fb, side, evaluations = ga, gb, 0, 0
    while gb < tol and abs(b - a) > 1e-12 and evaluations < MAX_EVALUATIONS:
        x = b - fb * (b - a) / (fb - fa) if math.isfinite(fa) else (a + b) / 2
        if not min(a, b) < x < max(a, b):
            x = (a + b) / 2
        gx, evaluations = excess(x), evaluations + 1
        if gx > 0:
            a, ga, fa = x, gx, gx
            fb = fb / 2 if side == -1 else fb
            side = -1
        else:
            b, gb, fb = x, gx, gx
            fa = fa / 2 if side == 1 else fa
            side = 1
    return b


def calibrate_two_phase(
    phase1: Shape,
    phase2: Shape,
    target_epsilon: float,
    delta: float,
    accountant: str = "rdp",
    phase1_share: float = 0.1,
    relation: str = ADD_REMOVE,
) -> tuple[float, float]:
    """Scales (s1, s2) for a two-phase mechanism: phase 1 alone spends `phase1_share` of the target; phase 2
    gets the σ that makes the *composition* of both phases spend the whole target (both under `relation`).

    For JFT's light-noise phase 1 pass its segments with the amplified rate p = q·m̃ (see `light_noise`).
    """
    if not 0 < phase1_share < 1:
        raise PrivacyError(f"phase1_share must be in (0, 1), got {phase1_share}")
    s1 = calibrate_noise(phase1, phase1_share * target_epsilon, delta, accountant, relation=relation)
    s2 = calibrate_noise(
        phase2, target_epsilon, delta, accountant, fixed_events=schedule_events(phase1, s1), relation=relation
    )
    return s1, s2
