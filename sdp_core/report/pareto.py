"""Non-dominated sort over any number of objectives, each minimised or maximised.

Point a dominates point b when a is at least as good as b on every objective and strictly better on one.
Equal points do not dominate each other, so duplicates on the front all stay on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from sdp_core.config.sweep import CONTROL_TRIAL, Objective, utility_objective
from sdp_core.errors import UserError
from sdp_core.learning import learned_nothing
from sdp_core.report.load import Sweep, Trial
from sdp_core.report.power import EMPIRICAL_METRICS, Power, sweep_power


def non_dominated(points: np.ndarray | Sequence[Sequence[float]], modes: Sequence[str]) -> np.ndarray:
    """Boolean mask of the points no other point dominates.

    `points` is n × k (finite values), `modes` holds k entries "min" or "max".
    """
    p = np.asarray(points, dtype=float).reshape(len(points), len(modes))  # n × k, or ValueError
    if not np.isfinite(p).all():
        raise ValueError("points must be finite (filter missing metrics first)")
    if any(m not in ("min", "max") for m in modes):
        raise ValueError(f"modes must be 'min' or 'max', got {list(modes)}")
    return non_dominated_beyond_noise(p, p, modes)  # exact values: intervals of width 0


def non_dominated_beyond_noise(low: np.ndarray, high: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """Boolean mask of the points no other point dominates by more than their uncertainty.

    Each point's objective k is an interval [low, high] (equal ends for a value measured without one). With every
    objective turned into one to minimise, a dominates b when a is not worse beyond the intervals on any objective
    (low_a ≤ high_b) and better beyond them on one (high_a < low_b): a difference inside the intervals neither
    puts a trial on the front nor takes one off it. With exact values this is `non_dominated`.
    """
    sign = np.where(np.asarray(modes) == "max", -1.0, 1.0)
    lo, hi = np.minimum(low * sign, high * sign), np.maximum(low * sign, high * sign)
    front = np.ones(len(lo), dtype=bool)
    for i in range(len(lo)):
        no_worse = (lo <= hi[i]).all(axis=1)
        better = (hi < lo[i]).any(axis=1)
        front[i] = not (no_worse & better).any()
    return front


def pareto_front(trials: list[Trial], objectives: list[Objective]) -> list[Trial]:
    """The finished trials with every objective measured that no other such trial dominates beyond the metrics'
    uncertainty (`non_dominated_beyond_noise`; mean canary exposure carries a 95 % interval)."""
    eligible = [t for t in trials if t.eligible(objectives)]
    if not eligible:
        return []
    ends = np.array([[t.interval(o.metric) or (t.metric(o.metric),) * 2 for o in objectives] for t in eligible])
    mask = non_dominated_beyond_noise(ends[..., 0], ends[..., 1], [o.mode for o in objectives])
    return [t for t, keep in zip(eligible, mask) if keep]


def ranked(trials: list[Trial], utility: Objective) -> list[Trial]:
    """`trials` by utility, best first; trials without the utility metric last; ties by trial id."""
    sign = 1.0 if utility.mode == "min" else -1.0

    def key(t: Trial) -> tuple[bool, float, str]:
        value = t.metric(utility.metric)
        return value is None, 0.0 if value is None else sign * value, t.trial_id

    return sorted(trials, key=key)


@dataclass(frozen=True)
class Analysis:
    """A sweep (its positive control set apart), its utility objective, the objectives of its front (the sweep's,
    and ε over an ε ladder; without the privacy objectives when the control shows no power, `dropped`), its Pareto
    front (best utility first) and the power of its privacy axis."""

    sweep: Sweep
    utility: Objective
    front: list[Trial]
    objectives: list[Objective]
    power: Power = field(default_factory=lambda: Power(None, None))
    dropped: list[str] = field(default_factory=list)  # privacy objectives left off the front: no power

    @property
    def trial_tokens(self) -> float | None:
        """The most training tokens of a compared trial (the control's budget is read against it)."""
        return max((v for t in self.sweep.trials if (v := t.metric("tokens")) is not None), default=None)

    @property
    def ladder(self) -> list[float]:
        """The sweep's ε ladder when it has two or more rungs (else [], and the report is the one-ε report)."""
        rungs = self.sweep.config.target_epsilons or []
        return list(rungs) if len(rungs) > 1 else []

    def best_of(self, trials: list[Trial]) -> Trial | None:
        """The finished trial with the best utility among `trials`; never one that learned nothing."""
        scored = [t for t in trials if t.state == "finished" and t.metric(self.utility.metric) is not None
                  and not learned_nothing(t.metrics)]
        return next(iter(ranked(scored, self.utility)), None)

    @property
    def best(self) -> Trial | None:
        """The headline model: best utility among finished trials with a formal guarantee."""
        return self.best_of([t for t in self.sweep.trials if t.guaranteed])


def check_same_data(sweep: Sweep) -> None:
    """A search sweep's front compares trials, so they must have seen the same data (one data fingerprint);
    otherwise a UserError names how many datasets the trials saw."""
    prints = {t.detector.get("data_fingerprint") for t in sweep.trials if t.detector.get("data_fingerprint")}
    if sweep.config.experiments is None and len(prints) > 1:
        raise UserError(f"the sweep's trials saw {len(prints)} different datasets (data fingerprints); one Pareto "
                        "front needs one dataset: give every trial the same data.seed and data settings")


LADDER_OBJECTIVE = Objective(metric="epsilon", mode="min")
"""The objective an ε ladder adds to the front: utility, ε and the sweep's privacy objectives trade off together."""


def analyse(sweep: Sweep) -> Analysis:
    """The sweep's front over its compared trials: the positive control (`CONTROL_TRIAL`) is set apart, and when it
    shows no power the privacy objectives are left off the front (`report.power`)."""
    check_same_data(sweep)
    control = next((t for t in sweep.trials if t.trial_id == CONTROL_TRIAL), None)
    sweep = replace(sweep, trials=[t for t in sweep.trials if t is not control])
    power = sweep_power(control)
    utility = utility_objective(sweep.config.objectives)
    objectives = list(sweep.config.objectives)
    dropped = [o.metric for o in objectives if power.blind and o.metric in EMPIRICAL_METRICS]
    objectives = [o for o in objectives if o.metric not in dropped]
    if len(sweep.config.target_epsilons or []) > 1 and all(o.metric != "epsilon" for o in objectives):
        objectives.append(LADDER_OBJECTIVE)
    return Analysis(sweep, utility, ranked(fronts_by_notion(sweep.trials, objectives), utility), objectives, power,
                    dropped)


def fronts_by_notion(trials: list[Trial], objectives: list[Objective]) -> list[Trial]:
    """The Pareto front of each notion's trials (`pareto_front`), together: a trial is on it when no trial whose ε
    states the same notion dominates it. An ε of one notion is not a point on another's axis (DP's covers every
    record, SDP's the detected secrets), so no trial is taken off the front by one of another notion."""
    notions = dict.fromkeys(t.notion for t in trials)
    return [t for n in notions for t in pareto_front([t for t in trials if t.notion == n], objectives)]
