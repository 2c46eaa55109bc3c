"""Text formatting and the report's tables, shared by the HTML page, `summary.md` and the statement.

Every ε is formatted by `format_epsilon`, which always names the notion, δ and accountant with it, and says when
it is only an empirical estimate (with the formal bound beside it) or a claim whose condition the data did not meet.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd
from scipy.stats import mannwhitneyu

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.privacy.light_noise import ESTIMATE
from sdp_core.privacy.relations import RELATIONS
from sdp_core.privacy.sweep_cost import NOTION_ORDER, all_trials_cost, trial_charge
from sdp_core.report.load import Sweep, Trial, number
from sdp_core.report.pareto import Analysis, ranked

METRIC_LABELS = {
    "val_perplexity": "val perplexity",
    "val_private_perplexity": "private-token perplexity",
    "val_public_perplexity": "public-token perplexity",
    "val_accuracy": "val accuracy",
    "test_perplexity": "test perplexity",
    "test_accuracy": "test accuracy",
    "exposure_mean": "canary exposure",
    "exposure_max": "max canary exposure",
    "mia_auc": "MIA AUC",
    "train_seconds": "train time (s)",
    "epsilon": "ε spent",
    "empirical_epsilon_lower_bound": "audit ε lower bound",
    "steps": "optimizer steps",
    "tokens": "tokens trained on",
    "wall_seconds": "trial wall time (s)",
}
COMPUTE_METRICS = ("steps", "tokens")
TABLE_METRICS = ("val_perplexity", "val_private_perplexity", "exposure_mean", "mia_auc")
UNFINISHED_REASONS = {
    "infeasible": "the ε target cannot be met with this configuration",
    "failed": "the trial raised an error",
    "early_stopped": "stopped early by the scheduler: partial metrics, not comparable",
}
DASH = "—"


# ------------------------------------------------------------------------------------------ formatting

def mechanism_name(name: str) -> str:
    """The registered display name; a mechanism this installation does not know keeps its config name."""
    settings = MECHANISM_SETTINGS.get(name)
    return settings.display_name if settings else name


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name.replace("_", " "))


def fmt(value: Any) -> str:
    """A number for people: 3 significant digits (one decimal from 10), thousands grouped; non-numbers as text, missing as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if isinstance(value, int) or abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def fmt_delta(delta: Any) -> str:
    """δ in the papers' style: 1e-5, 4e-4, 1.7e-4, 0.01."""
    d = number(delta)
    if d is None:
        return DASH
    if d == 0 or d >= 1e-3:
        return f"{d:.3g}"
    mantissa, exponent = f"{d:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def fmt_accountant(name: Any) -> str:
    """rdp -> RDP; basic_composition -> basic composition."""
    name = str(name or "?")
    return name.upper() if name in ("rdp", "prv", "pld") else name.replace("_", " ")


def privacy_qualifier(privacy: dict) -> str:
    """`SDP, replace-one neighbours, δ = 1e-5, RDP`: what an ε means (the relation where the report names one)."""
    relation = RELATIONS.get(privacy.get("neighbouring"))
    return ", ".join([privacy.get("notion", "?"), *([relation] if relation else []),
                      f"δ = {fmt_delta(privacy.get('delta'))}", fmt_accountant(privacy.get("accountant"))])


def format_epsilon(privacy: dict | None) -> str:
    """`ε = 3 (SDP, replace-one neighbours, δ = 1e-5, RDP)`; a trial without a finite ε has no DP guarantee.

    An empirical estimate reads `ε = 3 (SDP, δ = 1e-5, RDP), empirical estimate; formal bound ε = 41.2 (SDP, …)`;
    a claim whose condition the data did not meet (`holds: false`) reads `…, conditional: does not hold here`.
    """
    if not privacy:
        return DASH
    eps = number(privacy.get("epsilon"))
    if eps is None:
        return "no DP guarantee"
    text = f"ε = {eps:.3g} ({privacy_qualifier(privacy)})"
    if privacy.get("guarantee") == ESTIMATE:
        formal = privacy.get("formal") or {}
        bound = format_epsilon(formal) if number(formal.get("epsilon")) is not None else "ε = ∞"
        return f"{text}, {ESTIMATE}; formal bound {bound}"
    if privacy.get("holds") is False:
        return f"{text}, conditional: does not hold here"
    return text


def sigma_text(events: Iterable[dict]) -> str:
    """The calibrated noise multipliers of a trial's private events: `0.93` when they are all one σ, else per phase
    (its epochs together): `phase1 0.5 · phase2 0.93`."""
    by_phase: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("steps", 0) > 0 and e.get("sample_rate", 0) > 0 and number(e.get("noise_multiplier")) is not None:
            by_phase[str(e.get("phase", "")).split("/epoch")[0]].append(float(e["noise_multiplier"]))
    every = [sigma for sigmas in by_phase.values() for sigma in sigmas]
    if every and math.isclose(min(every), max(every), rel_tol=1e-3):
        by_phase = {"": every}
    parts = []
    for phase, sigmas in by_phase.items():
        lo, hi = min(sigmas), max(sigmas)
        value = f"{lo:.3g}" if math.isclose(lo, hi, rel_tol=1e-3) else f"{lo:.3g}–{hi:.3g}"
        parts.append(f"{phase} {value}" if len(by_phase) > 1 and phase else value)
    return " · ".join(parts) or DASH


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def params_text(trial: Trial) -> str:
    """The sampled hyper-parameters, by the last part of their dotted path: `learning_rate=0.0012, batch_size=32`
    (the sampled mechanism has its own column)."""
    return ", ".join(f"{path.rsplit('.', 1)[-1]}={fmt_value(v)}" for path, v in trial.params.items()
                     if path != "mechanism.name") or DASH


def wall_time(trial: Trial) -> float | None:
    return trial.timings.get("total", trial.metric("train_seconds"))


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
    missing = [o.metric for o in a.sweep.config.objectives if not any(t.metric(o.metric) is not None for t in finished)]
    what = f"measured {', '.join(map(metric_label, missing))}" if missing else "measured every objective"
    return f"No Pareto front: no finished trial {what}."


def evaluation_unit(a: Analysis) -> str:
    """The one unit every mechanism's utility is measured on."""
    data = a.sweep.config.base.data
    return (f"Every mechanism's {metric_label(a.utility.metric)} is measured on the same unit: whole held-out records "
            f"({data.n_validation} validation records, rows of up to {data.max_length} tokens), whatever unit it "
            "trains on (CRT trains its sentence units inside their records).")


def _utilities(a: Analysis, mechanism: str) -> list[float]:
    """The utility of every finished trial of `mechanism`, best first."""
    trials = [t for t in a.sweep.trials if t.mechanism == mechanism and t.state == "finished"]
    return [t.metric(a.utility.metric) for t in ranked(trials, a.utility) if t.metric(a.utility.metric) is not None]


def spread_text(values: list[float]) -> str:
    """`best 12.0 · median 20.1 · worst 58.0 (3 trials)`, best first; one trial has no spread."""
    if len(values) < 2:
        return f"{fmt(values[0])} (1 trial: no spread)" if values else DASH
    return (f"best {fmt(values[0])} · median {fmt(statistics.median(values))} · worst {fmt(values[-1])} "
            f"({len(values)} trials)")


RANKING_ALPHA = 0.05
"""Family-wise level of the one-sided rank tests that put one mechanism above the next (`ranking_note`)."""


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


def ranking_note(a: Analysis) -> str:
    """The mechanisms by their best trial, saying which steps of the order are beyond their trials' spread.

    A best trial is one draw of a random search, so mechanism A ranks above the next one, B, only when A's trials
    are better than B's by a one-sided exact Mann–Whitney U test, the k − 1 steps of k mechanisms corrected together
    by Holm's procedure at family-wise level `RANKING_ALPHA`. Otherwise the step is within noise, and the note says
    so, and also when the trials are too few for any step to pass (an exact test of n against n trials cannot go
    below 1/C(2n, n): 0.05 for 3 trials each, under Holm's first level with three or more steps).
    """
    sign = 1.0 if a.utility.mode == "min" else -1.0
    values = {m: v for m in a.sweep.config.mechanisms if (v := _utilities(a, m))}
    if len(values) < 2:
        return ""
    order = sorted(values, key=lambda m: sign * values[m][0])
    pairs = list(zip(order, order[1:]))
    pvalues = [mannwhitneyu([sign * v for v in values[upper]], [sign * v for v in values[lower]],
                            alternative="less", method="exact").pvalue for upper, lower in pairs]
    passes = holm_passes(pvalues, RANKING_ALPHA)
    steps = [f"{mechanism_name(upper)} {'>' if ok else '≈'} {mechanism_name(lower)}"
             for (upper, lower), ok in zip(pairs, passes)]
    smallest = [1 / math.comb(len(values[u]) + len(values[w]), len(values[u])) for u, w in pairs]
    if all(passes):
        verdict = "every step is beyond the trials' spread"
    else:
        verdict = (f"the ranking is within noise where marked ≈ (the better mechanism's trials do not beat the "
                   f"other's by one-sided rank tests at family-wise level {RANKING_ALPHA:g}, Holm-corrected over "
                   f"{len(pairs)} steps)")
        if min(smallest) > RANKING_ALPHA / len(pairs):
            verdict += (f"; with these trials per mechanism no step can pass (the smallest attainable p-value, "
                        f"{min(smallest):.3g}, is above {RANKING_ALPHA:g}/{len(pairs)}): more trials per mechanism "
                        f"can separate them")
    return f"Mechanisms by their best {metric_label(a.utility.metric)}: {', '.join(steps)}; {verdict}."


def _separated(trials: list[Trial], metric: str) -> bool:
    """Whether any two trials' values of `metric` differ beyond their 95 % intervals (exact values: any difference)."""
    ends = [t.interval(metric) or (t.metric(metric),) * 2 for t in trials if t.metric(metric) is not None]
    return any(hi_a < lo_b for lo_a, hi_a in ends for lo_b, hi_b in ends)


def separation_note(a: Analysis) -> str:
    """Says plainly when a privacy objective did not separate the trials (the front is then decided by the rest)."""
    finished = [t for t in a.sweep.trials if t.state == "finished"]
    silent = [o.metric for o in a.sweep.config.objectives
              if o.metric != a.utility.metric and any(t.metric(o.metric) is not None for t in finished)
              and not _separated(finished, o.metric)]
    if not silent:
        return ""
    ceilings = [t.audit["ceiling"] for t in finished if "ceiling" in t.audit]
    resolution = (f" (with its canaries the audit could show at most ε ≈ {fmt(max(ceilings))} per record)"
                  if set(AUDIT_METRICS) & set(silent) and ceilings else "")
    return (f"The privacy objective {', '.join(map(metric_label, silent))} did not separate the trials: every "
            f"difference is inside the measurements' uncertainty{resolution}, so the front is decided by the other "
            "objectives alone.")


def reading_notes(a: Analysis) -> list[str]:
    """How to read the answer: the evaluation unit, the mechanisms' ranking against noise, privacy separation."""
    return [n for n in (evaluation_unit(a), ranking_note(a), separation_note(a)) if n]


def counts_line(a: Analysis) -> str:
    by_state = {s: sum(t.state == s for t in a.sweep.trials) for s in ("finished", "early_stopped", "infeasible", "failed")}
    objectives = " and ".join(f"{metric_label(o.metric)} {'↓' if o.mode == 'min' else '↑'}"
                              for o in a.sweep.config.objectives)
    return (f"{len(a.sweep.trials)} trials: {by_state['finished']} finished ({len(a.front)} on the Pareto front of "
            f"{objectives}), {by_state['early_stopped']} stopped early, {by_state['infeasible']} infeasible, "
            f"{by_state['failed']} failed.")


# ------------------------------------------------------------------------------------------------ tables

EPSILON_COLUMN = "ε (notion, δ, accountant)"


@dataclass
class Table:
    """A table of display strings; `numeric` names the columns to right-align. An ε column never wraps."""

    columns: list[str]
    rows: list[list[str]]
    numeric: set[str] = field(default_factory=set)

    def markdown(self) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")

        align = ["---:" if c in self.numeric else "---" for c in self.columns]
        lines = [self.columns, align, *self.rows]
        return "\n".join("| " + " | ".join(cell(c) for c in line) + " |" for line in lines)


def _metric_columns(a: Analysis, trials: list[Trial]) -> list[str]:
    """The standard metric columns plus the sweep's objectives, without columns no trial has."""
    names = dict.fromkeys((a.utility.metric, *TABLE_METRICS, *(o.metric for o in a.sweep.config.objectives)))
    return [m for m in names if m != "epsilon" and any(t.metric(m) is not None for t in trials)]


def metric_text(t: Trial, name: str) -> str:
    """A metric with its 95 % interval when it has one: `3.55 [2.19, 4.91]`."""
    interval = t.interval(name)
    return fmt(t.metric(name)) + (f" [{fmt(interval[0])}, {fmt(interval[1])}]" if interval else "")


AUDIT_COLUMN = "audit ε ≥ per record (notion, δ, method; confidence, canaries; most it can show)"
AUDIT_METRICS = ("empirical_epsilon_lower_bound", "empirical_epsilon_per_record")  # shown in the audit column


def audit_text(t: Trial) -> str:
    """The one-run ε lower bound per record with what it means, its confidence, canaries and ceiling:
    `0.31 (empirical lower bound, δ = 1e-5, audit:one run; 95 %, 1,000; ≤ 5.16)`."""
    audit = t.audit
    bound = number(audit.get("epsilon_lower_bound_per_record", audit.get("epsilon_lower_bound")))
    if bound is None:
        return DASH
    ceiling = f"; ≤ {fmt(audit['ceiling'])}" if "ceiling" in audit else ""
    return (f"{fmt(bound)} ({privacy_qualifier(audit)}; {100 * audit.get('confidence', 0.95):g} %, "
            f"{fmt(int(audit.get('canaries', 0)))}{ceiling})")


def _trial_table(a: Analysis, trials: list[Trial], first: list[str], first_cells: Callable[[Trial], list[str]]
                 ) -> Table:
    """Rows of trials: the `first` columns, then σ, ε, the audit's ε lower bound, the metric columns, compute
    (optimizer steps, tokens trained on) and wall time."""
    metrics = [m for m in _metric_columns(a, trials) if m not in (*COMPUTE_METRICS, *AUDIT_METRICS)]
    audit = [AUDIT_COLUMN] if any(t.audit for t in trials) else []
    compute = [m for m in COMPUTE_METRICS if any(t.metric(m) is not None for t in trials)]
    columns = [*first, "σ", EPSILON_COLUMN, *audit, *map(metric_label, metrics), *map(metric_label, compute),
               "wall time"]
    rows = [[*first_cells(t), sigma_text(t.privacy.get("events", [])), format_epsilon(t.privacy),
             *([audit_text(t)] if audit else []), *(metric_text(t, m) for m in metrics),
             *(fmt(None if t.metric(m) is None else round(t.metric(m))) for m in compute),
             fmt_seconds(wall_time(t))] for t in trials]
    return Table(columns, rows, numeric={"σ", *audit, *map(metric_label, (*metrics, *compute)), "wall time"})


MODEL_COLUMN = "model"
"""The front table's column of saved models: paths inside the sweep folder (`models/<trial>/model`)."""


def saved_model(a: Analysis, t: Trial) -> str:
    """Where `t`'s model was kept, inside the sweep folder (the sweep's `keep_models`), or a dash."""
    path = Path("models") / t.trial_id / "model"
    return path.as_posix() if (a.sweep.directory / path).is_dir() else DASH


def trial_charges(sweep: Sweep) -> dict[str, dict]:
    """Every trial that published a plan, by id, with the privacy report it is charged (`trial_charge`): its spent
    steps when it has a privacy report, else its whole plan (stopped early, failed or killed after calibrating)."""
    charges = {t.trial_id: trial_charge(t.privacy, t.ledger, spent_known="epsilon" in t.privacy)
               for t in sweep.trials}
    return {trial_id: charge for trial_id, charge in charges.items() if charge is not None}


SEARCH_COLUMN = "ε of the search that chose it (composition)"
SEARCH_BOUND = ("The ε of the search that chose a front trial composes every trial it compared, each charged its spent "
                "steps (or its whole plan when stopped or failed), under the weakest of their notions: this sweep ran "
                "a fixed number of trials, so the random-K random-search bound of Papernot & Steinke (2022), which "
                "needs a random number of independently drawn trials, does not apply.")


def search_bound(trials: list[Trial], charges: dict[str, dict]) -> str:
    """The ε of a search over `trials` (every trial touched the same data): the composition of their charges under
    the weakest notion (`all_trials_cost`), or none when one of them has no formal guarantee."""
    charged = [charges[t.trial_id] for t in trials if t.trial_id in charges]
    if not charged:
        return DASH
    if any(number(c.get("epsilon")) is None or c.get("notion") not in NOTION_ORDER for c in charged):
        return "none: a compared trial has no formal guarantee"
    return format_epsilon(all_trials_cost(charged))


def frontier_table(a: Analysis) -> Table:
    """The front's trials; beside each trial's own ε, the ε of the search that chose it: its mechanism's trials,
    and the whole sweep (the front compares every trial), each by composition (`SEARCH_BOUND`)."""
    charges = trial_charges(a.sweep)
    whole = search_bound(a.sweep.trials, charges)
    mine = {m: search_bound([t for t in a.sweep.trials if t.mechanism == m], charges) for m in {t.mechanism for t in a.front}}

    def first_cells(t: Trial) -> list[str]:
        n = sum(u.mechanism == t.mechanism for u in a.sweep.trials)
        search = f"its mechanism's {n} trials: {mine[t.mechanism]}; all {len(a.sweep.trials)} trials: {whole}"
        return [t.trial_id, mechanism_name(t.mechanism), params_text(t), saved_model(a, t), search]

    return _trial_table(a, a.front, ["trial", "mechanism", "hyper-parameters", MODEL_COLUMN, SEARCH_COLUMN],
                        first_cells)


def mechanism_table(a: Analysis) -> Table:
    """The best finished trial of each mechanism (by the utility objective), as in the papers' tables."""
    names = dict.fromkeys([*a.sweep.config.mechanisms, *(t.mechanism for t in a.sweep.trials)])
    best = {m: a.best_of([t for t in a.sweep.trials if t.mechanism == m]) for m in names}
    shown = [m for m in names if best[m] is not None]

    spread = f"{metric_label(a.utility.metric)} over its trials"

    def first_cells(t: Trial) -> list[str]:
        mine = [u for u in a.sweep.trials if u.mechanism == t.mechanism]
        return [mechanism_name(t.mechanism), f"{sum(u.state == 'finished' for u in mine)}/{len(mine)}", t.trial_id,
                spread_text(_utilities(a, t.mechanism))]

    table = _trial_table(a, [best[m] for m in shown], ["mechanism", "finished", "best trial", spread], first_cells)
    for m in names:
        if best[m] is None:  # keep every mechanism visible, even one whose trials all failed
            mine = [u for u in a.sweep.trials if u.mechanism == m]
            table.rows.append([mechanism_name(m), f"0/{len(mine)}", DASH] + [DASH] * (len(table.columns) - 3))
    return table


def unfinished_table(a: Analysis) -> Table:
    order = {"infeasible": 0, "failed": 1, "early_stopped": 2}
    trials = sorted((t for t in a.sweep.trials if t.state != "finished"), key=lambda t: (order[t.state], t.trial_id))
    rows = [[t.trial_id, mechanism_name(t.mechanism), t.state.replace("_", " "), t.error or UNFINISHED_REASONS[t.state],
             params_text(t)] for t in trials]
    return Table(["trial", "mechanism", "state", "reason", "hyper-parameters"], rows)


def fmt_rate(d: Any) -> str:
    """A rate with its interval, `{value, low, high, ...}`: `0.912 [0.894, 0.930]`."""
    values = [number(d.get(k)) for k in ("value", "low", "high")] if isinstance(d, dict) else [None]
    return DASH if None in values else "{:.3f} [{:.3f}, {:.3f}]".format(*values)


SPLITS = ("train", "validation", "test")


def _split_shares(shares: Any) -> str:
    """`train / validation / test` shares of non-space characters, as percentages (a dash where one is missing)."""
    shares = shares if isinstance(shares, dict) else {}
    values = [number((shares.get(split) or {}).get("value")) for split in SPLITS]
    return " / ".join(DASH if v is None else f"{100 * v:.1f} %" for v in values)


def detector_table(a: Analysis) -> Table:
    """Per detector policy: redacted token fraction, the share of each split's characters it masks beside the share
    gold spans cover (over-masking is what Redacted, JFT's phase 1 and CRT's public set lose for nothing), and token
    recall (overall, per gold label) with 95 % intervals when the data has gold spans."""
    by_policy: dict[str, list[Trial]] = defaultdict(list)
    for t in a.sweep.trials:
        if t.detector:
            by_policy[str(t.detector.get("policy", "?"))].append(t)
    rows = []
    for policy, trials in by_policy.items():
        d = trials[0].detector  # one dataset × policy: every trial of the policy shares these numbers
        fractions = [f for f in (number(t.detector.get("redacted_token_fraction")) for t in trials) if f is not None]
        rows.append([policy, str(len(trials)), fmt(sum(fractions) / len(fractions)) if fractions else DASH,
                     _split_shares(d.get("masked_char_share")), _split_shares(d.get("gold_char_share")),
                     "all", fmt_rate(d.get("recall")), fmt_rate(d.get("missing_rate"))])
        per_label = d.get("recall_per_label")
        for label, rate in (per_label.items() if isinstance(per_label, dict) else ()):
            rows.append(["", "", "", "", "", str(label), fmt_rate(rate), DASH])
    return Table(["policy", "trials", "redacted token fraction", "masked characters (train / val / test)",
                  "gold characters (train / val / test)", "label", "recall [95% CI]", "missing rate [95% CI]"],
                 rows, numeric={"trials", "redacted token fraction", "recall [95% CI]", "missing rate [95% CI]"})


def recall_estimate_table(a: Analysis) -> Table:
    """Per detector policy and secret type: the recall estimated without gold spans (`detectors.estimate`: secrets
    inserted into copies of the data's records), with its 95 % interval and a warning below the policy's bar."""
    rows, seen = [], set()
    for t in a.sweep.trials:
        est = (t.detector or {}).get("recall_estimate")
        policy = str((t.detector or {}).get("policy", "?"))
        if not isinstance(est, dict) or policy in seen:
            continue
        seen.add(policy)
        for kind, r in (est.get("per_type") or {}).items():
            rows.append([policy, str(kind), fmt_rate(r), f"{r.get('k', DASH)}/{r.get('n', DASH)}",
                         "below 0.95" if r.get("warn") else ""])
    return Table(["policy", "type", "estimated recall [95% CI]", "found", "warning"], rows,
                 numeric={"estimated recall [95% CI]", "found"})


def review_recall_table(a: Analysis) -> Table:
    """Per detector policy: its recall on the records a person reviewed (`sdp-sweep detect --review`: the labels
    beside the data are gold spans), over every secret and per type, with 95 % Wilson intervals."""
    rows, seen = [], set()
    for t in a.sweep.trials:
        review = (t.detector or {}).get("review")
        policy = str((t.detector or {}).get("policy", "?"))
        if not isinstance(review, dict) or policy in seen:
            continue
        seen.add(policy)
        per_type = review.get("per_type")
        for kind, r in [("all", review.get("secrets")), *(per_type.items() if isinstance(per_type, dict) else ())]:
            r = r if isinstance(r, dict) else {}
            rows.append([policy, str(review.get("records", DASH)), str(kind), fmt_rate(r),
                         f"{r.get('k', DASH)}/{r.get('n', DASH)}"])
    return Table(["policy", "reviewed records", "type", "recall [95% CI]", "found"], rows,
                 numeric={"reviewed records", "recall [95% CI]", "found"})


def policy_types_notes(a: Analysis) -> list[str]:
    """One line per detector policy that declares its types: what it masks and what it leaves in the clear."""
    notes, seen = [], set()
    for t in a.sweep.trials:
        types = (t.detector or {}).get("types")
        if not isinstance(types, dict) or types.get("policy") in seen:
            continue
        seen.add(types.get("policy"))
        clear = ", ".join(map(str, types.get("clear") or ())) or "nothing it knows of"
        notes.append(f"{types.get('policy')} masks {', '.join(map(str, types.get('masks') or ()))}; "
                     f"it leaves in the clear {clear}.")
    return notes


def charges_table(a: Analysis, charges: dict[str, dict]) -> Table:
    """The trials the sweep's cost counts: state, the ε each is charged, and whether spent steps or its whole plan."""
    trials = {t.trial_id: t for t in a.sweep.trials}
    rows = [[trial_id, mechanism_name(trials[trial_id].mechanism), trials[trial_id].state.replace("_", " "),
             format_epsilon(charge), str(charge.get("charged", DASH))] for trial_id, charge in charges.items()]
    return Table(["trial", "mechanism", "state", EPSILON_COLUMN, "charged"], rows)


def cost_table(cost: dict[str, dict]) -> Table:
    """The sweep's own privacy cost: one row per bound, with the conditions under which it holds."""
    rows = [[name, format_epsilon(entry), fmt(entry.get("trials", entry.get("mean_trials"))),
             str(entry.get("conditions", DASH))] for name, entry in cost.items()]
    return Table(["bound", EPSILON_COLUMN, "trials", "holds when"], rows, numeric={"trials"})


# ------------------------------------------------------------------------------------- trials.parquet

def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def trial_record(t: Trial, on_front: bool) -> dict[str, Any]:
    """One flat row: state, Pareto flag, hyper-parameters, ledger (its guarantee: formal, empirical estimate or none,
    and the formal bound beside an estimate), metrics, detector, canary shape, timings, versions."""
    p = t.privacy
    eps, formal = p.get("epsilon"), (p.get("formal") or {}).get("epsilon")
    return {
        "trial_id": t.trial_id, "state": t.state, "pareto": on_front, "mechanism": t.mechanism, "seed": t.seed,
        **{f"param.{k}": v for k, v in t.params.items()},
        **{f"mechanism.{k}": v for k, v in t.mechanism_settings.items()},
        **{f"metric.{k}": v for k, v in t.metrics.items()},
        "privacy.epsilon": float(eps) if isinstance(eps, (int, float)) else None,
        "privacy.delta": number(p.get("delta")), "privacy.notion": p.get("notion"),
        "privacy.accountant": p.get("accountant"), "privacy.sigma": sigma_text(p.get("events", [])),
        "privacy.guarantee": p.get("guarantee") or ("formal" if t.guaranteed else "none"),
        "privacy.formal_epsilon": float(formal) if isinstance(formal, (int, float)) else None,
        "privacy.events": _json(p.get("events", [])),
        "detector.policy": t.detector.get("policy"),
        "detector.redacted_token_fraction": number(t.detector.get("redacted_token_fraction")),
        **{f"canaries.{k}": v for k, v in (t.canaries or {}).items()},
        **{f"timings.{k}": v for k, v in t.timings.items()},
        **{f"version.{k}": v for k, v in t.versions.items()},
        "error": t.error, "config": _json(t.config),
    }


def _arrow_safe(column: pd.Series) -> pd.Series:
    """Lists, mappings and mixed-type columns (a choice of 16 or "auto") become JSON text, so Parquet can hold them."""
    if column.dtype != object:
        return column
    kinds = {type(v) for v in column if v is not None and not (isinstance(v, float) and math.isnan(v))}
    if len(kinds) <= 1 and not kinds & {list, dict}:
        return column
    return column.map(lambda v: None if v is None else (v if isinstance(v, str) else _json(v)))


def trials_frame(a: Analysis) -> pd.DataFrame:
    front = {t.trial_id for t in a.front}
    frame = pd.DataFrame([trial_record(t, t.trial_id in front) for t in a.sweep.trials])
    return frame.apply(_arrow_safe)
