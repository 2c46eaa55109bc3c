"""The words at the top of the report: the headline, the trial counts, and the notes on how to read the answer."""

from __future__ import annotations

from pathlib import Path

from sdp_core.learning import learned_nothing
from sdp_core.privacy.numbers import epsilon_number
from sdp_core.privacy.sweep_cost import NOTION_ORDER
from sdp_core.report.curve import curve_headline
from sdp_core.report.formatting import covers, fmt, format_epsilon, mechanism_name, metric_label
from sdp_core.report.load import Trial
from sdp_core.report.pareto import Analysis
from sdp_core.report.power import NO_POWER
from sdp_core.report.ranking import cap, looks_note, ranking_note, rankings_by_notion, separation_note, verdict


def best_per_notion(a: Analysis) -> dict[str, Trial]:
    """The best trial with a formal guarantee (`Trial.guaranteed`: never an empirical estimate such as JFT's light
    noise, nor a claim the data shows not to hold) under each notion, strongest notion first."""
    guaranteed = [t for t in a.sweep.trials if t.guaranteed]
    best = {n: a.best_of([t for t in guaranteed if t.privacy.get("notion") == n]) for n in NOTION_ORDER}
    return {n: t for n, t in best.items() if t is not None}


def sweep_title(a: Analysis) -> str:
    """The sweep's name, and the data it ran on when that is not the sweep file's own (`--data`, a dataset): a
    report on a user's emails is not titled as the quickstart."""
    data = a.sweep.config.base.data
    if data.source not in ("file", "hf"):
        return a.sweep.config.name
    where = Path(data.location).name if data.source == "file" else data.location
    return f"{a.sweep.config.name} on {where}"


def headline(a: Analysis) -> str:
    """The answer, comparing like with like (over an ε ladder the curve's, `curve_headline`; at one ε
    `one_epsilon_headline`), then the trials that learned nothing."""
    flagged = learned_nothing_note(a)
    answer = curve_headline(a) if a.ladder else one_epsilon_headline(a)
    return f"{answer} {flagged}" if flagged else answer


def learned_nothing_note(a: Analysis) -> str:
    """The finished trials whose models learned nothing (`learning.learned_nothing`), each with why; or nothing."""
    flagged = [(t, why) for t in a.sweep.trials if t.state == "finished" and (why := learned_nothing(t.metrics))]
    if not flagged:
        return ""
    listed = "; ".join(f"{t.trial_id} ({mechanism_name(t.mechanism)}): {why}" for t, why in flagged)
    return (f"Learned nothing, so no mechanism's best: {listed}. Train longer (more steps), or at a larger ε where σ "
            "is the reason.")


def one_epsilon_headline(a: Analysis) -> str:
    """The best model of each notion with what it covers, and a single best only where the rank tests of the
    guaranteed trials separate it from the next (`verdict`)."""
    best = best_per_notion(a)
    if not best:
        return f"No trial finished with a formal privacy guarantee and a measured {metric_label(a.utility.metric)}."
    trials = list(best.values())
    parts = [f"{format_epsilon(t.privacy)}, which covers {covers(t)}: {mechanism_name(t.mechanism)} (trial "
             f"{t.trial_id}), {metric_label(a.utility.metric)} {fmt(t.metric(a.utility.metric))}" for t in trials]
    text = "The best model of each guarantee: at " + "; at ".join(parts) + "."
    verdicts = [f"Within {notion}, {verdict(ranking, cap=cap(a))}" for notion, ranking in
                rankings_by_notion(a, [t for t in a.sweep.trials if t.guaranteed]).items() if ranking is not None]
    across = (" Guarantees of different notions cover different things and are not ranked against each other: "
              "choose the guarantee, then the mechanism within it." if len(best) > 1 else "")
    return text + "".join(f" {v}." for v in verdicts) + across


def counts_line(a: Analysis) -> str:
    by_state = {s: sum(t.state == s for t in a.sweep.trials) for s in ("finished", "early_stopped", "infeasible", "failed")}
    objectives = " and ".join(f"{metric_label(o.metric)} {'↓' if o.mode == 'min' else '↑'}"
                              for o in a.objectives)
    return (f"{len(a.sweep.trials)} trials: {by_state['finished']} finished ({len(a.front)} on the Pareto front of "
            f"{objectives}), {by_state['early_stopped']} stopped early, {by_state['infeasible']} infeasible, "
            f"{by_state['failed']} failed.")


def uncertainty_note(a: Analysis) -> str:
    """How to read exposure on the front: its interval, its floor, and that noise does not rank trials; or nothing."""
    floors = [f for t in a.sweep.trials if (f := t.metric("exposure_floor")) is not None]
    if not floors:
        return ""
    if a.power.blind:  # the positive control did not memorise: the floor cannot be read as "not memorised"
        return (f"Canary exposure reads \"{NO_POWER}\": the No-DP control did not memorise its canaries, so a "
                "trial at the random-rank floor is not shown to be private.")
    return (f"Mean canary exposure is shown with its 95 % interval over the inserted canaries; a model that has not "
            f"memorised them scores the random-rank floor, {fmt(min(floors))} bits. A difference inside the intervals "
            "neither puts a trial on the front nor takes one off it.")


def front_note(a: Analysis) -> str:
    """Why the front is empty (no finished trial measured every objective), or nothing."""
    if a.front:
        return ""
    finished = [t for t in a.sweep.trials if t.state == "finished"]
    missing = [o.metric for o in a.objectives if not any(t.metric(o.metric) is not None for t in finished)]
    what = f"measured {', '.join(map(metric_label, missing))}" if missing else "measured every objective"
    return f"No Pareto front: no finished trial {what}."


def evaluation_unit(a: Analysis) -> str:
    """The one unit every mechanism's utility is measured on, with the validation records the trials counted in
    their data (a file's own, not the generator's `n_validation`)."""
    counts = sorted({n for t in a.sweep.trials if isinstance(n := (t.detector.get("records") or {}).get("validation"),
                                                                  int)})
    records = ("validation records" if not counts else f"{counts[0]:,} validation records" if len(counts) == 1
               else f"{counts[0]:,}–{counts[-1]:,} validation records")
    return (f"Every mechanism's {metric_label(a.utility.metric)} is measured on the same unit: whole held-out records "
            f"({records}, rows of up to {a.sweep.config.base.data.max_length} tokens), whatever unit it "
            "trains on (CRT trains its sentence units inside their records).")


LADDER_NEXT = ("This sweep holds ε at {epsilon}. Next, the trade-off over ε: an ε ladder (`privacy.target_epsilon: "
               "[1, 3, 8]` in the sweep's base) searches every mechanism at each ε with the same budget and draws "
               "utility against ε; `sdp-sweep run sweeps/tradeoff.yaml` does it on the embedded default.")


def reading_notes(a: Analysis) -> list[str]:
    """How to read the answer: the evaluation unit, the mechanisms' ranking against noise (at one ε; a ladder ranks
    them at each ε in its curve's section), privacy separation, and at one ε the ladder as the next step."""
    if a.ladder:
        return [n for n in (evaluation_unit(a), looks_note(a), separation_note(a)) if n]
    next_step = LADDER_NEXT.format(epsilon=epsilon_number(a.sweep.config.base.privacy.target_epsilon))
    return [n for n in (evaluation_unit(a), ranking_note(a), looks_note(a), separation_note(a), next_step) if n]
