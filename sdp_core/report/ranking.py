"""Ranking statistics: which mechanism is better than the next beyond the spread of their trials (exact two-sided
Mann–Whitney U tests, Holm-corrected), and whether a privacy objective separated the trials at all.
"""

from __future__ import annotations

from typing import Callable

from sdp_core.separation import (RANKING_ALPHA, Ranking, look_level, rank_mechanisms, reversed_pairs_allowed,
                                 sequential_looks, smallest_p_value)
from sdp_core.privacy.sweep_cost import NOTION_ORDER
from sdp_core.report.formatting import AUDIT_METRICS, fmt, mechanism_name, metric_label
from sdp_core.report.load import Trial
from sdp_core.report.pareto import Analysis, ranked


def utilities(a: Analysis, mechanism: str, trials: list[Trial] | None = None) -> list[float]:
    """The utility of every finished trial of `mechanism` (among `trials`, by default the sweep's), best first."""
    trials = [t for t in (a.sweep.trials if trials is None else trials)
              if t.mechanism == mechanism and t.state == "finished"]
    return [v for t in ranked(trials, a.utility) if (v := t.metric(a.utility.metric)) is not None]


def notion_rank(notion: str) -> int:
    """A notion's place in reports: the strongest first (`NOTION_ORDER`), any other after them."""
    return NOTION_ORDER.index(notion) if notion in NOTION_ORDER else len(NOTION_ORDER)


def by_notion(trials: list[Trial], mechanisms: list[str]) -> dict[str, list[str]]:
    """The mechanisms among `mechanisms` whose finished `trials` state each notion (strongest first), No-DP's
    `none` left out: a ranking compares mechanisms of one notion only, since guarantees of different notions cover
    different things."""
    finished = [t for t in trials if t.state == "finished"]
    groups: dict[str, list[str]] = {}
    for notion in sorted({t.notion for t in finished} - {"none"}, key=notion_rank):
        groups[notion] = [m for m in mechanisms if any(t.mechanism == m and t.notion == notion for t in finished)]
    return groups


def rankings_by_notion(a: Analysis, trials: list[Trial]) -> dict[str, Ranking | None]:
    """`rank_mechanisms` within each notion (`by_notion`) over `trials`: None where one mechanism states it."""
    return {notion: rank_mechanisms({m: utilities(a, m, [t for t in trials if t.notion == notion])
                                     for m in ms}, a.utility.mode, look_level(a.sweep.config))
            for notion, ms in by_notion(trials, a.sweep.config.mechanisms).items()}


def cap(a: Analysis) -> int | None:
    """The trials per mechanism an adaptive budget stops at (`SweepConfig.adaptive`); None without one."""
    adaptive = a.sweep.config.adaptive
    return adaptive.max_trials_per_mechanism if adaptive is not None else None


def could_pass(n: int, level: float) -> str:
    """The smallest difference a step's rank test at `level` could see with n trials a side, in the only terms it
    has: how many of the n × n pairs of the two mechanisms' trials may be reversed."""
    allowed = reversed_pairs_allowed(n, level)
    if allowed is None:
        return f"no split of {n} against {n} trials passes at {level:.3g}"
    return (f"a step could pass only where at most {allowed} of the {n * n} pairs of the two mechanisms' trials "
            f"{'was' if allowed == 1 else 'were'} reversed (p ≤ {level:.3g})")


def verdict(ranking: Ranking, label: Callable[[str], str] = mechanism_name, cap: int | None = None) -> str:
    """Which mechanism is best: the leader is named best only where the rank tests separate it from the next, else
    `JFT leads but is not separated from ATDP with 3 trials each; run 2 more each`, or, at an adaptive budget's
    `cap`, `tied at the cap (9 per mechanism)` with what the test could have seen (`could_pass`)."""
    top, second = ranking.order[0], ranking.order[1]
    if ranking.passes[0]:
        return f"{label(top)} is best, beyond the spread of its trials"
    n = min(ranking.trials[top], ranking.trials[second])
    if cap is not None and n >= cap:
        return (f"{label(top)} leads but is tied with {mechanism_name(second)} at the cap ({cap} per mechanism): "
                + could_pass(n, ranking.alpha / len(ranking.steps)))
    more = ranking.more_trials()
    return (f"{label(top)} leads but is not separated from {mechanism_name(second)} with {n} trial{'s' * (n != 1)} "
            f"each; {f'run {more} more each' if more else 'more trials may separate them'}")


def looks_note(a: Analysis) -> str:
    """An adaptive budget's looks (`separation.sequential_looks`): their level, and for each ranking how many were
    taken and how it ended; "" without one."""
    cfg = a.sweep.config
    if cfg.adaptive is None:
        return ""
    outcomes = {t.trial_id: t.metric(a.utility.metric) if t.state == "finished" else None for t in a.sweep.trials}
    parts = []
    for (epsilon, notion), family in sequential_looks(cfg, outcomes).items():
        where = f"{notion} at ε = {epsilon:g}" if epsilon is not None else notion
        looks = f"{family.taken} look{'s' * (family.taken != 1)}"
        if family.passed:
            parts.append(f"{where}: separated at look {family.taken} ({family.due} per mechanism)")
        elif family.taken == len(cfg.looks):
            parts.append(f"{where}: {looks}, tied at the cap ({family.due} per mechanism)")
        else:
            parts.append(f"{where}: {looks} taken, {family.due} per mechanism due")
    return (f"Adaptive budget: each ranking was looked at after {', '.join(map(str, cfg.looks))} trials per mechanism "
            f"until a step passed (cap {cfg.looks[-1]}), every look at family-wise {RANKING_ALPHA:g}/{len(cfg.looks)} "
            f"= {look_level(cfg):.3g} (Bonferroni over the planned looks, Holm within one). {'; '.join(parts)}.")


def ranking_note(a: Analysis) -> str:
    """Within each notion, the mechanisms by their best trial, saying which steps of the order are beyond their
    trials' spread (`rank_mechanisms`), and when the trials are too few for any step to pass, how many more it
    takes; a notion one mechanism states alone is said to be unranked."""
    notes = []
    for notion, ranking in rankings_by_notion(a, a.sweep.trials).items():
        if ranking is None:
            alone = by_notion(a.sweep.trials, a.sweep.config.mechanisms)[notion]
            notes.append(f"{notion}: {', '.join(map(mechanism_name, alone))} alone, not ranked")
            continue
        steps = [f"{mechanism_name(upper)} {'>' if ok else '≈'} {mechanism_name(lower)}"
                 for (upper, lower), ok in zip(ranking.steps, ranking.passes)]
        if ranking.separated:
            text = "every step is beyond the trials' spread"
        else:
            text = (f"within noise where marked ≈ (the better mechanism's trials do not beat the other's by "
                    f"two-sided rank tests at family-wise level {ranking.alpha:.3g}, Holm-corrected over "
                    f"{len(ranking.steps)} step{'s' * (len(ranking.steps) != 1)})")
            more = ranking.more_trials()
            if more:
                smallest = min(smallest_p_value(ranking.trials[u], ranking.trials[w]) for u, w in ranking.steps)
                text += (f"; with these trials per mechanism no step can pass (the smallest attainable p-value, "
                         f"{smallest:.3g}, is above {ranking.alpha:.3g}/{len(ranking.steps)}): run {more} more per "
                         "mechanism")
        notes.append(f"{notion}: {', '.join(steps)}; {text}")
    if not notes:
        return ""
    return (f"Mechanisms by their best {metric_label(a.utility.metric)}, within each notion (guarantees of different "
            f"notions cover different things and are not ranked against each other): {'. '.join(notes)}.")


def _separated(trials: list[Trial], metric: str) -> bool:
    """Whether any two trials' values of `metric` differ beyond their 95 % intervals (exact values: any difference)."""
    ends = [t.interval(metric) or (v, v) for t in trials if (v := t.metric(metric)) is not None]
    return any(hi_a < lo_b for lo_a, hi_a in ends for lo_b, hi_b in ends)


def separation_note(a: Analysis) -> str:
    """Says plainly when a privacy objective did not separate the trials (the front is then decided by the rest)."""
    finished = [t for t in a.sweep.trials if t.state == "finished"]
    silent = [o.metric for o in a.sweep.config.objectives
              if o.metric != a.utility.metric and o.metric not in a.dropped  # dropped: no power (report.power)
              and any(t.metric(o.metric) is not None for t in finished)
              and not _separated(finished, o.metric)]
    if not silent:
        return ""
    ceilings = [t.audit["ceiling"] for t in finished if "ceiling" in t.audit]
    resolution = (f" (with its canaries the audit could show at most ε ≈ {fmt(max(ceilings))} per record)"
                  if set(AUDIT_METRICS) & set(silent) and ceilings else "")
    return (f"The privacy objective {', '.join(map(metric_label, silent))} did not separate the trials: every "
            f"difference is inside the measurements' uncertainty{resolution}, so the front is decided by the other "
            "objectives alone.")
