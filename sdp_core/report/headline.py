"""The words at the top of the report: the headline, the trial counts, and the notes on how to read the answer."""

from __future__ import annotations

from sdp_core.report.formatting import fmt, format_epsilon, mechanism_name, metric_label, params_text, sigma_text
from sdp_core.report.pareto import Analysis
from sdp_core.report.ranking import ranking_note, separation_note
from sdp_core.report.tables import TABLE_METRICS


def headline(a: Analysis) -> str:
    """One sentence: the best model with a formal guarantee (`Trial.guaranteed`: never an empirical estimate such as
    JFT's light noise, nor a claim the data shows not to hold), with its ε, utility and empirical privacy."""
    t = a.best
    if t is None:
        return f"No trial finished with a formal privacy guarantee and a measured {metric_label(a.utility.metric)}."
    facts = [f"{metric_label(m)} {fmt(t.metric(m))}" for m in dict.fromkeys((a.utility.metric, *TABLE_METRICS))
             if t.metric(m) is not None]
    return (f"At {format_epsilon(t.privacy)}, the best model is {mechanism_name(t.mechanism)} "
            f"(trial {t.trial_id}; {params_text(t)}; σ = {sigma_text(t.privacy.get('events', []))}): "
            f"{', '.join(facts)}.")


def counts_line(a: Analysis) -> str:
    by_state = {s: sum(t.state == s for t in a.sweep.trials) for s in ("finished", "early_stopped", "infeasible", "failed")}
    objectives = " and ".join(f"{metric_label(o.metric)} {'↓' if o.mode == 'min' else '↑'}"
                              for o in a.objectives)
    return (f"{len(a.sweep.trials)} trials: {by_state['finished']} finished ({len(a.front)} on the Pareto front of "
            f"{objectives}), {by_state['early_stopped']} stopped early, {by_state['infeasible']} infeasible, "
            f"{by_state['failed']} failed.")


def uncertainty_note(a: Analysis) -> str:
    """How to read exposure on the front: its interval, its floor, and that noise does not rank trials; or nothing."""
    floors = [t.metric("exposure_floor") for t in a.sweep.trials if t.metric("exposure_floor") is not None]
    if not floors:
        return ""
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
    """The one unit every mechanism's utility is measured on."""
    data = a.sweep.config.base.data
    return (f"Every mechanism's {metric_label(a.utility.metric)} is measured on the same unit: whole held-out records "
            f"({data.n_validation} validation records, rows of up to {data.max_length} tokens), whatever unit it "
            "trains on (CRT trains its sentence units inside their records).")


def reading_notes(a: Analysis) -> list[str]:
    """How to read the answer: the evaluation unit, the mechanisms' ranking against noise, privacy separation."""
    return [n for n in (evaluation_unit(a), ranking_note(a), separation_note(a)) if n]
