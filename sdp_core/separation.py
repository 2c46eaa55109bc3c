"""What a budget of trials can separate, known before any trial runs.

The report orders mechanisms by their best trial and keeps a step of that order (one mechanism above the next) only
where an exact two-sided Mann–Whitney U test of their trials passes, the k − 1 steps of k mechanisms corrected
together by Holm's procedure at family-wise level `RANKING_ALPHA` (`report.ranking`). With n trials a side the
smallest p-value such a test can reach is 2/C(2n, n), whatever the utilities; when that is above Holm's first level,
α/(k − 1), no step can pass, and a sweep can say so before it spends its budget.
"""

from __future__ import annotations

import math

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.sweep import SweepConfig

RANKING_ALPHA = 0.05
"""Family-wise level of the two-sided rank tests that put one mechanism above the next (`rank_mechanisms`)."""


def smallest_p_value(n: int, m: int) -> float:
    """The smallest two-sided p-value an exact Mann–Whitney test of n against m trials can reach: 2/C(n + m, n),
    when every trial of one side beats every trial of the other."""
    return min(1.0, 2 / math.comb(n + m, n))


def trials_to_separate(steps: int, alpha: float = RANKING_ALPHA) -> int:
    """The fewest trials per mechanism with which every one of `steps` Holm-corrected steps can pass: the smallest
    attainable p-value of n against n trials at or below Holm's first level, alpha / steps."""
    n = 1
    while smallest_p_value(n, n) > alpha / steps:
        n += 1
    return n


def reversed_pairs_allowed(n: int, level: float) -> int | None:
    """The most of the n × n pairs of two mechanisms' trials that may be reversed (the worse mechanism's trial the
    better) with the exact two-sided Mann–Whitney p-value (scipy's) still at or below `level`; None when even a clean
    split is above it."""
    from scipy.stats import mannwhitneyu

    allowed = None
    upper = list(range(1, n + 1))
    for u in range(n * n // 2 + 1):
        # trial i of the lower mechanism beats beats[i] of the upper one's (values 1..n): u reversed pairs in all
        beats = [min(n, max(0, u - n * i)) for i in range(n)]
        lower = [b + 0.5 + i / (4 * n) for i, b in enumerate(beats)]
        if mannwhitneyu(lower, upper, alternative="two-sided", method="exact").pvalue > level:
            break
        allowed = u
    return allowed


def cell_notion(cfg: SweepConfig, mechanism: str) -> str:
    """The notion a sweep's trials of `mechanism` state (`MechanismSettings.stated_notion`): its block in `base`
    when the base names it, else its defaults (`sweep.space.trial_config_dict` builds trials the same way)."""
    if cfg.base.mechanism.name == mechanism:
        return cfg.base.mechanism.stated_notion()
    return MECHANISM_SETTINGS[mechanism](name=mechanism).stated_notion()


def rankings(cfg: SweepConfig) -> dict[tuple[float | None, str], list[str]]:
    """The mechanisms the report ranks against each other, by (ε, notion): those calibrated to one ε of the ladder
    (None: the sweep's one ε) whose trials state one notion. Guarantees that cover different things (every record,
    detected secrets) are reported side by side, never ranked; No-DP is the reference line, not ranked."""
    by_key: dict[tuple[float | None, str], list[str]] = {}
    for cell in cfg.cells:
        notion = cell_notion(cfg, cell.mechanism)
        if notion != "none":
            by_key.setdefault((cell.epsilon, notion), []).append(cell.mechanism)
    return {key: ms for key, ms in by_key.items() if not (cfg.target_epsilons and key[0] is None)}


def budget_line(cfg: SweepConfig) -> str:
    """One line on what a search's budget can separate: which mechanisms share a notion and so are ranked, the
    steps of the widest ranking, the smallest p-value its trials can reach against Holm's first level, and, when that
    is above it, the trials per mechanism that would do."""
    n = cfg.per_cell
    groups = {notion: ms for (_, notion), ms in rankings(cfg).items()}
    trials = f"budget: {n} trial{'s' * (n != 1)} per mechanism"
    ranked = {notion: ms for notion, ms in groups.items() if len(ms) > 1}
    if not ranked:
        return (f"{trials}; no two mechanisms state the same notion, so the report ranks none: each guarantee "
                "(what its ε covers) is reported on its own")
    notion, widest = max(ranked.items(), key=lambda item: len(item[1]))
    k = len(widest)
    where = "at each ε" if cfg.target_epsilons else f"at ε = {cfg.base.privacy.target_epsilon:g}"
    names = ", ".join(MECHANISM_SETTINGS[m].display_name for m in widest)
    alone = [MECHANISM_SETTINGS[ms[0]].display_name + f" ({nt})" for nt, ms in groups.items() if len(ms) == 1]
    unranked = f"; {', '.join(alone)} alone in {'its' if len(alone) == 1 else 'their'} notion, not ranked" if alone else ""
    steps, smallest = k - 1, smallest_p_value(n, n)
    tests = (f"{steps} rank test{'s' * (steps != 1)} (exact two-sided Mann–Whitney, Holm at family-wise "
             f"{RANKING_ALPHA:g})")
    head = f"{trials}; the report orders the {k} {notion} mechanisms ({names}) {where} with {tests}{unranked}"
    first = RANKING_ALPHA / steps
    if smallest > first:
        need = trials_to_separate(steps)
        return (f"{head}: with {n} against {n} trials the smallest p-value is {smallest:.3g}, above Holm's first "
                f"level {RANKING_ALPHA:g}/{steps} = {first:.3g}, so this sweep cannot separate any two mechanisms "
                f"however much they differ; {need} trials per mechanism could (trials_per_mechanism: {need})")
    allowed = reversed_pairs_allowed(n, first)
    later = ", each later one at Holm's next level" if steps > 1 else ""
    where = ("every trial of one mechanism beats every trial of the other" if not allowed else
             f"at most {allowed} of the {n * n} pairs of the two mechanisms' trials {'is' if allowed == 1 else 'are'} "
             "reversed")
    return (f"{head}: {'a' if steps == 1 else 'the first'} step passes where {where} (exact p ≤ {RANKING_ALPHA:g}/"
            f"{steps} = {first:.3g}; a clean split gives {smallest:.3g}){later}")
