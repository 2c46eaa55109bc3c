"""What the sweep's models protect (`privacy_statement.md`) and what the sweep itself cost in privacy.

The sweep's own cost comes from `sweep_cost.json` when the sweep wrote one; otherwise it is computed here from
the trials' ledgers with the privacy layer. Every trial that took a private step is charged (`trial_charge`): a
finished one its spent steps (the formal bound of an empirical estimate), one stopped early or failed after
calibrating its whole published plan (an upper bound). Per notion: basic composition (always holds) and the
Papernot–Steinke random search bound (holds only under its conditions, which are printed with it); and since every
trial touched the same data, one bound composing all trials under the weakest of their notions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.privacy import NOTIONS, basic_composition, counted_events, events_from_dicts, random_search_cost
from sdp_core.privacy.relations import ADD_REMOVE, RELATIONS
from sdp_core.privacy.report import EVALUATION_NOT_COVERED, privacy_report
from sdp_core.privacy.sweep_cost import NOTION_ORDER, WHOLE_PLAN, all_trials_cost
from sdp_core.report.formatting import covers, fmt, format_epsilon, mechanism_name, metric_label
from sdp_core.report.headline import front_note, headline, sweep_title
from sdp_core.report.load import Sweep, Trial, number
from sdp_core.report.pareto import Analysis
from sdp_core.report.power import NO_POWER, power_statement
from sdp_core.report.tables import charges_table, cost_table, trial_charges
from sdp_core.separation import cap_trials, cell_notion, most_trials


def caveat(mechanism: str) -> str:
    """The registered mechanism's caveat ("" for one this installation does not know)."""
    settings = MECHANISM_SETTINGS.get(mechanism)
    return settings.caveat if settings else ""


RDP_NOTIONS = ("DP", "SDP", "confidentiality")
"""Notions whose ε is the RDP conversion of the counted events (Bayesian confidentiality is a transform of it)."""


# ------------------------------------------------------------------------------------------ sweep cost

@dataclass(frozen=True)
class SweepCost:
    """The sweep's privacy bounds that hold, by name, where they come from, what they leave out, (when computed
    here) the trials they count with what each is charged, and the bounds that would hold only under conditions
    this sweep does not meet (`conditional`: the random-search bound of a random number of trials)."""

    bounds: dict[str, dict]
    source: str
    notes: list[str]
    charges: dict[str, dict] = field(default_factory=dict)
    conditional: dict[str, dict] = field(default_factory=dict)
    unguarded: str = ""  # the trials compared without a formal guarantee (`_ids`), none: ""
    adaptive: bool = False  # an adaptive budget stopped below its cap: the trials that ran were not fixed in advance


ALL_TRIALS = "all trials on the same data (weakest notion)"
"""The bound of the whole sweep: every trial touched the same records."""


def _trial_count_note(sweep: Sweep) -> str:
    if sweep.config.adaptive is not None:
        return (f" This sweep ran a number of trials its results decided (an adaptive budget, at most "
                f"{most_trials(sweep.config)}), not a random one drawn in advance, so it does not meet these conditions.")
    return (f" This sweep ran a fixed number of trials (num_trials = {sweep.config.num_trials}), not a random one, so "
            "it does not meet these conditions.")


def computed_cost(charges: dict[str, dict], sweep: Sweep) -> tuple[dict[str, dict], dict[str, dict]]:
    """The bounds that hold, then those that would hold under conditions, over the charges (each a finite ε).

    Hold: one bound composing every trial under the weakest notion (`all_trials_cost`: the sweep's own cost, first);
    over an ε ladder, the composition of each ε's trials per notion; basic composition per notion and neighbouring
    relation (rows written before reports named their relation are add/remove). Would hold: the Papernot–Steinke
    bound per notion, which needs a random number of trials and only the best released.
    """
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for charge in charges.values():
        groups[(charge["notion"], charge.get("neighbouring", ADD_REMOVE))].append(charge)
    bounds: dict[str, dict] = {}
    composable = [r for (notion, _), reports in groups.items() if notion in RDP_NOTIONS for r in reports]
    if composable:
        bounds[ALL_TRIALS] = all_trials_cost(composable)
    if len(sweep.config.target_epsilons or []) > 1:
        trials = {t.trial_id: t for t in sweep.trials}
        levels: dict[tuple[float, str], list[dict]] = defaultdict(list)
        for trial_id, charge in charges.items():
            if (level := trials[trial_id].target_epsilon) is not None and charge["notion"] in RDP_NOTIONS:
                levels[(level, charge["notion"])].append(charge)
        for (level, notion), reports in sorted(levels.items()):
            bounds[f"trials at ε = {level:g}, {notion}"] = all_trials_cost(reports)
    conditional: dict[str, dict] = {}
    for (notion, relation), reports in sorted(groups.items()):
        mixed = sum(n == notion for n, _ in groups) > 1  # one notion under two relations
        label = f"{notion} trials, {RELATIONS[relation]}" if mixed else f"{notion} trials"
        suffix = f" ({label})" if len(groups) > 1 else ""
        bounds["basic composition" + suffix] = basic_composition(reports)
        schedules = [counted_events(events_from_dicts(r["events"]), notion) for r in reports]
        if any(schedules) and notion in RDP_NOTIONS:
            ps = random_search_cost([s for s in schedules if s], max(r["delta"] for r in reports),
                                    mean_trials=len(reports), relation=relation)
            # The bound holds for the RDP of the counted events under any of RDP_NOTIONS; random_search_cost labels
            # its result DP.
            conditional["random search (Papernot–Steinke)" + suffix] = {
                **ps, "notion": notion, "conditions": ps["conditions"] + "." + _trial_count_note(sweep)}
    return bounds, conditional


AT_CAP = "basic composition at the adaptive cap"
"""The bounds of an adaptive budget fixed before it ran: every trial it could run, each at its target ε."""


def cap_bounds(sweep: Sweep) -> dict[str, dict]:
    """Per notion, basic composition of every trial an adaptive budget could run (`separation.cap_trials`), each
    charged its cell's target (ε, δ), which its calibration never exceeds: a bound fixed before the sweep ran,
    whichever trials its looks added. That is what lets a data-dependent number of trials be charged: a privacy
    filter (Rogers, Roth, Ullman & Vadhan 2016, "Privacy Odometers and Filters", basic composition filter), whereas
    composing only the trials that ran is an odometer, not a bound. Empty without an adaptive budget, or when a
    calibrated cell has no target."""
    cfg = sweep.config
    if cfg.adaptive is None:
        return {}
    sums: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for cell, n in cap_trials(cfg).items():
        notion = cell_notion(cfg, cell.mechanism)
        target = cell.epsilon if cell.epsilon is not None else cfg.base.privacy.target_epsilon
        if notion == "none" or not MECHANISM_SETTINGS[cell.mechanism].calibrated:
            continue
        if target is None:
            return {}
        sums[notion] += [(target, cfg.base.privacy.delta)] * n
    return {f"{AT_CAP} ({notion} trials)": privacy_report(
        math.fsum(e for e, _ in charges), math.fsum(d for _, d in charges), notion, "basic_composition", [],
        trials=len(charges), conditions="fixed before the sweep ran: every trial its adaptive budget could run, each "
        "at its target ε and δ, whichever its looks added (basic composition filter, Rogers et al. 2016)")
        for notion, charges in sorted(sums.items(), key=lambda item: NOTION_ORDER.index(item[0]))}


WOULD_HOLD = ("What would hold if the sweep had run a random number of trials and released only the best "
              "(Papernot & Steinke 2022); it did not, so these bounds do not apply to it:")


def sweep_epsilon(cost: SweepCost) -> str:
    """The sweep's own ε, one sentence that the statement, the summary and the page all print: none when the sweep
    ran a trial without a formal guarantee (what it releases, its front and its choice, depends on that trial),
    else the composition of every charged trial (`ALL_TRIALS`; for an adaptive budget stopped below its cap, the
    bounds fixed at the cap, `cap_bounds`), else none spent."""
    whole = cost.bounds.get(ALL_TRIALS)
    composed = whole and (f"{format_epsilon(whole)}, composing its {whole.get('trials', len(cost.charges))} charged "
                          "trials (every one touched the same data) under the weakest of their notions")
    if cost.adaptive:  # the trials that ran were chosen by their results: only the bound fixed at the cap holds
        at_cap = "; ".join(format_epsilon(b) for k, b in cost.bounds.items() if k.startswith(AT_CAP))
        composed = at_cap and (f"{at_cap}, per notion the basic composition of every trial its adaptive budget "
                               "allowed (how many ran depended on their results, so composing those that ran is no "
                               "bound)")
    if cost.unguarded:
        return (f"The sweep's own ε: none. It ran {cost.unguarded} without a formal guarantee on the same data, and "
                "what it releases depends on them (a compared trial's numbers decide its front and its best model; "
                "a positive control's, how its exposures are read), so that release is unprotected"
                + (f"; its other trials alone give {composed}, which holds only where nothing computed from those "
                   "is released." if composed else "."))
    if composed:
        return f"The sweep's own ε: {composed}."
    return "The sweep's own ε: none spent (no trial took a private step)."


def _ids(trials: list[Trial]) -> str:
    return f"{len(trials)} trial(s) ({', '.join(f'{t.trial_id}, {mechanism_name(t.mechanism)}' for t in trials)})"


def sweep_cost(sweep: Sweep) -> SweepCost:
    """The bounds of `sweep_cost.json` when the sweep wrote one (its mappings that carry an ε), else computed."""
    charges = trial_charges(sweep)
    counted = {trial_id: c for trial_id, c in charges.items() if number(c["epsilon"]) is not None}
    notes = []
    unguarded = [t for t in sweep.trials if t.trial_id in charges and t.trial_id not in counted]
    if unguarded:
        notes.append(f"{_ids(unguarded)} without a formal guarantee are not in these bounds: anything released about "
                     "them is unprotected.")
    compared = _ids(unguarded) if unguarded else ""
    whole = [t for t in sweep.trials if counted.get(t.trial_id, {}).get("charged") == WHOLE_PLAN]
    if whole:
        notes.append(f"{_ids(whole)} stopped or failed after calibrating: each is charged its whole plan, since "
                     "its spent steps are unknown (an upper bound).")
    unplanned = [t for t in sweep.trials if t.trial_id not in charges]
    trained = [t for t in unplanned if t.state == "early_stopped"]
    if trained:
        notes.append(f"{_ids(trained)} stopped early without a published plan: they took private steps these "
                     "bounds cannot charge.")
    if len(unplanned) > len(trained):
        notes.append(f"{_ids([t for t in unplanned if t not in trained])} never published a plan (infeasible, or "
                     "failed before calibrating): no private step, nothing charged.")
    if not counted:
        notes.append("No trial spent privacy budget: nothing to compose.")
    if sweep.cost is not None:
        bounds = {k: v for k, v in sweep.cost.items() if isinstance(v, dict) and "epsilon" in v}
        return SweepCost(bounds, "written by the sweep (sweep_cost.json)", notes, unguarded=compared)
    bounds, conditional = computed_cost(counted, sweep)
    adaptive = sweep.config.adaptive is not None and len(sweep.trials) < most_trials(sweep.config)
    if adaptive:  # composing the trials that ran is an odometer here: only the bounds fixed at the cap hold
        bounds = cap_bounds(sweep)
        notes.append(f"How many trials ran ({len(sweep.trials)} of at most {most_trials(sweep.config)}) depended on "
                     "their results (an adaptive budget), so a composition of the trials that ran is not a bound "
                     "fixed in advance: the bounds above charge every trial the cap allowed.")
    return SweepCost(bounds, "computed by the report from the trials' ledgers (no sweep_cost.json)", notes, counted,
                     conditional, compared, adaptive)


# ------------------------------------------------------------------------------------------ statement

def _events_text(privacy: dict[str, Any]) -> str:
    events = [e for e in privacy.get("events", []) if e.get("steps", 0) > 0]
    return "; ".join(f"{e.get('phase') or 'private'}: q = {e['sample_rate']:.3g}, σ = {e['noise_multiplier']:.3g}, "
                     f"{e['steps']} steps ({e.get('touches', 'all')})" for e in events) or "no noised step"


def _canary_text(t: Trial, blind: bool) -> str:
    c = t.canaries
    if not c:
        return "no canaries"
    exposure = NO_POWER if blind else fmt(t.metric("exposure_mean"))  # blind: the control did not memorise
    return (f"canaries of format `{c.get('format')}` (space {fmt(c.get('space_size'))}), {c.get('count')} × "
            f"{c.get('repeats')} copies; {metric_label('exposure_mean')} {exposure}")


MIA_METRICS = ("mia_auc", "mia_group_auc")
"""The membership-inference statistics a trial row carries (`trial.ATTACK_METRICS`)."""


def not_covered(a: Analysis) -> list[str]:
    """What no trial's ε covers: what the trials' reports list (the dataset size, a tokenizer trained on training
    text, ...), then the evaluation outputs released beside the models (`EVALUATION_NOT_COVERED`), and whether a
    sweep objective is one of them (the search then chose the front with them)."""
    listed = [item for t in a.sweep.trials for item in t.privacy.get("not_covered", []) if isinstance(item, str)]
    out = list(dict.fromkeys(listed))
    # Rows stored before a record (all its windows) became the unit of privacy carry no `unit`: their ε is per row.
    per_row = [t.trial_id for t in a.sweep.trials if t.privacy and "unit" not in t.privacy]
    if per_row:
        out.append(f"a whole record, for the {len(per_row)} trial(s) stored by an earlier version ({', '.join(per_row[:5])}"
                   f"{', ...' if len(per_row) > 5 else ''}): their ε is per row of up to data.max_length tokens, and a "
                   "record longer than a row was several rows; re-run them for a per-record ε")
    if any(t.metric(m) is not None for t in a.sweep.trials for m in MIA_METRICS):
        mia = EVALUATION_NOT_COVERED["membership_inference"]
        objectives = [o.metric for o in a.sweep.config.objectives if o.metric.startswith("mia")]
        out.append(mia + (f"; this sweep's objective {', '.join(objectives)} chose the front with them"
                          if objectives else ""))
    return out + [EVALUATION_NOT_COVERED["held_out"]]


def privacy_statement(a: Analysis, cost: SweepCost) -> str:
    """Markdown: what each frontier model protects, under which notion, ε, δ and accountant; the sweep's own cost."""
    lines = [f"# Privacy statement: sweep `{sweep_title(a)}`", "", headline(a), "",
             "## Power of the empirical checks", "", power_statement(a.power, a.dropped, a.trial_tokens), "",
             "## What the Pareto-front models protect", ""]
    if not a.front:
        lines.append(front_note(a))
    for t in a.front:
        also = "".join(f" Also {format_epsilon(g)}." for g in t.other_guarantees.values())
        lines.append(f"- **{t.trial_id}, {mechanism_name(t.mechanism)}** (seed {t.seed}): "
                     f"{format_epsilon(t.privacy)}; protects {covers(t)}.{also} Events: {_events_text(t.privacy)}. "
                     f"{caveat(t.mechanism)} Empirical check: {_canary_text(t, a.power.blind)}.")
    notions = sorted({str(r.get("notion")) for t in a.front for r in (t.privacy, *t.other_guarantees.values())
                      if r.get("notion") in NOTIONS})
    lines += ["", "## Notions", ""] + [f"- **{n}**: {NOTIONS[n].description}." for n in notions]
    lines += ["", "## Not covered by ε", "", "Each ε bounds what training reveals about one training record. It does "
              "not cover:", ""] + [f"- {item}." for item in not_covered(a)]
    lines += ["", "## The sweep's own selection", "",
              f"**{sweep_epsilon(cost)}**", "",
              "Each ε above is one trial's guarantee. It does not count that these models were selected among "
              f"{len(a.sweep.trials)} trials trained on the same data; the sweep's own ε does, and the bounds that "
              f"make it up follow ({cost.source}).", ""]
    if cost.bounds:
        lines += [cost_table(cost.bounds).markdown(), ""]
    if cost.conditional:
        lines += ["### What would hold if", "", WOULD_HOLD, "", cost_table(cost.conditional).markdown(), ""]
    if cost.charges:
        lines += ["Trials counted, each with what it is charged:", "", charges_table(a, cost.charges).markdown(), ""]
    lines += [f"- {note}" for note in cost.notes]
    return "\n".join(lines) + "\n"
