"""What the sweep's models protect (`privacy_statement.md`) and what the sweep itself cost in privacy.

The sweep's own cost comes from `sweep_cost.json` when the sweep wrote one; otherwise it is computed here from
the trials' ledgers with the privacy layer: basic composition (always holds) and the Papernot–Steinke random
search bound (holds only under its conditions, which are printed with it).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sdp_core.privacy import NOTIONS, basic_composition, counted_events, events_from_dicts, random_search_cost
from sdp_core.report.load import Sweep, Trial
from sdp_core.report.pareto import Analysis
from sdp_core.report.tables import (
    cost_table,
    fmt,
    format_epsilon,
    front_note,
    headline,
    mechanism_name,
    metric_label,
)

CAVEATS = {
    "nodp": "No-DP trains without noise: no privacy guarantee; a reference point only.",
    "redacted": "Redacted trains without noise on policy-redacted text: it protects the secrets the policy detects; "
                "secrets it misses have no guarantee.",
    "dpsgd": "DP-SGD protects every record entirely, whatever the detector finds.",
    "jft": "JFT protects the tokens the policy flags; phase 1 trains on redacted text (with light_noise, its "
           "amplification uses an estimated missing rate: an empirical, not a formal, bound).",
    "crt": "CRT's confidentiality is relative to the perfectly redacted data (policy π plus the conservative π_c); "
           "Bayesian confidentiality accounts for π's recall.",
    "atdp": "ATDP noises every record's whole token-weighted gradient; its ε composes every σ of the rise–reset "
            "schedule.",
    "sdpsgd": "Selective-DPSGD noises private token segments and the hidden state carried out of them; public "
              "segments train without noise.",
}

RDP_NOTIONS = ("DP", "SDP", "confidentiality")
"""Notions whose ε is the RDP conversion of the counted events (Bayesian confidentiality is a transform of it)."""


def protected(t: Trial) -> str:
    """What the trial's guarantee covers, in words."""
    policy = t.detector.get("policy") or (t.config.get("detector") or {}).get("policy", "?")
    notion = t.privacy.get("notion")
    if t.epsilon is None:
        return "nothing"
    if notion == "DP":
        return "every record, entirely"
    return f"the tokens flagged by detector policy `{policy}` ({notion})"


# ------------------------------------------------------------------------------------------ sweep cost

@dataclass(frozen=True)
class SweepCost:
    """The sweep's privacy bounds by name, where they come from, and what they leave out."""

    bounds: dict[str, dict]
    source: str
    notes: list[str]


def _trial_count_note(sweep: Sweep) -> str:
    return (f" This sweep ran a fixed number of trials (num_trials = {sweep.config.num_trials}), not a random one, so "
            "it does not meet these conditions: only basic composition holds for it.")


def computed_cost(sweep: Sweep) -> dict[str, dict]:
    """Basic composition and the Papernot–Steinke bound over every trial that trained with a finite ε.

    Trials of different notions cannot be composed into one number, so each notion gets its own bounds.
    """
    by_notion: dict[str, list[Trial]] = defaultdict(list)
    for t in sweep.trials:
        if t.epsilon is not None and t.state != "infeasible":
            by_notion[str(t.privacy.get("notion"))].append(t)
    bounds: dict[str, dict] = {}
    for notion, trials in sorted(by_notion.items()):
        suffix = f" ({notion} trials)" if len(by_notion) > 1 else ""
        bounds["basic composition" + suffix] = basic_composition([t.privacy for t in trials])
        schedules = [counted_events(events_from_dicts(t.privacy.get("events", [])), notion) for t in trials]
        if any(schedules) and notion in RDP_NOTIONS:
            ps = random_search_cost([s for s in schedules if s], max(t.privacy["delta"] for t in trials),
                                    mean_trials=len(trials))
            # The bound holds for the RDP of the counted events under any of RDP_NOTIONS; random_search_cost labels
            # its result DP.
            bounds["random search (Papernot–Steinke)" + suffix] = {
                **ps, "notion": notion, "conditions": ps["conditions"] + "." + _trial_count_note(sweep)}
    return bounds


def sweep_cost(sweep: Sweep) -> SweepCost:
    """The bounds of `sweep_cost.json` when the sweep wrote one (its mappings that carry an ε), else computed."""
    notes = []
    unguarded = [t for t in sweep.trials if t.state != "infeasible" and t.privacy and t.epsilon is None]
    if unguarded:
        notes.append(f"{len(unguarded)} trial(s) without a DP guarantee ({', '.join(t.trial_id for t in unguarded)}) "
                     "are not in these bounds: anything released about them is unprotected.")
    if not any(t.epsilon is not None for t in sweep.trials):
        notes.append("No trial spent privacy budget: nothing to compose.")
    if sweep.cost is not None:
        bounds = {k: v for k, v in sweep.cost.items() if isinstance(v, dict) and "epsilon" in v}
        return SweepCost(bounds, "written by the sweep (sweep_cost.json)", notes)
    return SweepCost(computed_cost(sweep), "computed by the report from the trials' ledgers (no sweep_cost.json)",
                     notes)


# ------------------------------------------------------------------------------------------ statement

def _events_text(privacy: dict[str, Any]) -> str:
    events = [e for e in privacy.get("events", []) if e.get("steps", 0) > 0]
    return "; ".join(f"{e.get('phase') or 'private'}: q = {e['sample_rate']:.3g}, σ = {e['noise_multiplier']:.3g}, "
                     f"{e['steps']} steps ({e.get('touches', 'all')})" for e in events) or "no noised step"


def _canary_text(t: Trial) -> str:
    c = t.canaries
    if not c:
        return "no canaries"
    exposure = t.metric("exposure_mean")
    return (f"canaries of format `{c.get('format')}` (space {fmt(c.get('space_size'))}), {c.get('count')} × "
            f"{c.get('repeats')} copies; {metric_label('exposure_mean')} {fmt(exposure)}")


def privacy_statement(a: Analysis, cost: SweepCost) -> str:
    """Markdown: what each frontier model protects, under which notion, ε, δ and accountant; the sweep's own cost."""
    lines = [f"# Privacy statement: sweep `{a.sweep.config.name}`", "", headline(a), "",
             "## What the Pareto-front models protect", ""]
    if not a.front:
        lines.append(front_note(a))
    for t in a.front:
        also = "".join(f" Also {format_epsilon(g)}." for g in t.other_guarantees.values())
        lines.append(f"- **{t.trial_id}, {mechanism_name(t.mechanism)}** (seed {t.seed}): "
                     f"{format_epsilon(t.privacy)}; protects {protected(t)}.{also} Events: {_events_text(t.privacy)}. "
                     f"{CAVEATS.get(t.mechanism, '')} Empirical check: {_canary_text(t)}.")
    notions = sorted({str(r.get("notion")) for t in a.front for r in (t.privacy, *t.other_guarantees.values())
                      if r.get("notion") in NOTIONS})
    lines += ["", "## Notions", ""] + [f"- **{n}**: {NOTIONS[n].description}." for n in notions]
    lines += ["", "## The sweep's own selection", "",
              "Each ε above is one trial's guarantee. It does **not** count that these models were selected among "
              f"{len(a.sweep.trials)} trials trained on the same data. The sweep as a whole is bounded below "
              f"({cost.source}):", ""]
    if cost.bounds:
        lines += [cost_table(cost.bounds).markdown(), ""]
    lines += [f"- {note}" for note in cost.notes]
    return "\n".join(lines) + "\n"
