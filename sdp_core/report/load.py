"""Read a sweep folder: `sweep.yaml`, `trials/<trial_id>.json` and, when present, `sweep_cost.json`.

Only the fields the report uses are lifted out of each trial row (a whitelist), so anything else a row holds
(for instance canary values or detector examples added by a later version) can never reach a report file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdp_core.config import parse_model
from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.sweep import Objective, SweepConfig
from sdp_core.errors import UserError
from sdp_core.io import read_yaml
from sdp_core.privacy.light_noise import ESTIMATE, REAL_SAMPLE_RATES
from sdp_core.row import TrialRow, objective_value

CANARY_FIELDS = ("format", "space_size", "count", "repeats", "missed_by_detector", "family", "missed")
"""What a report may say about canaries: their shape, never their values."""
REPORT_FIELDS = ("epsilon", "delta", "notion", "accountant")
RELATION_FIELD = "neighbouring"  # lifted with them when present (a row that predates relations has none)
QUALIFIER_FIELDS = ("guarantee", "formal", "holds", "condition")
"""What qualifies a privacy report, lifted with it when present: an empirical estimate with its formal bound, or a
claim whose condition (`holds`) the data did not meet."""
LEDGER_FIELDS = ("format", "notion", "delta", "accountant", "plan", "spent_steps", REAL_SAMPLE_RATES)
AUDIT_WORDS = ("notion", "neighbouring", "accountant", "method")  # what its bound means; every other field is a number
AUDIT_FIELDS = ("epsilon_lower_bound", "epsilon_lower_bound_per_record", "ceiling", "confidence", "delta",
                *AUDIT_WORDS, "canaries", "members", "nonmembers", "guesses", "correct", "group_size")
"""The one-run ε audit of a trial (`attacks.empirical_epsilon`): counts and bounds, never a canary."""


def number(value: Any) -> float | None:
    """A finite float, or None for anything else (missing, null, NaN, ±inf, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Trial:
    """One trial row, as the report sees it."""

    trial_id: str
    state: str
    seed: int | None
    mechanism: str
    params: dict[str, Any]  # dotted config path -> sampled value
    metrics: dict[str, float]  # finite numbers only
    privacy: dict[str, Any]  # epsilon, delta, notion, accountant, events (+ QUALIFIER_FIELDS)
    config: dict[str, Any]  # the full, re-runnable trial config
    detector: dict[str, Any]
    canaries: dict[str, Any] | None  # CANARY_FIELDS only
    other_guarantees: dict[str, dict]  # further privacy reports of the mechanism (CRT's Bayesian confidentiality)
    timings: dict[str, float]
    versions: dict[str, str]
    error: str | None
    ledger: dict[str, Any] = field(default_factory=dict)  # LEDGER_FIELDS: what a stopped or failed trial planned
    audit: dict[str, Any] = field(default_factory=dict)  # AUDIT_FIELDS of its empirical ε lower bound

    def metric(self, name: str) -> float | None:
        """A measured metric; `epsilon` is the ε the trial spent (so it can be an axis or an objective)."""
        return number(objective_value(self.metrics, self.privacy, name))

    def interval(self, name: str) -> tuple[float, float] | None:
        """The 95 % interval of a metric measured with one (`<name>_low`, `<name>_high`: mean canary exposure)."""
        low, high = self.metrics.get(f"{name}_low"), self.metrics.get(f"{name}_high")
        return (low, high) if low is not None and high is not None else None

    @property
    def mechanism_settings(self) -> dict[str, Any]:
        """The mechanism's own hyper-parameters (config.mechanism without its name)."""
        return {k: v for k, v in (self.config.get("mechanism") or {}).items() if k != "name"}

    @property
    def epsilon(self) -> float | None:
        """The trial's finite ε, or None (no guarantee, or nothing was trained)."""
        return number(self.privacy.get("epsilon"))

    @property
    def target_epsilon(self) -> float | None:
        """The ε target the trial was calibrated to (its config's; over an ε ladder, its rung); None for a mechanism
        calibrated to none (No-DP, Redacted), whose trials do not depend on ε."""
        settings = MECHANISM_SETTINGS.get(self.mechanism)
        if settings is not None and not settings.calibrated:
            return None
        return number((self.config.get("privacy") or {}).get("target_epsilon"))

    @property
    def formal_epsilon(self) -> float | None:
        """The trial's formal ε bound: its ε, or for an empirical estimate the formal bound reported beside it (None:
        no finite bound, or one that does not hold: `holds: false`)."""
        if self.privacy.get("holds") is False:
            return None
        if self.privacy.get("guarantee") == ESTIMATE:
            return number((self.privacy.get("formal") or {}).get("epsilon"))
        return self.epsilon

    @property
    def notion(self) -> str:
        """The notion its ε states (`DP`, `SDP`, `confidentiality`, `none`): reports rank and compare within one."""
        return str(self.privacy.get("notion"))

    @property
    def guaranteed(self) -> bool:
        """A formal guarantee: a finite ε from at least one noised step, not an empirical estimate (JFT's light
        noise), and not one that does not hold (`holds: false`: noise reproducible from the published seed).
        (Redacted's ε = 0 rests on a perfect detector; No-DP has no ε.)"""
        return (self.epsilon is not None and self.privacy.get("guarantee") != ESTIMATE
                and self.privacy.get("holds") is not False) and any(
            e.get("steps", 0) > 0 and e.get("sample_rate", 0) > 0 and e.get("noise_multiplier", 0) > 0
            for e in self.privacy.get("events", []))

    def eligible(self, objectives: list[Objective]) -> bool:
        """May be on the Pareto front: finished (never stopped early) with every objective measured."""
        return self.state == "finished" and all(self.metric(o.metric) is not None for o in objectives)


@dataclass(frozen=True)
class Sweep:
    directory: Path
    config: SweepConfig
    trials: list[Trial]
    cost: dict[str, Any] | None  # sweep_cost.json, when the sweep wrote it


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError) as e:
        raise UserError(f"cannot read results file ({type(e).__name__})", str(path)) from None
    except json.JSONDecodeError as e:
        raise UserError(f"corrupt results file: line {e.lineno}: {e.msg}", str(path)) from None


def other_guarantees(details: dict) -> dict[str, dict]:
    """The privacy reports among a mechanism's details, by name: only their REPORT_FIELDS, relation and
    QUALIFIER_FIELDS."""
    return {name: {f: value[f] for f in (*REPORT_FIELDS, RELATION_FIELD, *QUALIFIER_FIELDS) if f in value}
            for name, value in details.items() if isinstance(value, dict) and all(f in value for f in REPORT_FIELDS)}


def parse_trial(data: Any, path: Path) -> Trial:
    """A trial row from its JSON (`TrialRow.from_dict`), lifted to what a report may show; a row that is not one is
    a corrupt file."""
    try:
        row = TrialRow.from_dict(data)
    except ValueError as e:
        raise UserError(f"corrupt results file: {e}", str(path)) from None
    # Metrics first, then the objective values the sweep recorded (early-stopped trials may only have those).
    values = {**row.objectives, **row.metrics}
    audit = row.attacks.get("empirical_epsilon")
    if audit is not None and not isinstance(audit, dict):
        raise UserError("corrupt results file: `attacks.empirical_epsilon` is not a mapping", str(path))
    return Trial(
        trial_id=str(row.trial_id or path.stem),
        state=row.state,
        seed=row.seed if isinstance(row.seed, int) else None,
        mechanism=str((row.config.get("mechanism") or {}).get("name", "unknown")),
        params=row.params,
        metrics={k: v for k, v in ((k, number(v)) for k, v in values.items()) if v is not None},
        privacy=row.privacy,
        ledger={k: v for k, v in row.ledger.items() if k in LEDGER_FIELDS},
        config=row.config,
        detector=row.detector,
        canaries={k: row.canaries[k] for k in CANARY_FIELDS if k in row.canaries}
        if isinstance(row.canaries, dict) else None,
        other_guarantees=other_guarantees(row.mechanism),
        timings={k: v for k, v in row.timings.items() if number(v) is not None},
        versions={k: str(v) for k, v in row.versions.items()},
        error=str(row.error) if row.error else None,
        audit={k: v for k, v in (audit or {}).items()
               if k in AUDIT_FIELDS and (number(v) is not None or (k in AUDIT_WORDS and isinstance(v, str)))},
    )


def load_sweep(sweep_dir: str | Path) -> Sweep:
    """Read every stored result of a sweep; a missing or corrupt file is a one-line UserError."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserError("no such sweep folder", str(sweep_dir))
    config_path = sweep_dir / "sweep.yaml"
    if not config_path.is_file():
        raise UserError("no sweep.yaml: not a sweep folder", str(sweep_dir))
    config = parse_model(SweepConfig, read_yaml(config_path), str(config_path))
    files = sorted((sweep_dir / "trials").glob("*.json"))
    if not files:
        raise UserError("no trial results (trials/*.json): nothing to report", str(sweep_dir))
    trials = [parse_trial(_read_json(f), f) for f in files]
    ids = [t.trial_id for t in trials]
    if len(set(ids)) != len(ids):
        raise UserError("two results files hold the same trial_id", str(sweep_dir / "trials"))
    cost_path = sweep_dir / "sweep_cost.json"
    cost = _read_json(cost_path) if cost_path.is_file() else None
    if cost is not None and not isinstance(cost, dict):
        raise UserError("corrupt sweep cost file: expected a JSON object", str(cost_path))
    return Sweep(sweep_dir, config, trials, cost)
