"""Ranking statistics: which mechanism is better than the next beyond the spread of their trials (exact two-sided
Mann–Whitney U tests, Holm-corrected), and whether a privacy objective separated the trials at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from scipy.stats import mannwhitneyu

from sdp_core.separation import RANKING_ALPHA, smallest_p_value, trials_to_separate
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
                                     for m in ms}, a.utility.mode)
            for notion, ms in by_notion(trials, a.sweep.config.mechanisms).items()}


def holm_passes(pvalues: list[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure (Holm 1979, "A simple sequentially rejective multiple test procedure"): the
    hypotheses rejected with family-wise error ≤ alpha. The i-th smallest p-value (0-based) is compared with
    alpha / (m − i) for m hypotheses, and the first that fails stops the procedure."""
    passes = [False] * len(pvalues)
    for i, k in enumerate(sorted(range(len(pvalues)), key=pvalues.__getitem__)):
        if pvalues[k] > alpha / (len(pvalues) - i):
            break
        passes[k] = True
    return passes


@dataclass(frozen=True)
class Ranking:
    """Mechanisms in order of their best trial, and for each step of that order (a mechanism above the next)
    its two-sided p-value and whether it passed."""

    order: list[str]
    pvalues: list[float]
    passes: list[bool]
    trials: dict[str, int]  # finished trials with the utility, per mechanism

    @property
    def steps(self) -> list[tuple[str, str]]:
        return list(zip(self.order, self.order[1:]))

    @property
    def separated(self) -> bool:
        return all(self.passes)

    def more_trials(self) -> int:
        """How many more trials per mechanism it takes before every step can pass (0: enough already)."""
        return max(0, trials_to_separate(len(self.steps)) - min(self.trials.values()))


def rank_mechanisms(values: dict[str, list[float]], mode: str, alpha: float = RANKING_ALPHA) -> Ranking | None:
    """Rank mechanisms by their best utility (`values`: every finished trial's, any order; `mode` min or max).

    A best trial is one draw of a random search, so mechanism A ranks above the next one, B, only when A's trials
    are better than B's by an exact two-sided Mann–Whitney U test, the k − 1 steps of k mechanisms corrected
    together by Holm's procedure at family-wise level `alpha`, and the U statistic points the same way as the
    best trials. The test is two-sided because the order it checks was chosen from the same trials: a one-sided
    test in the direction the data picked has twice its nominal level (about 0.10 for two mechanisms of 5 trials).
    None with fewer than two mechanisms.
    """
    sign = 1.0 if mode == "min" else -1.0
    scored = {m: sorted(sign * v for v in vs) for m, vs in values.items() if vs}
    if len(scored) < 2:
        return None
    order = sorted(scored, key=lambda m: scored[m][0])
    pvalues, agree = [], []
    for upper, lower in zip(order, order[1:]):
        test = mannwhitneyu(scored[upper], scored[lower], alternative="two-sided", method="exact")
        pvalues.append(float(test.pvalue))
        agree.append(test.statistic < len(scored[upper]) * len(scored[lower]) / 2)  # upper's values mostly lower
    passes = [ok and same for ok, same in zip(holm_passes(pvalues, alpha), agree)]
    return Ranking(order, pvalues, passes, {m: len(v) for m, v in scored.items()})


def verdict(ranking: Ranking, label: Callable[[str], str] = mechanism_name) -> str:
    """Which mechanism is best: the leader is named best only where the rank tests separate it from the next, else
    `JFT leads but is not separated from ATDP with 3 trials each; run 2 more each`."""
    top, second = ranking.order[0], ranking.order[1]
    if ranking.passes[0]:
        return f"{label(top)} is best, beyond the spread of its trials"
    more = ranking.more_trials()
    n = min(ranking.trials[top], ranking.trials[second])
    return (f"{label(top)} leads but is not separated from {mechanism_name(second)} with {n} trial{'s' * (n != 1)} "
            f"each; {f'run {more} more each' if more else 'more trials may separate them'}")


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
                    f"two-sided rank tests at family-wise level {RANKING_ALPHA:g}, Holm-corrected over "
                    f"{len(ranking.steps)} step{'s' * (len(ranking.steps) != 1)})")
            more = ranking.more_trials()
            if more:
                smallest = min(smallest_p_value(ranking.trials[u], ranking.trials[w]) for u, w in ranking.steps)
                text += (f"; with these trials per mechanism no step can pass (the smallest attainable p-value, "
                         f"{smallest:.3g}, is above {RANKING_ALPHA:g}/{len(ranking.steps)}): run {more} more per "
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
