"""How the report writes numbers, names and privacy guarantees, for the HTML page, `summary.md` and the statement.

Every ε is formatted by `format_epsilon`, which always names the notion, δ and accountant with it, and says when
it is only an empirical estimate (with the formal bound beside it) or a claim whose condition the data did not meet.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from typing import Any, Iterable

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.sweep import EPSILON_PARAM
from sdp_core.privacy.light_noise import ESTIMATE
from sdp_core.privacy.numbers import epsilon_number
from sdp_core.privacy.relations import RELATIONS
from sdp_core.report.load import Trial, number

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

AUDIT_METRICS = ("empirical_epsilon_lower_bound", "empirical_epsilon_per_record")  # the report's audit column
DASH = "—"


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


def fmt_rate(d: Any) -> str:
    """A rate with its interval, `{value, low, high, ...}`: `0.912 [0.894, 0.930]`."""
    values = [number(d.get(k)) for k in ("value", "low", "high")] if isinstance(d, dict) else [None]
    return DASH if None in values else "{:.3f} [{:.3f}, {:.3f}]".format(*values)


COVERS = {"DP": "every record, entirely", "SDP": "the tokens detector policy `{policy}` flags",
          "confidentiality": "the secrets detector policy `{policy}` flags, against the perfectly redacted data"}
"""What each notion's ε protects, in words."""


def covers(t: Trial) -> str:
    """What the trial's guarantee covers, in words (`every record, entirely`; nothing without a finite ε). A policy
    is named as its config names it (`customersim`), not by the members it expands to (the detector section lists
    what it masks)."""
    if t.epsilon is None:
        return "nothing"
    policy = (t.config.get("detector") or {}).get("policy") or t.detector.get("policy", "?")
    notion = t.notion
    return COVERS.get(notion, f"what {notion} protects").format(policy=policy)


def epsilon_meaning(trials: list[Trial], notions: bool = True) -> str:
    """What the trials' ε numbers mean together: `DP / SDP, δ = 1e-5, RDP` (their notions, δ and accountants)."""
    names = sorted({t.notion for t in trials}) if notions else []
    deltas = sorted({fmt_delta(t.privacy.get("delta")) for t in trials})
    accountants = sorted({fmt_accountant(t.privacy.get("accountant")) for t in trials})
    return ", ".join([*([" / ".join(names)] if names else []), f"δ = {' / '.join(deltas)}", " / ".join(accountants)])


def with_notion(mechanism: str, trials: list[Trial]) -> str:
    """`JFT (SDP)`: a mechanism's display name with the notions of its trials' ε (several joined by `/`)."""
    notions = sorted({t.notion for t in trials if t.mechanism == mechanism and t.privacy})
    return f"{mechanism_name(mechanism)} ({' / '.join(notions) or '?'})"


def notions_covered(trials: list[Trial]) -> str:
    """What each notion among `trials`' finite ε covers, in one clause: `DP covers every record, entirely; SDP covers
    the tokens detector policy `customersim` flags`."""
    first = {str(t.privacy.get("notion")): t for t in trials if t.epsilon is not None and t.privacy.get("notion")
             in COVERS}
    return "; ".join(f"{notion} covers {covers(first[notion])}" for notion in COVERS if notion in first)


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def privacy_qualifier(privacy: dict) -> str:
    """`SDP, replace-one neighbours, δ = 1e-5, RDP`: what an ε means (the relation where the report names one)."""
    relation = RELATIONS.get(privacy.get("neighbouring", ""))
    return ", ".join([privacy.get("notion", "?"), *([relation] if relation else []),
                      f"δ = {fmt_delta(privacy.get('delta'))}", fmt_accountant(privacy.get("accountant"))])


def format_epsilon(privacy: dict | None) -> str:
    """`ε = 3 (SDP, replace-one neighbours, δ = 1e-5, RDP)`; a trial without a finite ε has no DP guarantee.

    An empirical estimate reads `ε = 3 (SDP, δ = 1e-5, RDP), empirical estimate; formal bound ε = 41.2 (SDP, …)`;
    a claim whose condition the data did not meet (`holds: false`: CRT's condition on its policies, or noise
    reproducible from the published seed) reads `…, conditional: does not hold here (its condition)`.
    """
    if not privacy:
        return DASH
    eps = number(privacy.get("epsilon"))
    if eps is None:
        return "no DP guarantee"
    text = f"ε = {epsilon_number(eps)} ({privacy_qualifier(privacy)})"
    if privacy.get("guarantee") == ESTIMATE:
        formal = privacy.get("formal") or {}
        bound = format_epsilon(formal) if number(formal.get("epsilon")) is not None else "ε = ∞"
        return f"{text}, {ESTIMATE}; formal bound {bound}"
    if privacy.get("holds") is False:
        condition = privacy.get("condition")
        return f"{text}, conditional: does not hold here" + (f" ({condition})" if condition else "")
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


def params_text(trial: Trial) -> str:
    """The sampled hyper-parameters, by the last part of their dotted path: `learning_rate=0.0012, batch_size=32`
    (the mechanism and a ladder's ε have columns of their own)."""
    return ", ".join(f"{path.rsplit('.', 1)[-1]}={fmt_value(v)}" for path, v in trial.params.items()
                     if path not in ("mechanism.name", EPSILON_PARAM)) or DASH


def wall_time(trial: Trial) -> float | None:
    return trial.timings.get("total", trial.metric("train_seconds"))


def spread_text(values: list[float]) -> str:
    """`best 12.0 · median 20.1 · worst 58.0 (3 trials)`, best first; one trial has no spread."""
    if len(values) < 2:
        return f"{fmt(values[0])} (1 trial: no spread)" if values else DASH
    return (f"best {fmt(values[0])} · median {fmt(statistics.median(values))} · worst {fmt(values[-1])} "
            f"({len(values)} trials)")
