"""The report's tables as display strings (`Table`), shared by the HTML page, `summary.md` and the statement, and
`trials.parquet`'s one row per trial.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from sdp_core.attacks.audit import perfect_attack_bound
from sdp_core.privacy.events import events_from_dicts
from sdp_core.privacy.light_noise import ESTIMATE
from sdp_core.privacy.numbers import epsilon_number
from sdp_core.privacy.relations import ADD_REMOVE, REPLACE_ONE
from sdp_core.privacy.report import notion_epsilon
from sdp_core.privacy.sweep_cost import NOTION_ORDER, all_trials_cost, trial_charge
from sdp_core.report.formatting import (
    AUDIT_METRICS,
    DASH,
    fmt,
    fmt_rate,
    fmt_seconds,
    format_epsilon,
    mechanism_name,
    metric_label,
    params_text,
    privacy_qualifier,
    sigma_text,
    spread_text,
    wall_time,
)
from sdp_core.report.load import Sweep, Trial, number
from sdp_core.report.pareto import Analysis
from sdp_core.report.power import EMPIRICAL_METRICS, NO_POWER
from sdp_core.report.ranking import utilities

COMPUTE_METRICS = ("steps", "tokens")

TABLE_METRICS = ("val_perplexity", "val_private_perplexity", "exposure_mean", "mia_auc")

UNFINISHED_REASONS = {
    "infeasible": "the ε target cannot be met with this configuration",
    "failed": "the trial raised an error",
    "early_stopped": "stopped early by the scheduler: partial metrics, not comparable",
}

EPSILON_COLUMN = "ε (notion, δ, accountant)"


@dataclass
class Table:
    """A table of display strings; `numeric` names the columns to right-align. An ε column never wraps. `note`
    says once, above the table, what would otherwise repeat in every row (the audit's qualifiers)."""

    columns: list[str]
    rows: list[list[str]]
    numeric: set[str] = field(default_factory=set)
    note: str = ""

    def markdown(self) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")

        align = ["---:" if c in self.numeric else "---" for c in self.columns]
        lines = [self.columns, align, *self.rows]
        table = "\n".join("| " + " | ".join(cell(c) for c in line) + " |" for line in lines)
        return f"{self.note}\n\n{table}" if self.note else table


def _metric_columns(a: Analysis, trials: list[Trial]) -> list[str]:
    """The standard metric columns plus the sweep's objectives, without columns no trial has."""
    names = dict.fromkeys((a.utility.metric, *TABLE_METRICS, *(o.metric for o in a.sweep.config.objectives)))
    return [m for m in names if m != "epsilon" and any(t.metric(m) is not None for t in trials)]


def metric_text(t: Trial, name: str) -> str:
    """A metric with its 95 % interval when it has one: `3.55 [2.19, 4.91]`."""
    interval = t.interval(name)
    return fmt(t.metric(name)) + (f" [{fmt(interval[0])}, {fmt(interval[1])}]" if interval else "")


AUDIT_COLUMN = "audit ε ≥"

REPLACE_ONE_COLUMN = "replace-one ε"
AUDIT_ABOVE = "⚠"
"""Marks an audit bound above the trial's replace-one ε: a guarantee or an audit assumption failed."""


def audit_bound(t: Trial) -> float | None:
    """The one-run audit's ε lower bound per record (a canary's group bound when a canary has no record bound)."""
    return number(t.audit.get("epsilon_lower_bound_per_record", t.audit.get("epsilon_lower_bound")))


def replace_one_epsilon(t: Trial) -> float | None:
    """The trial's formal ε for replace-one neighbours, the relation the audit tests (canaries go into existing
    records: `attacks.audit`). SDP and the confidentiality notions are accounted for it already; a DP trial's ε is
    for add/remove neighbours, so its replace-one ε is recomputed from its events (larger, up to about 2×)."""
    privacy = (t.privacy.get("formal") or {}) if t.privacy.get("guarantee") == ESTIMATE else t.privacy
    epsilon = number(privacy.get("epsilon"))
    if epsilon is None or privacy.get("neighbouring", ADD_REMOVE) == REPLACE_ONE:
        return epsilon
    events = events_from_dicts(privacy.get("events", []))
    return notion_epsilon(events, float(privacy["delta"]), str(privacy["notion"]), str(privacy["accountant"]),
                          REPLACE_ONE)


def _audit_facts(t: Trial) -> dict[str, str]:
    """What qualifies an audit's bound, by name: what it means, its confidence, canaries and ceiling."""
    audit = {"neighbouring": REPLACE_ONE, **t.audit}  # rows written before the audit named its relation
    facts = {"meaning": privacy_qualifier(audit), "confidence": f"{100 * audit.get('confidence', 0.95):g} %",
             "canaries": f"{fmt(int(audit.get('canaries', 0)))} canaries"}
    if "members" in audit:
        facts["canaries"] += f", {fmt(int(audit['members']))} inserted"
    if "ceiling" in audit:
        facts["ceiling"] = f"the most it can show: {fmt(audit['ceiling'])}"
    epsilon = replace_one_epsilon(t)
    if audit.get("group_size", 1) == 1 and "canaries" in audit and epsilon is not None:
        # A bound of 0 reads "cannot tell" unless even a perfect attack at the trial's ε would show more.
        perfect = _perfect_attack(round(epsilon, 3), int(audit["canaries"]), float(audit.get("delta", 1e-5)),
                                  float(audit.get("confidence", 0.95)))
        facts["perfect"] = f"of {fmt(perfect)}"
    return facts


@lru_cache(maxsize=None)
def _perfect_attack(epsilon: float, m: int, delta: float, confidence: float) -> float:
    return perfect_attack_bound(epsilon, m, delta, confidence)


def _shared_facts(trials: list[Trial]) -> dict[str, str]:
    """The audit facts every audited trial of `trials` shares: said once, above the table."""
    facts = [_audit_facts(t) for t in trials if audit_bound(t) is not None]
    return {k: v for k, v in facts[0].items() if all(f.get(k) == v for f in facts)} if facts else {}


def audit_text(t: Trial, shared: dict[str, str] | None = None) -> str:
    """The audit's ε lower bound per record, with the facts `shared` leaves out (`0.31 (95 %; ≤ 4.47)` alone, `0.31`
    when the table's note says them), and a warning when it exceeds the trial's replace-one ε (an upper bound)."""
    bound = audit_bound(t)
    if bound is None:
        return DASH
    rest = [v for k, v in _audit_facts(t).items() if (shared or {}).get(k) != v]
    upper = replace_one_epsilon(t)
    text = fmt(bound) + (f" ({'; '.join(rest)})" if rest else "")
    above = upper is not None and bound > upper * (1 + 1e-6)
    return f"{AUDIT_ABOVE} {text} > ε {epsilon_number(upper)}" if above and upper is not None else text


def _epsilon_cell(epsilon: float | None) -> str:
    return DASH if epsilon is None else epsilon_number(epsilon)


def audit_note(trials: list[Trial]) -> str:
    """The audit column's facts shared by every row, said once above the table; "" without an audit."""
    shared = _shared_facts(trials)
    if not shared:
        return ""
    return (f"{AUDIT_COLUMN}: the one-run audit's ε lower bound per record (Steinke, Nasr & Jagielski 2023; "
            f"{'; '.join(shared.values())}). Canaries go into existing records, so it bounds ε for replace-one "
            "neighbours: compare it with a trial's ε for replace-one neighbours (SDP and confidentiality are "
            f"accounted for them; a DP trial's add/remove ε is smaller, so its {REPLACE_ONE_COLUMN} is shown). "
            f"{AUDIT_ABOVE} marks a bound above that ε: a guarantee or an audit assumption (for Redacted's ε = 0, a "
            "detector that finds every canary) failed. \"of b\": b is the bound the best attack on a Gaussian "
            "mechanism at the trial's replace-one ε would show with these canaries (a perfect attack); a bound "
            "below it reads \"cannot tell\", not \"private\".")


def _trial_table(a: Analysis, trials: list[Trial], first: list[str], first_cells: Callable[[Trial], list[str]]
                 ) -> Table:
    """Rows of trials: the `first` columns, then σ, ε, the audit's ε lower bound, the metric columns, compute
    (optimizer steps, tokens trained on) and wall time; an attack's number reads `NO_POWER` when the sweep's
    positive control did not memorise."""
    metrics = [m for m in _metric_columns(a, trials) if m not in (*COMPUTE_METRICS, *AUDIT_METRICS)]
    audited = [t for t in trials if audit_bound(t) is not None]
    audit = [AUDIT_COLUMN] if audited else []
    # The audit compares with the replace-one ε: a column of its own where a trial's ε is for other neighbours.
    other = [REPLACE_ONE_COLUMN] if any(t.privacy.get("neighbouring", ADD_REMOVE) != REPLACE_ONE and t.epsilon
                                        is not None for t in audited) else []
    compute = [m for m in COMPUTE_METRICS if any(t.metric(m) is not None for t in trials)]
    columns = [*first, "σ", EPSILON_COLUMN, *audit, *other, *map(metric_label, metrics),
               *map(metric_label, compute), "wall time"]
    shared = _shared_facts(trials)
    blind = a.power.blind  # the positive control did not memorise: no attack's number can tell (report.power)
    rows = [[*first_cells(t), sigma_text(t.privacy.get("events", [])), format_epsilon(t.privacy),
             *([NO_POWER if blind else audit_text(t, shared)] if audit else []),
             *([_epsilon_cell(replace_one_epsilon(t))] if other else []),
             *(NO_POWER if blind and m in EMPIRICAL_METRICS else metric_text(t, m) for m in metrics),
             *(fmt(None if (v := t.metric(m)) is None else round(v)) for m in compute),
             fmt_seconds(wall_time(t))] for t in trials]
    return Table(columns, rows, numeric={"σ", *audit, *other, *map(metric_label, (*metrics, *compute)), "wall time"},
                 note=audit_note(trials))


CANARY_FAMILIES = (("exposure", ""), ("missed_exposure", "missed_"))
"""Each canary family's metric and the prefix of its rank test's metrics: `data.canaries.format`'s family (flagged
or missed, as the policy treats it), and `missed_format`'s."""


def family_table(a: Analysis) -> Table | None:
    """Canary exposure and rank test of each family, for the positive control and each mechanism's best trial: what
    redaction protects (the family the policy flags) beside what only a DP part protects (the family it misses).
    None when no trial measured exposure."""
    best = [t for m in dict.fromkeys(t.mechanism for t in a.sweep.trials)
            if (t := a.best_of([u for u in a.sweep.trials if u.mechanism == m])) is not None]
    trials = [t for t in (a.power.control, *best) if t is not None]
    families = [(metric, prefix) for metric, prefix in CANARY_FAMILIES
                if any(t.metric(f"{metric}_mean") is not None for t in trials)]
    if not families:
        return None
    c = next((t.canaries for t in trials if t.canaries), None) or {}

    def label(metric: str) -> str:
        family = c if metric == "exposure" else (c.get("missed") or {})
        return f"`{family.get('format', '?')}` ({family.get('family', 'flagged' if metric == 'exposure' else 'missed')})"

    def cell(t: Trial, metric: str, prefix: str) -> str:
        if a.power.blind and t is not a.power.control:
            return NO_POWER
        interval = t.interval(f"{metric}_mean")
        mean = fmt(t.metric(f"{metric}_mean")) + (f" [{fmt(interval[0])}, {fmt(interval[1])}]" if interval else "")
        return (f"{mean}; AUC {fmt(t.metric(f'{prefix}exposure_auc'))}, "
                f"p = {fmt(t.metric(f'{prefix}exposure_p_value'))}")

    columns = ["trial", "mechanism", *(label(m) for m, _ in families)]
    rows = [[f"{t.trial_id} (No-DP control)" if t is a.power.control else t.trial_id, mechanism_name(t.mechanism),
             *(cell(t, m, p) for m, p in families)] for t in trials]
    return Table(columns, rows, note="Mean exposure (bits) of each family's inserted canaries with its 95 % "
                 "interval, and the one-sided Mann–Whitney test of inserted above held-out canaries (AUC 0.5 and a "
                 "large p: not separated). Redaction removes the family the policy flags; the family it misses is "
                 "protected by a DP part only.")


MODEL_COLUMN = "model"
"""The front table's column of saved models: paths inside the sweep folder (`models/<trial>/model`)."""
POLICY_COLUMN = "policy"
"""The detector tables' column of policy names (a union's is its members' names joined by commas)."""


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


SEARCH_COLUMN = "ε of the search that chose it"

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


def frontier_table(a: Analysis, sweep_epsilon: str) -> Table:
    """The front's trials; beside each trial's own ε, the ε of the search that chose it: its mechanism's trials by
    composition (`SEARCH_BOUND`), and (said once, above the table) the whole sweep's, `sweep_epsilon`: the
    statement's sentence (`statement.sweep_epsilon`), since the front compares every trial."""
    charges = trial_charges(a.sweep)
    mine = {m: search_bound([t for t in a.sweep.trials if t.mechanism == m], charges)
            for m in {t.mechanism for t in a.front}}

    def first_cells(t: Trial) -> list[str]:
        n = sum(u.mechanism == t.mechanism for u in a.sweep.trials)
        return [t.trial_id, mechanism_name(t.mechanism), params_text(t), saved_model(a, t),
                f"its mechanism's {n} trials: {mine[t.mechanism]}"]

    table = _trial_table(a, a.front, ["trial", "mechanism", "hyper-parameters", MODEL_COLUMN, SEARCH_COLUMN],
                         first_cells)
    whole = (f"{SEARCH_COLUMN}: the front compares all {len(a.sweep.trials)} trials. {sweep_epsilon} Each row "
             "gives its own mechanism's search.")
    return replace(table, note=" ".join(n for n in (whole, table.note) if n))


def mechanism_table(a: Analysis) -> Table:
    """The best finished trial of each mechanism (by the utility objective), as in the papers' tables."""
    names = dict.fromkeys([*a.sweep.config.mechanisms, *(t.mechanism for t in a.sweep.trials)])
    best = {m: a.best_of([t for t in a.sweep.trials if t.mechanism == m]) for m in names}
    shown = [m for m in names if best[m] is not None]

    spread = f"{metric_label(a.utility.metric)} over its trials"

    def first_cells(t: Trial) -> list[str]:
        mine = [u for u in a.sweep.trials if u.mechanism == t.mechanism]
        return [mechanism_name(t.mechanism), f"{sum(u.state == 'finished' for u in mine)}/{len(mine)}", t.trial_id,
                spread_text(utilities(a, t.mechanism))]

    columns = ["mechanism", "finished", "best trial", spread]
    table = _trial_table(a, [t for m in shown if (t := best[m]) is not None], columns, first_cells)
    for m in names:
        if best[m] is None:  # keep every mechanism visible, even one whose trials all failed or learned nothing
            mine = [u for u in a.sweep.trials if u.mechanism == m]
            finished = sum(u.state == "finished" for u in mine)
            table.rows.append([mechanism_name(m), f"{finished}/{len(mine)}", "none learned" if finished else DASH]
                              + [DASH] * (len(table.columns) - 3))
    return table


def unfinished_table(a: Analysis) -> Table:
    order = {"infeasible": 0, "failed": 1, "early_stopped": 2}
    trials = sorted((t for t in a.sweep.trials if t.state != "finished"), key=lambda t: (order[t.state], t.trial_id))
    rows = [[t.trial_id, mechanism_name(t.mechanism), t.state.replace("_", " "), t.error or UNFINISHED_REASONS[t.state],
             params_text(t)] for t in trials]
    return Table(["trial", "mechanism", "state", "reason", "hyper-parameters"], rows)


SPLITS = ("train", "validation", "test")


def _split_shares(shares: Any) -> str:
    """`train / validation / test` shares of non-space characters, as percentages (a dash where one is missing)."""
    shares = shares if isinstance(shares, dict) else {}
    values = [number((shares.get(split) or {}).get("value")) for split in SPLITS]
    return " / ".join(DASH if v is None else f"{100 * v:.1f} %" for v in values)


def _policies(a: Analysis) -> dict[str, list[Trial]]:
    """The trials of each detector policy (one dataset × policy: they share its detection numbers)."""
    by_policy: dict[str, list[Trial]] = defaultdict(list)
    for t in a.sweep.trials:
        if t.detector:
            by_policy[str(t.detector.get("policy", "?"))].append(t)
    return by_policy


def detector_table(a: Analysis) -> Table:
    """Per detector policy: redacted token fraction, the share of each split's characters it masks beside the share
    gold spans cover (over-masking is what Redacted, JFT's phase 1 and CRT's public set lose for nothing), and token
    recall and missing rate with 95 % intervals when the data has gold spans."""
    rows = []
    for policy, trials in _policies(a).items():
        d = trials[0].detector
        fractions = [f for f in (number(t.detector.get("redacted_token_fraction")) for t in trials) if f is not None]
        rows.append([policy, str(len(trials)), fmt(sum(fractions) / len(fractions)) if fractions else DASH,
                     _split_shares(d.get("masked_char_share")), _split_shares(d.get("gold_char_share")),
                     fmt_rate(d.get("recall")), fmt_rate(d.get("missing_rate"))])
    return Table([POLICY_COLUMN, "trials", "redacted tokens", "masked chars: train / val / test",
                  "gold chars: train / val / test", "recall [95% CI]", "missing rate [95% CI]"],
                 rows, numeric={"trials", "redacted tokens", "recall [95% CI]", "missing rate [95% CI]"})


def recall_by_label_table(a: Analysis) -> Table:
    """Token recall of each policy per gold label, with 95 % intervals (data with labelled gold spans only)."""
    rows = [[policy, str(label), fmt_rate(rate)] for policy, trials in _policies(a).items()
            for label, rate in (trials[0].detector.get("recall_per_label") or {}).items()]
    return Table([POLICY_COLUMN, "gold label", "recall [95% CI]"], rows, numeric={"recall [95% CI]"},
                 note="Recall per gold label: the share of each label's gold tokens the policy masks.")


DETECTOR_TABLES: tuple[Callable[[Analysis], Table], ...] = (detector_table, recall_by_label_table)
"""The detector section's tables, in order (a table without rows is left out): a further view of the detector
is one more function of the analysis here."""


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
        bar = number(est.get("warn_below"))
        for kind, r in (est.get("per_type") or {}).items():
            low, high = number(r.get("low")), number(r.get("high"))
            half = None if low is None or high is None else (high - low) / 2
            rows.append([policy, str(kind), fmt_rate(r), DASH if half is None else f"±{half:.3f}",
                         f"{r.get('k', DASH)}/{r.get('n', DASH)}", DASH if bar is None else f"≥ {bar:g}",
                         _against(low, high, bar)])
    return Table([POLICY_COLUMN, "type", "estimated recall [95% CI]", "±", "found", "bar", "against the bar"], rows,
                 numeric={"estimated recall [95% CI]", "±", "found", "bar"})


def _against(low: float | None, high: float | None, bar: float | None) -> str:
    """Where a recall's 95 % interval lies against the bar: above it, below it, or across it (cannot tell)."""
    if low is None or high is None or bar is None:
        return DASH
    return "meets it" if low >= bar else "below it" if high < bar else "cannot tell"


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
    return Table([POLICY_COLUMN, "reviewed records", "type", "recall [95% CI]", "found"], rows,
                 numeric={"reviewed records", "recall [95% CI]", "found"})


def policy_types_notes(a: Analysis) -> list[str]:
    """One line per detector policy that declares its types: what it masks, what it masks without claiming it, and
    what it leaves in the clear."""
    notes, seen = [], set()
    for t in a.sweep.trials:
        types = (t.detector or {}).get("types")
        if not isinstance(types, dict) or types.get("policy") in seen:
            continue
        seen.add(types.get("policy"))
        clear = ", ".join(map(str, types.get("clear") or ())) or "nothing it knows of"
        partly = ", ".join(map(str, types.get("partly") or ()))
        unclaimed = (f"it masks {partly} where it finds them but does not claim them (recall below "
                     f"{types.get('claim_recall')} on held-out data); ") if partly else ""
        notes.append(f"{types.get('policy')} masks {', '.join(map(str, types.get('masks') or ()))}; "
                     f"{unclaimed}it leaves in the clear {clear}.")
    return notes


def charges_table(a: Analysis, charges: dict[str, dict]) -> Table:
    """The trials the sweep's cost counts: state, the ε each is charged, and whether spent steps or its whole plan."""
    trials = {t.trial_id: t for t in a.sweep.trials}
    rows = [[trial_id, mechanism_name(trials[trial_id].mechanism), trials[trial_id].state.replace("_", " "),
             format_epsilon(charge), str(charge.get("charged", DASH))] for trial_id, charge in charges.items()]
    return Table(["trial", "mechanism", "state", EPSILON_COLUMN, "charged"], rows)


def cost_table(cost: dict[str, dict]) -> Table:
    """The sweep's own privacy cost: one row per bound, with the conditions under which it holds, each distinct one
    said once above the table and referred to by its number."""
    conditions = list(dict.fromkeys(str(entry.get("conditions", DASH)) for entry in cost.values()))
    rows = [[name, format_epsilon(entry), fmt(entry.get("trials", entry.get("mean_trials"))),
             f"[{conditions.index(str(entry.get('conditions', DASH))) + 1}]"] for name, entry in cost.items()]
    note = " ".join(f"[{i}] {text}." for i, text in enumerate(conditions, 1)).replace("..", ".")
    return Table(["bound", EPSILON_COLUMN, "trials", "holds when"], rows, numeric={"trials"}, note=f"Holds when: {note}")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def trial_record(t: Trial, on_front: bool) -> dict[str, Any]:
    """One flat row: state, Pareto flag, hyper-parameters, ledger (its guarantee: formal, empirical estimate or none,
    and the formal bound beside an estimate; the ε target it was calibrated to, none for No-DP and Redacted),
    metrics, detector, canary shape, timings, versions."""
    p = t.privacy
    eps, formal = p.get("epsilon"), (p.get("formal") or {}).get("epsilon")
    return {
        "trial_id": t.trial_id, "state": t.state, "pareto": on_front, "mechanism": t.mechanism, "seed": t.seed,
        **{f"param.{k}": v for k, v in t.params.items()},
        **{f"mechanism.{k}": v for k, v in t.mechanism_settings.items()},
        **{f"metric.{k}": v for k, v in t.metrics.items()},
        "privacy.epsilon": float(eps) if isinstance(eps, (int, float)) else None,
        "privacy.target_epsilon": t.target_epsilon,
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
    control = [a.power.control] if a.power.control is not None else []
    frame = pd.DataFrame([trial_record(t, t.trial_id in front) for t in [*a.sweep.trials, *control]])
    return frame.apply(_arrow_safe)
