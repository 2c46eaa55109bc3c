"""The trade-off over ε of a sweep with an ε ladder (`SweepConfig.target_epsilons`): each mechanism's utility at each
ε of the ladder over its trials (best, median, range), No-DP's best as the reference without privacy, where the
mechanisms cross, the rank tests at each ε, and each mechanism's hypervolume over its trials' (utility, ε, privacy
objectives).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
from optuna._hypervolume import compute_hypervolume

from sdp_core.privacy.numbers import epsilon_number
from sdp_core.report.formatting import (
    DASH,
    epsilon_meaning,
    fmt,
    mechanism_name,
    metric_label,
    notions_covered,
    with_notion,
)
from sdp_core.report.load import Trial
from sdp_core.report.pareto import Analysis, ranked
from sdp_core.report.ranking import cap, notion_rank, verdict
from sdp_core.separation import Ranking, look_level, rank_mechanisms
from sdp_core.report.tables import Table

REFERENCE = "nodp"
"""The mechanism drawn as the curve's reference line: utility without privacy."""
HYPERVOLUME_MARGIN = 0.1
"""The reference point lies this share of each axis' range beyond the worst value, so the worst trials count too."""


def _scored(a: Analysis, trials: list[Trial]) -> list[Trial]:
    """The finished trials among `trials` with the utility measured, best first."""
    return ranked([t for t in trials if t.state == "finished" and t.metric(a.utility.metric) is not None], a.utility)


@dataclass(frozen=True)
class CurvePoint:
    """One mechanism at one ε: its finished trials' utilities, best first."""

    mechanism: str
    epsilon: float
    trials: list[Trial]
    values: list[float]

    @property
    def notion(self) -> str:
        """The notion its trials' ε states (one mechanism at one ε states one)."""
        return self.trials[0].notion

    @property
    def best(self) -> float:
        return self.values[0]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def worst(self) -> float:
        return self.values[-1]


def curve_points(a: Analysis) -> list[CurvePoint]:
    """Each calibrated mechanism at each ε of the ladder where it has a finished trial, mechanism by mechanism; a
    trial whose ε does not hold (`holds: false`: reproducible noise) stands at no ε."""
    points = []
    for m in a.sweep.config.mechanisms:
        for epsilon in a.ladder:
            trials = _scored(a, [t for t in a.sweep.trials if t.mechanism == m and t.target_epsilon == epsilon
                                 and t.privacy.get("holds") is not False])
            if trials:
                points.append(CurvePoint(m, epsilon, trials, [v for t in trials if (v := t.metric(a.utility.metric))
                                                              is not None]))
    return points


def reference_trials(a: Analysis) -> list[Trial]:
    """No-DP's finished trials, best first: the curve's reference line is the best of them."""
    return _scored(a, [t for t in a.sweep.trials if t.mechanism == REFERENCE])


def _better(a: Analysis, x: float, y: float) -> bool:
    """Whether utility x is at least as good as y."""
    return x <= y if a.utility.mode == "min" else x >= y


def leaders(a: Analysis, points: list[CurvePoint]) -> dict[float, str]:
    """The mechanism with the best trial at each ε."""
    out: dict[float, str] = {}
    for epsilon in a.ladder:
        here = [p for p in points if p.epsilon == epsilon]
        if here:
            out[epsilon] = ranked_points(a, here)[0].mechanism
    return out


def ranked_points(a: Analysis, points: list[CurvePoint]) -> list[CurvePoint]:
    sign = 1.0 if a.utility.mode == "min" else -1.0
    return sorted(points, key=lambda p: sign * p.best)


def crossings(a: Analysis, points: list[CurvePoint]) -> list[str]:
    """Where the best mechanism changes between neighbouring rungs, and how much ε each other mechanism needs to
    reach the leader's utility at the lowest ε: `DP-SGD reaches JFT's ε = 1 val perplexity at ε = 8`, or `CRT does
    not reach JFT's ε = 1 val perplexity by ε = 8`."""
    lead = leaders(a, points)
    rungs = sorted(lead)
    out = [f"{mechanism_name(lead[hi])} overtakes {mechanism_name(lead[lo])} between ε = {lo:g} and ε = {hi:g}"
           for lo, hi in zip(rungs, rungs[1:]) if lead[lo] != lead[hi]]
    if not rungs:
        return out
    first = rungs[0]
    target = next(p for p in points if p.mechanism == lead[first] and p.epsilon == first)
    for m in dict.fromkeys(p.mechanism for p in points):
        if m == lead[first]:
            continue
        reach = next((p.epsilon for p in points if p.mechanism == m and p.epsilon >= first
                      and _better(a, p.best, target.best)), None)
        what = f"{mechanism_name(target.mechanism)}'s ε = {first:g} {metric_label(a.utility.metric)}"
        out.append(f"{mechanism_name(m)} reaches {what} at ε = {reach:g}" if reach is not None else
                   f"{mechanism_name(m)} does not reach {what} by ε = {max(a.ladder):g}")
    return out


def by_notion(points: list[CurvePoint]) -> dict[str, list[CurvePoint]]:
    """The points of each notion (`NOTION_ORDER` first): a ranking, a leader or a crossing compares mechanisms
    within one notion only, since guarantees of different notions cover different things."""
    groups: dict[str, list[CurvePoint]] = {}
    for p in sorted(points, key=lambda p: notion_rank(p.notion)):
        groups.setdefault(p.notion, []).append(p)
    return groups


def rankings(a: Analysis, points: list[CurvePoint]) -> dict[tuple[float, str], Ranking | None]:
    """The rank tests of the mechanisms' trials at each ε, within each notion (`rank_mechanisms`)."""
    return {(e, notion): rank_mechanisms({p.mechanism: p.values for p in group if p.epsilon == e}, a.utility.mode,
                                         look_level(a.sweep.config))
            for notion, group in by_notion(points).items() for e in a.ladder}


def ladder_verdicts(a: Analysis, points: list[CurvePoint]) -> str:
    """The rank tests' verdict at each ε within one notion's points, said once for the rungs that share it."""
    by_verdict: dict[str, list[float]] = {}
    for (epsilon, _), ranking in rankings(a, points).items():
        if ranking is not None:
            by_verdict.setdefault(verdict(ranking, cap=cap(a)), []).append(epsilon)
    return "; ".join(f"at ε = {', '.join(f'{e:g}' for e in rungs)}: {text}" for text, rungs in by_verdict.items())


def implausible_cells(a: Analysis, points: list[CurvePoint]) -> list[str]:
    """Cells no private model should show: a best trial better than No-DP's best (the reference without privacy),
    or a mechanism's best getting worse from one ε to the next larger one. Each says too few trials, or an untuned
    reference, rather than anything about privacy."""
    label = lambda m: with_notion(m, a.sweep.trials)  # noqa: E731
    reference = reference_trials(a)
    out = []
    if reference:
        best = reference[0].metric(a.utility.metric)
        assert best is not None, "reference trials are scored"
        out += [f"{label(p.mechanism)} at ε = {p.epsilon:g} ({fmt(p.best)}) beats {mechanism_name(REFERENCE)}'s best "
                f"({fmt(best)})" for p in points if p.best != best and _better(a, p.best, best)]
    for m in dict.fromkeys(p.mechanism for p in points):
        mine = sorted((p for p in points if p.mechanism == m), key=lambda p: p.epsilon)
        out += [f"{label(m)} worsens from ε = {lo.epsilon:g} ({fmt(lo.best)}) to ε = {hi.epsilon:g} ({fmt(hi.best)})"
                for lo, hi in zip(mine, mine[1:]) if not _better(a, hi.best, lo.best)]
    return out


def notion_tests(a: Analysis, points: list[CurvePoint]) -> str:
    """One notion's rank tests at each ε, or that one mechanism states it alone."""
    mechanisms = list(dict.fromkeys(p.mechanism for p in points))
    if len(mechanisms) == 1:
        return f"{mechanism_name(mechanisms[0])} alone, not ranked"
    return ladder_verdicts(a, points)


def notion_leaders(a: Analysis, points: list[CurvePoint]) -> str:
    """One notion's answer over the ladder: what it covers, its leader at each ε and the crossings among its
    mechanisms (a notion one mechanism states alone: what it covers)."""
    trials = [t for p in points for t in p.trials]
    covered = notions_covered(trials)
    if len({p.mechanism for p in points}) == 1:
        return covered
    lead = leaders(a, points)
    if len(set(lead.values())) == 1 and len(lead) == len(a.ladder):
        first = f"{mechanism_name(next(iter(lead.values())))} has the best trial at every ε"
    else:
        first = "the best trial is " + ", ".join(f"{mechanism_name(m)}'s at ε = {e:g}" for e, m in lead.items())
    return f"{covered}, and within it {first}{''.join(f'; {c}' for c in crossings(a, points))}"


def curve_headline(a: Analysis) -> str:
    """The ladder's answer in a few sentences, the hedge first: each notion's rank tests at each ε, the cells that
    cannot be right (`implausible_cells`), then each notion's leaders and crossings. Guarantees of different notions
    cover different things and are never ranked against each other."""
    points = curve_points(a)
    if not points:
        return f"No trial of the ε ladder finished with a measured {metric_label(a.utility.metric)}."
    flags = implausible_cells(a, points)
    check = (f"Check first: {'; '.join(flags)}; a private model should neither beat its non-private reference nor "
             "lose utility as ε grows: too few trials, or an untuned reference. " if flags else "")
    groups = by_notion(points)
    tests = "; ".join(f"{notion}: {notion_tests(a, group)}" for notion, group in groups.items())
    answers = "; ".join(notion_leaders(a, group) for group in groups.values())
    across = (" Mechanisms of different notions are shown side by side, never ranked against each other: choose the "
              "guarantee first, then the mechanism within it." if len(groups) > 1 else "")
    utility = metric_label(a.utility.metric).capitalize()
    trials = [t for p in points for t in p.trials]
    return (f"Rank tests within each notion, {tests}. {check}"
            f"{utility} against ε ({epsilon_meaning(trials, notions=False)}): {answers}.{across}")


# ------------------------------------------------------------------------------------------- hypervolume

@dataclass(frozen=True)
class Hypervolumes:
    """Each mechanism's hypervolume over `axes` (metric names, each to minimise or maximise), every axis scaled from
    its best value among the ladder's trials (0) to its worst (1), against the reference point 1 + margin on every
    axis, as a share of the box from 0 to it (1: one trial best on every axis)."""

    axes: list[str]
    by_mechanism: dict[str, float]
    trials: dict[str, int]


def _axis_value(t: Trial, metric: str) -> float | None:
    return t.formal_epsilon if metric == "epsilon" else t.metric(metric)


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """The hypervolume dominated by `points` (n × k, minimised) up to `reference`: Optuna's exact WFG algorithm
    (`optuna._hypervolume`, While et al. 2012, "A Fast Way of Calculating Exact Hypervolumes")."""
    inside = points[(points < reference).all(axis=1)]
    return float(compute_hypervolume(inside, reference)) if len(inside) else 0.0


def hypervolumes(a: Analysis) -> Hypervolumes:
    """Each calibrated mechanism's hypervolume over its finished trials' values on the front's objectives."""
    axes = list(a.objectives)
    trials = [t for p in curve_points(a) for t in p.trials]
    rows = {t.trial_id: [_axis_value(t, o.metric) for o in axes] for t in trials}
    rows = {k: v for k, v in rows.items() if None not in v}
    if not rows:
        return Hypervolumes([o.metric for o in axes], {}, {})
    values = np.array(list(rows.values()), dtype=float) * np.array([1.0 if o.mode == "min" else -1.0 for o in axes])
    best, worst = values.min(axis=0), values.max(axis=0)
    span = np.where(worst > best, worst - best, 1.0)
    scaled = dict(zip(rows, (values - best) / span))
    reference = np.full(len(axes), 1.0 + HYPERVOLUME_MARGIN)
    by_mechanism, counts = {}, {}
    for m in dict.fromkeys(t.mechanism for t in trials):
        mine = [scaled[t.trial_id] for t in trials if t.mechanism == m and t.trial_id in scaled]
        if mine:
            by_mechanism[m] = hypervolume(np.array(mine), reference) / math.prod(reference)
            counts[m] = len(mine)
    return Hypervolumes([o.metric for o in axes], by_mechanism, counts)


def hypervolume_note(h: Hypervolumes) -> str:
    return (f"Hypervolume over ({', '.join(metric_label(m) for m in h.axes)}): each axis scaled from the best value "
            f"among the ladder's trials (0) to the worst (1), the reference point at {1 + HYPERVOLUME_MARGIN:g} on "
            f"every axis (the worst plus {100 * HYPERVOLUME_MARGIN:g} % of the range), as a share of the box from 0 to "
            "it: 1 is one trial best on every axis, 0 nothing better than the reference. ε is the formal bound.")


def hypervolume_text(h: Hypervolumes, mechanism: str) -> str:
    value = h.by_mechanism.get(mechanism)
    return DASH if value is None else f"{value:.3f}"


def curve_cell(p: CurvePoint | None) -> str:
    """`27.1 · 29.0 (26.5–31.2, 3)`: best · median (range, trials) of one mechanism at one ε."""
    if p is None:
        return DASH
    if len(p.values) == 1:
        return f"{fmt(p.best)} (1)"
    return f"{fmt(p.best)} · {fmt(p.median)} ({fmt(min(p.values))}–{fmt(max(p.values))}, {len(p.values)})"


def epsilon_columns(a: Analysis) -> list[str]:
    return [f"ε = {epsilon_number(e)}" for e in a.ladder]


def curve_table(a: Analysis) -> Table:
    """One row per calibrated mechanism: its utility at each ε (`curve_cell`) and its hypervolume; No-DP's best,
    the reference, in the note above."""
    points = {(p.mechanism, p.epsilon): p for p in curve_points(a)}
    h = hypervolumes(a)
    mechanisms = list(dict.fromkeys(m for m, _ in points))
    rows = [[with_notion(m, a.sweep.trials), *(curve_cell(points.get((m, e))) for e in a.ladder),
             hypervolume_text(h, m)] for m in mechanisms]
    reference = reference_trials(a)
    without = (f" Without privacy, {mechanism_name(REFERENCE)}'s best is {fmt(reference[0].metric(a.utility.metric))} "
               f"over its {len(reference)} trials (the reference line)." if reference else "")
    note = (f"Each cell: the best · median {metric_label(a.utility.metric)} (range, trials) of the mechanism's trials "
            f"calibrated to that ε ({'lower' if a.utility.mode == 'min' else 'higher'} is better).{without} "
            + hypervolume_note(h))
    columns = ["mechanism (notion)", *epsilon_columns(a), "hypervolume"]
    return Table(columns, rows, numeric=set(columns[1:]), note=note)


def ranking_table(a: Analysis) -> Table:
    """The rank tests at each ε within each notion: its mechanisms in order of their best trial, `>` where a step
    passes, and the verdict on the leader."""
    rows = []
    for (epsilon, notion), ranking in rankings(a, curve_points(a)).items():
        if ranking is None:
            continue
        order = mechanism_name(ranking.order[0]) + "".join(
            f" {'>' if ok else '≈'} {mechanism_name(lower)}" for (_, lower), ok in zip(ranking.steps, ranking.passes))
        rows.append([f"ε = {epsilon_number(epsilon)}", notion, order, verdict(ranking, cap=cap(a))])
    return Table(["ε", "notion", "mechanisms by their best trial", "verdict"], rows,
                 note="Two-sided exact Mann–Whitney tests of neighbouring mechanisms' trials, Holm-corrected at "
                      f"family-wise level {look_level(a.sweep.config):.3g} at each ε within each notion: > where the "
                      "step passes, ≈ where it does not. Mechanisms of different notions are not ranked against each "
                      "other.")
