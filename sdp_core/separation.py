"""What a budget of trials can separate, known before any trial runs, and the rank tests that say it.

The report orders mechanisms by their best trial and keeps a step of that order (one mechanism above the next) only
where an exact two-sided Mann–Whitney U test of their trials passes, the k − 1 steps of k mechanisms corrected
together by Holm's procedure (`rank_mechanisms`). With n trials a side the smallest p-value such a test can reach is
2/C(2n, n), whatever the utilities; when that is above Holm's first level, α/(k − 1), no step can pass, and a sweep
can say so before it spends its budget.

An adaptive budget (`SweepConfig.adaptive`) looks at each ranking family (`families`) after its planned trials and
again after every `step` more per mechanism while no step passes, up to the cap: L planned looks in all
(`SweepConfig.looks`). Each look runs Holm at α/L (`look_level`), Bonferroni's split of α over the looks, so the
chance that any look passes a step between mechanisms that do not differ stays ≤ α whatever the dependence between
the looks (Jennison & Turnbull 2000, *Group Sequential Methods with Applications to Clinical Trials*, §1.3: K
repeated tests at α/K each bound the overall type I error by α). The report tests at the same level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import mannwhitneyu

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.sweep import Cell, SweepConfig, sweep_number, trial_id, utility_objective
from sdp_core.errors import ConfigError

RANKING_ALPHA = 0.05
"""Family-wise level of the two-sided rank tests that put one mechanism above the next (`rank_mechanisms`), over
all of a sweep's looks at one ranking."""


def look_level(cfg: SweepConfig) -> float:
    """The family-wise level of one look's Holm procedure: `RANKING_ALPHA` split evenly over the sweep's planned
    looks (Bonferroni; `RANKING_ALPHA` itself with one look)."""
    return RANKING_ALPHA / len(cfg.looks)


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
    its two-sided p-value and whether it passed at family-wise level `alpha`."""

    order: list[str]
    pvalues: list[float]
    passes: list[bool]
    trials: dict[str, int]  # finished trials with the utility, per mechanism
    alpha: float = RANKING_ALPHA

    @property
    def steps(self) -> list[tuple[str, str]]:
        return list(zip(self.order, self.order[1:]))

    @property
    def separated(self) -> bool:
        return all(self.passes)

    def more_trials(self) -> int:
        """How many more trials per mechanism it takes before every step can pass (0: enough already)."""
        return max(0, trials_to_separate(len(self.steps), self.alpha) - min(self.trials.values()))


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
    return Ranking(order, pvalues, passes, {m: len(v) for m, v in scored.items()}, alpha)


def cell_notion(cfg: SweepConfig, mechanism: str) -> str:
    """The notion a sweep's trials of `mechanism` state (`MechanismSettings.stated_notion`): its block in `base`
    when the base names it, else its defaults (`sweep.space.trial_config_dict` builds trials the same way)."""
    if cfg.base.mechanism.name == mechanism:
        return cfg.base.mechanism.stated_notion()
    return MECHANISM_SETTINGS[mechanism](name=mechanism).stated_notion()


def families(cfg: SweepConfig) -> dict[tuple[float | None, str], list[Cell]]:
    """The cells the report ranks against each other, by (ε, notion): those calibrated to one ε of the ladder
    (None: the sweep's one ε) whose trials state one notion. Guarantees that cover different things (every record,
    detected secrets) are reported side by side, never ranked; No-DP is the reference line, not ranked."""
    by_key: dict[tuple[float | None, str], list[Cell]] = {}
    for cell in cfg.cells:
        notion = cell_notion(cfg, cell.mechanism)
        if notion != "none":
            by_key.setdefault((cell.epsilon, notion), []).append(cell)
    return {key: cells for key, cells in by_key.items() if not (cfg.target_epsilons and key[0] is None)}


def rankings(cfg: SweepConfig) -> dict[tuple[float | None, str], list[str]]:
    """The mechanisms of each ranking family (`families`)."""
    return {key: [c.mechanism for c in cells] for key, cells in families(cfg).items()}


# ------------------------------------------------------------------------------------------- looks


@dataclass(frozen=True)
class FamilyLooks:
    """Where one ranking family stands in its planned looks (`SweepConfig.looks`): the looks taken, the trials per
    mechanism due now, and the last look's rank tests (None before the first, or with fewer than two mechanisms
    scored)."""

    cells: list[Cell]
    taken: int
    due: int
    ranking: Ranking | None

    @property
    def passed(self) -> bool:
        return self.ranking is not None and any(self.ranking.passes)


def sequential_looks(cfg: SweepConfig, outcomes: dict[str, float | None]) -> dict[tuple[float | None, str], FamilyLooks]:
    """Each family of two or more mechanisms (`families`) through its looks, from the trials stored so far.

    `outcomes`: every stored trial's utility by trial id (None: not finished, or no value). Look j, at n_j trials per
    mechanism, tests each mechanism's first n_j trials (its study's trials 0 … n_j − 1), once all of them are stored,
    by `rank_mechanisms` at `look_level`; a family with no step passing is due n_{j+1}, until the cap. The looks are
    a function of the stored trials alone, so a resumed sweep finds itself in the same round."""
    level, mode = look_level(cfg), utility_objective(cfg.objectives).mode
    out = {}
    for key, cells in families(cfg).items():
        if len(cells) < 2:
            continue
        taken, ranking = 0, None
        for due in cfg.looks:
            ids = {c.mechanism: [trial_id(sweep_number(cfg, c, i)) for i in range(due)] for c in cells}
            if not all(t in outcomes for trials in ids.values() for t in trials):
                break
            ranking = rank_mechanisms({m: [v for t in trials if (v := outcomes[t]) is not None]
                                       for m, trials in ids.items()}, mode, level)
            taken += 1
            if ranking is None or any(ranking.passes):
                break
        out[key] = FamilyLooks(cells, taken, due, ranking)
    return out


def row_outcomes(cfg: SweepConfig, rows: dict[str, dict]) -> dict[str, float | None]:
    """`sequential_looks`' outcomes from stored rows: each finished trial's finite utility, else None."""
    metric = utility_objective(cfg.objectives).metric
    out: dict[str, float | None] = {}
    for trial, row in rows.items():
        value = (row.get("metrics") or {}).get(metric) if row["state"] == "finished" else None
        out[trial] = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
    return out


def due_trials(cfg: SweepConfig, rows: dict[str, dict]) -> dict[str, int]:
    """The trials each cell (by name) is due now: its planned `per_cell`, or its family's look (`sequential_looks`)."""
    due = {c.name: cfg.per_cell for c in cfg.cells}
    if cfg.adaptive is not None:
        for family in sequential_looks(cfg, row_outcomes(cfg, rows)).values():
            due.update({c.name: family.due for c in family.cells})
    return due


def trials_due(cfg: SweepConfig, rows: dict[str, dict]) -> int:
    """Every trial the sweep runs as its stored trials stand: each cell's due trials (`due_trials`) and the control;
    a grid's or a fixed budget's `trial_count`."""
    if cfg.adaptive is None or cfg.experiments is not None:
        return cfg.trial_count
    return sum(due_trials(cfg, rows).values()) + (cfg.control is not None)


def cap_trials(cfg: SweepConfig) -> dict[Cell, int]:
    """The most trials each cell can run: its planned `per_cell`, or the cap for a cell of a ranked family (two or
    more mechanisms) under an adaptive budget."""
    cap = {c: cfg.per_cell for c in cfg.cells}
    for cells in families(cfg).values():
        if len(cells) > 1:
            cap.update(dict.fromkeys(cells, cfg.looks[-1]))
    return cap


def most_trials(cfg: SweepConfig) -> int:
    """The worst-case trial count: every ranked family taken to the cap (`cap_trials`), and the control."""
    if cfg.adaptive is None or cfg.experiments is not None:
        return cfg.trial_count
    return sum(cap_trials(cfg).values()) + (cfg.control is not None)


def check_looks(cfg: SweepConfig, where: str) -> None:
    """Reject an adaptive budget whose first look cannot pass: the planned trials' clean split above Holm's first
    level of the widest ranking at `look_level` (later looks, with more trials, then can too)."""
    widest = max((len(cells) for cells in families(cfg).values()), default=0)
    if cfg.adaptive is None or widest < 2:
        return
    level, n = look_level(cfg) / (widest - 1), cfg.per_cell
    if smallest_p_value(n, n) > level:
        need = trials_to_separate(widest - 1, look_level(cfg))
        raise ConfigError([f"adaptive: with {len(cfg.looks)} looks each at {RANKING_ALPHA:g}/{len(cfg.looks)}, the "
                           f"first look's {n} against {n} trials reach at best p = {smallest_p_value(n, n):.3g}, "
                           f"above {level:.3g}: plan at least {need} trials per mechanism (trials_per_mechanism), or "
                           "fewer looks"], where)


def adaptive_line(cfg: SweepConfig) -> str:
    """What an adaptive budget does, said before any trial runs: its looks, their corrected level, the cap and the
    worst-case trial count; "" without one."""
    if cfg.adaptive is None:
        return ""
    looks, level = cfg.looks, look_level(cfg)
    return (f"adaptive: a ranking with no step passing gets {cfg.adaptive.step} more trial"
            f"{'s' * (cfg.adaptive.step != 1)} per mechanism, looks at {', '.join(map(str, looks))} trials per "
            f"mechanism (cap {looks[-1]}), each at family-wise {RANKING_ALPHA:g}/{len(looks)} = {level:.3g} "
            f"(Bonferroni over the {len(looks)} planned looks, Holm within one); {cfg.trial_count} trials planned, "
            f"at most {most_trials(cfg)}")


def budget_line(cfg: SweepConfig) -> str:
    """One line on what a search's budget can separate: which mechanisms share a notion and so are ranked, the
    steps of the widest ranking, the smallest p-value its trials can reach against Holm's first level, and, when that
    is above it, the trials per mechanism that would do; then, with an adaptive budget, its looks (`adaptive_line`)."""
    n, alpha = cfg.per_cell, look_level(cfg)
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
             f"{alpha:.3g})")
    head = f"{trials}; the report orders the {k} {notion} mechanisms ({names}) {where} with {tests}{unranked}"
    first = alpha / steps
    if smallest > first:
        need = trials_to_separate(steps, alpha)
        return (f"{head}: with {n} against {n} trials the smallest p-value is {smallest:.3g}, above Holm's first "
                f"level {alpha:.3g}/{steps} = {first:.3g}, so this sweep cannot separate any two mechanisms "
                f"however much they differ; {need} trials per mechanism could (trials_per_mechanism: {need})")
    allowed = reversed_pairs_allowed(n, first)
    later = ", each later one at Holm's next level" if steps > 1 else ""
    where = ("every trial of one mechanism beats every trial of the other" if not allowed else
             f"at most {allowed} of the {n * n} pairs of the two mechanisms' trials {'is' if allowed == 1 else 'are'} "
             "reversed")
    adaptive = f"; {adaptive_line(cfg)}" if cfg.adaptive else ""
    return (f"{head}: {'a' if steps == 1 else 'the first'} step passes where {where} (exact p ≤ {alpha:.3g}/"
            f"{steps} = {first:.3g}; a clean split gives {smallest:.3g}){later}{adaptive}")
