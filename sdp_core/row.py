"""One trial row: what a trial produces, what the sweep stores in `OUT/trials/<trial_id>.json`, what the report reads.

The trial fills the row (`run_trial`), the sweep adds its id, sampled parameters and objective values (`in_sweep`)
or writes the row of a trial that produced none (`stub`), and the report parses it back (`from_dict`) before
lifting the fields it may show (`report.load`: that whitelist is a privacy boundary). Plain data: no torch.
"""

from __future__ import annotations

import re

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sdp_core.learning import learned_nothing
from sdp_core.privacy.numbers import epsilon_number
from sdp_core.privacy.relations import qualifiers

TRIAL_STATES = ("finished", "early_stopped", "infeasible", "failed")

EPSILON = "epsilon"
"""The one objective that is not a metric: the ε the trial spent (its privacy report's)."""


def objective_value(metrics: dict, privacy: dict, name: str) -> Any:
    """A row's value of objective `name`: a metric, or `epsilon`."""
    return privacy.get(EPSILON) if name == EPSILON else metrics.get(name)


@dataclass(frozen=True)
class TrialRow:
    """One row of a sweep: config, metrics, privacy report (ledger), timings, versions. JSON-serialisable."""

    name: str
    state: str  # one of TRIAL_STATES
    seed: int
    config: dict
    metrics: dict = field(default_factory=dict)
    privacy: dict = field(default_factory=dict)
    ledger: dict = field(default_factory=dict)  # the saved ledger: `sdp-sweep epsilon --ledger` recomputes `privacy`
    mechanism: dict = field(default_factory=dict)
    phases: list[dict] = field(default_factory=list)
    canaries: dict | None = None
    attacks: dict = field(default_factory=dict)  # exposure, membership inference, empirical ε lower bound
    detector: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)  # parameters, trainable_parameters (LoRA: peft's count), trainable_share
    timings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    error: str | None = None
    # What the sweep adds (`in_sweep`)
    trial_id: str | None = None
    params: dict = field(default_factory=dict)  # dotted config path -> sampled value
    objectives: dict = field(default_factory=dict)  # objective name -> value

    @classmethod
    def stub(cls, config: dict, state: str, error: str | None, metrics: dict | None = None,
             ledger: dict | None = None) -> "TrialRow":
        """The row of a sweep trial that produced none (infeasible, failed, early-stopped), from the searcher's
        `config` ({trial_id, trial, ...}). `ledger` is the plan the trial published before training (its spent steps
        unknown), so the sweep's cost can charge it."""
        trial = config["trial"]
        return cls(name=trial.get("name", config["trial_id"]), state=state, seed=trial.get("seed", 0), config=trial,
                   metrics=metrics or {}, ledger=ledger or {}, error=error)

    @classmethod
    def from_dict(cls, data: Any) -> "TrialRow":
        """A row from its JSON; ValueError (one line) for anything that is not one."""
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        if data.get("state") not in TRIAL_STATES:
            raise ValueError(f"state {data.get('state')!r} (expected one of {', '.join(TRIAL_STATES)})")
        known = {f.name: f for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("config", "metrics", "privacy", "ledger", "mechanism", "attacks", "detector", "model", "timings",
                     "versions", "params", "objectives"):
            if values.get(name) is None:
                values.pop(name, None)
            elif not isinstance(values[name], dict):
                raise ValueError(f"`{name}` is not a mapping")
        config = values.get("config", {})
        values.setdefault("name", str(data.get("trial_id") or config.get("name", "")))
        values.setdefault("seed", config.get("seed"))
        values.setdefault("config", {})
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    def objective(self, name: str) -> Any:
        return objective_value(self.metrics, self.privacy, name)

    def in_sweep(self, trial_id: str, params: dict, objectives: list[str]) -> "TrialRow":
        """The row with what the sweep knows added: its id, sampled parameters and objective values."""
        return replace(self, trial_id=trial_id, params=params, objectives={m: self.objective(m) for m in objectives})

    def summary_line(self) -> str:
        p, m = self.privacy, self.metrics
        eps = p.get(EPSILON)
        privacy = (f"ε={epsilon_number(eps)} ({qualifiers(p)})"
                   if isinstance(eps, (int, float)) and eps != float("inf") else f"no DP guarantee ({p.get('notion')})")
        if self.mechanism.get("guarantee"):  # what the ε covers, where it is narrower than its notion says (Redacted)
            privacy += f": {self.mechanism['guarantee']}"
        utility = (f"val ppl {m['val_perplexity']:.2f}" if m.get("val_perplexity") else
                   f"val acc {m['val_accuracy']:.3f}" if m.get("val_accuracy") is not None else None)
        why = learned_nothing(m)  # flagged where a reader looks first: the model is no use whatever its ε
        return (f"{self.name}: {self.state}; {self.config['mechanism']['name']}; {privacy}; "
                f"{utility}; {self.timings.get('total', 0):.0f}s{f'; LEARNED NOTHING: {why}' if why else ''}"
                if utility else f"{self.name}: {self.state}")

    def not_covered_line(self) -> str:
        """What the trial released that its ε does not cover, for the console under its ε: each item of
        `privacy.not_covered` by its opening words (up to its first comma, colon or bracket), with where the whole
        list is."""
        items = [re.split(r"[,:(]", item, maxsplit=1)[0].strip()
                 for item in self.privacy.get("not_covered") or [] if isinstance(item, str)]
        return (f"not covered by ε: {'; '.join(items)} (each with its keys: result.json privacy.not_covered)"
                if items else "")

    def data_line(self, model_dir: Path | None = None) -> str:
        """What the trial trained on, for the console: records per split, secrets detected, the redacted share
        (of the training tokens) and where the model is."""
        d = self.detector
        records = d.get("records") or {}
        if not records:
            return ""
        text = (f"data: {records['train']} train / {records['validation']} validation / {records['test']} test "
                f"records; {d['secrets_detected']} secrets detected in {d['records_with_secrets']} training records "
                f"(policy {d['policy']}); redacted: {d['redacted_token_fraction']:.1%} of training tokens")
        return text + (f"; model: {model_dir}" if model_dir else "")
