"""Search spaces and sweeps: a search (Optuna over Ray Tune) or a fixed grid of arms × seeds with claims."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sdp_core.config.base import Strict, apply_settings
from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.trial import TrialConfig


class Distribution(Strict):
    """One searchable parameter: `uniform`/`loguniform` (low, high), `int` (low, high), or `choice` (values)."""

    type: Literal["uniform", "loguniform", "int", "choice"]
    low: float | None = None
    high: float | None = None
    values: list[Any] | None = None

    @property
    def ends(self) -> tuple[Any, Any]:
        """The least and the greatest value a sample takes: a range's low and high, a choice's first and last."""
        if self.type == "choice":
            assert self.values, "validated: a choice has values"
            return self.values[0], self.values[-1]
        assert self.low is not None and self.high is not None, "validated: a range has low and high"
        return self.low, self.high

    @model_validator(mode="after")
    def _bounds(self) -> "Distribution":
        if self.type == "choice":
            if not self.values:
                raise ValueError("choice needs a non-empty `values` list")
        else:
            if self.low is None or self.high is None:
                raise ValueError(f"{self.type} needs `low` and `high`")
            if self.low > self.high:
                raise ValueError("low must be <= high")
            if self.type == "loguniform" and self.low <= 0:
                raise ValueError("loguniform needs low > 0")
        return self


class SearchSpace(Strict):
    """Parameters keyed by their dotted path in the trial config, e.g. `training.learning_rate`."""

    parameters: dict[str, Distribution]

    @field_validator("parameters")
    @classmethod
    def _not_empty(cls, v: dict[str, Distribution]) -> dict[str, Distribution]:
        if not v:
            raise ValueError("search space is empty")
        return v


class Objective(Strict):
    metric: str
    mode: Literal["min", "max"]


PRIVACY_OR_COST = ("exposure", "mia", "epsilon", "empirical_epsilon", "train_seconds", "wall_seconds", "steps",
                   "tokens")
"""Metric-name prefixes that are not utility: the report's y axis is the first objective that is utility."""


def utility_objective(objectives: list[Objective]) -> Objective:
    """The objective mechanisms are ranked by: the first that is utility (not privacy or cost)."""
    return next((o for o in objectives if not o.metric.startswith(PRIVACY_OR_COST)),
                Objective(metric="val_perplexity", mode="min"))


def _distinct_seeds(v: list[int] | None) -> list[int] | None:
    if v is not None and (not v or len(set(v)) != len(v)):
        raise ValueError("seeds must be a non-empty list of distinct seeds")
    return v


class Experiment(Strict):
    """One arm of a fixed-grid sweep: the base trial with `set` applied (dotted paths, as `--set`), once per seed."""

    set: dict[str, Any] = Field(default_factory=dict, description="dotted path -> value, applied to `base`")
    seeds: list[int] | None = Field(None, description="this arm's seeds; default: the sweep's `seeds`")

    _seeds = field_validator("seeds")(_distinct_seeds)

    @field_validator("set")
    @classmethod
    def _not_identity(cls, v: dict[str, Any]) -> dict[str, Any]:
        if {"seed", "name"} & set(v):
            raise ValueError("`seed` and `name` come from the arm and its seeds, not from `set`")
        return v


CONTROL_TRIAL = "control"
"""The trial id of a sweep's positive control (`SweepConfig.control`)."""

# What a control may not change: it must see the sweep's data (records, detection, tokenizer) and canaries.
_SHARED_DATA = ("data", "detector", "tokenizer", "seed", "name", "mechanism")


class ControlConfig(Strict):
    """The privacy axis's positive control: `base` trained without DP (mechanism `nodp`) on the sweep's data and
    canaries, with `set` applied (a training budget at which an unprotected model memorises its canaries). It is
    trial `control`, kept out of the front and the ranking; the report states first whether its inserted canaries
    outrank the held-out ones (one-sided Mann-Whitney p < 0.01), else it reads every empirical privacy number of
    the sweep as "no power: cannot tell"."""

    set: dict[str, Any] = Field(default_factory=dict, description="dotted path -> value, applied to `base` (e.g. "
                                "`training.max_tokens`); not data, detector, tokenizer, seed, name or mechanism")

    @field_validator("set")
    @classmethod
    def _same_data(cls, v: dict[str, Any]) -> dict[str, Any]:
        changed = next((k for k in v if k.split(".")[0] in _SHARED_DATA), None)
        if changed is not None:
            raise ValueError(f"{changed}: a control trains without DP on the sweep's own data, seed and canaries; "
                             "set its budget (training.*) only")
        return v


class Claim(Strict):
    """A paper's claim as an ordering of two arms' mean `metric` over their seeds (`kind: less`), or a trend of
    the mean along a list of arms (`kind: increasing`). Evaluated by the report (sdp_core.report.findings).

    `less` holds when mean(higher) − mean(lower) > `by` (and, with `ratio`, when mean(lower) ≤ ratio·mean(higher));
    `by` < 0 allows the lower arm to be up to |by| above (`reaches the same level`).
    """

    text: str
    kind: Literal["less", "increasing"] = "less"
    metric: str = Field(description="a metric of the rows, or `<guarantee>.<field>` of a further privacy report "
                        "(`bayesian_confidentiality.epsilon`)")
    lower: str | None = None
    higher: str | None = None
    by: float = 0.0
    ratio: float | None = Field(None, gt=0)
    arms: list[str] = Field(default_factory=list, description="for `increasing`: arms in order of the x axis")

    @model_validator(mode="after")
    def _arms_for_kind(self) -> "Claim":
        if self.kind == "less" and not (self.lower and self.higher):
            raise ValueError("kind less needs `lower` and `higher` arms")
        if self.kind == "increasing" and len(self.arms) < 2:
            raise ValueError("kind increasing needs at least two `arms`")
        return self

    def arm_names(self) -> list[str]:
        if self.kind == "less":
            assert self.lower is not None and self.higher is not None, "validated: kind less names both arms"
            return [self.lower, self.higher]
        return list(self.arms)


EPSILON_PARAM = "privacy.target_epsilon"
"""The trial setting a sweep's ε ladder sets: recorded as a trial's parameter, never sampled."""


@dataclass(frozen=True)
class Cell:
    """One budget of a search: a mechanism at one ε of the sweep's ladder (`epsilon` None: the base's target, when
    the sweep has no ladder or the mechanism's noise is not calibrated to one). Each cell has a study of its own and
    the same number of trials."""

    mechanism: str
    epsilon: float | None = None

    @property
    def name(self) -> str:
        """`dpsgd`, or `dpsgd@eps3` at ε = 3 of a ladder: its study's name ends with it."""
        return self.mechanism if self.epsilon is None else f"{self.mechanism}@eps{self.epsilon:g}"


def _ladder(data: dict) -> list | None:
    """The ε ladder a sweep's raw data gives, as `target_epsilons` or as a list at `base.privacy.target_epsilon`."""
    base = data.get("base")
    privacy = base.get("privacy") if isinstance(base, dict) else None
    target = privacy.get("target_epsilon") if isinstance(privacy, dict) else None
    return target if isinstance(target, list) else data.get("target_epsilons")


def _cell_count(data: dict) -> int:
    """How many cells (`SweepConfig.cells`) a sweep's raw data has: a calibrated mechanism counts once per ε."""
    ladder = _ladder(data)
    rungs = len(ladder) if isinstance(ladder, list) and ladder else 1
    names = data.get("mechanisms") or ["dpsgd"]
    return sum(rungs if getattr(MECHANISM_SETTINGS.get(m), "calibrated", True) else 1 for m in names)


class AdaptiveBudget(Strict):
    """More trials for a ranking its planned trials cannot tell: after each look, every ranking family (the
    mechanisms of one notion at one ε, `separation.families`) whose rank tests pass no step gets `step` more trials
    per mechanism, until one passes or each has `max_trials_per_mechanism` (the cap, the last look). The looks'
    levels are corrected for their number (`separation.look_level`)."""

    max_trials_per_mechanism: int = Field(ge=2, description="the cap: a ranked mechanism's trials at its last look")
    step: int = Field(1, ge=1, description="trials added per mechanism of a tied family at each further look")


class ResourcesConfig(Strict):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)


class SweepConfig(Strict):
    name: str
    seed: int = 0
    base: TrialConfig = Field(default_factory=TrialConfig, description="settings every trial starts from")
    mechanisms: list[str] = Field(default_factory=lambda: ["dpsgd"])
    objectives: list[Objective] = Field(
        default_factory=lambda: [Objective(metric="val_perplexity", mode="min"), Objective(metric="exposure_mean", mode="min")]
    )
    search_space: SearchSpace | str | None = Field(None, description="inline parameters or a file in search_spaces/")
    experiments: dict[str, Experiment] | None = Field(
        None, description="a fixed grid instead of a search: named arms × seeds (findings, controlled comparisons)")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], description="seeds of every experiment arm")
    claims: list[Claim] = Field(default_factory=list, description="orderings of arms the report checks")
    num_trials: int = Field(8, ge=1, description="a search's trials, divided evenly over its mechanisms")
    trials_per_mechanism: int | None = Field(
        None, ge=1, description="a search's trials of each mechanism, at each ε of a ladder (then num_trials = this × "
        "cells): every (mechanism, ε) gets the same budget and a study of its own")
    target_epsilons: list[float] | None = Field(
        None, description="an ε ladder: the search runs at every target, each (mechanism, ε) with its own study and "
        "the same number of trials (No-DP and Redacted, calibrated to no ε, once); written "
        "`privacy.target_epsilon: [1, 3, 8]` in `base`, whose own target is then the first")
    adaptive: AdaptiveBudget | None = Field(
        None, description="add trials to a ranking its planned trials do not separate, up to a cap (a search only)")
    concurrency: int = Field(1, ge=1)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    early_stopping: bool = Field(False, description="ASHA on the held-out validation loss")
    report_interval: float = Field(5.0, ge=0, description="seconds between a trial's progress reports to Ray Tune")
    prepare_processes: int | None = Field(
        None, ge=1, description="the most Ray Data actors (one CPU each) that detect secrets in the sweep's one-time "
        "data preparation, before its trials start (default: as many as the cluster's CPUs allow)")
    control: ControlConfig | None = Field(
        None, description="a No-DP positive control on the same data and canaries (trial `control`, out of the front "
        "and the ranking): the report leads its privacy section with whether it memorised, and without that reads "
        "every empirical privacy number as no power")
    keep_models: Literal["front", "all", "none"] = Field(
        "front", description="which trials keep their model under OUT/models/ (DP noise is secret: a model cannot "
        "be re-trained from its config): the Pareto front's, every trial's, or none")

    _seeds = field_validator("seeds")(_distinct_seeds)

    @model_validator(mode="before")
    @classmethod
    def _grid_derived(cls, data: Any) -> Any:
        """A grid sweep's trial count and mechanisms follow from its arms; they are not set by hand."""
        if not (isinstance(data, dict) and isinstance(data.get("experiments"), dict)):
            return data
        try:
            arms = [a if isinstance(a, dict) else {} for a in data["experiments"].values()]
            seeds = data.get("seeds", [0, 1, 2])
            base: dict = data["base"] if isinstance(data.get("base"), dict) else {}
            names = [str((apply_settings(base, a["set"]) if isinstance(a.get("set"), dict) else base)
                         .get("mechanism", {}).get("name", "dpsgd")) for a in arms]
            count = sum(len(a.get("seeds") or seeds) for a in arms)
        except (AttributeError, TypeError):  # malformed arms: the field validators report them, one line each
            return data
        derived: dict[str, Any] = {"num_trials": max(count, 1), "mechanisms": list(dict.fromkeys(names)) or ["dpsgd"],
                   "search_space": None}
        # A stored sweep.yaml repeats the derived values; a hand-written one that sets them otherwise is wrong.
        same = lambda k: (set(data[k]) == set(derived[k]) if k == "mechanisms" and isinstance(data[k], list)  # noqa: E731
                          else data[k] == derived[k])
        given = next((k for k in derived if k in data and not same(k)), None)
        if given:
            raise ValueError(f"{given}: not used with `experiments` (a grid sweep runs every arm × seed)")
        return {**data, **derived}

    @model_validator(mode="before")
    @classmethod
    def _per_mechanism(cls, data: Any) -> Any:
        """`trials_per_mechanism` sets a search's `num_trials`, per cell (a stored sweep.yaml repeats both); a list at
        `base.privacy.target_epsilon` is the ladder `target_epsilons`, the base keeping its first target."""
        if not isinstance(data, dict):
            return data
        ladder = _ladder(data)
        if isinstance(ladder, list) and data.get("target_epsilons") is None:
            base = data["base"]
            data = {**data, "target_epsilons": ladder,
                    "base": {**base, "privacy": {**base["privacy"], "target_epsilon": (ladder or [None])[0]}}}
        if not (isinstance(data.get("trials_per_mechanism"), int) and isinstance(data.get("mechanisms", []), list)
                and data.get("experiments") is None):
            return data
        cells = _cell_count(data)
        total = data["trials_per_mechanism"] * cells
        if "num_trials" in data and data["num_trials"] != total:
            what = "mechanisms" if cells == len(data.get("mechanisms") or ["dpsgd"]) else "(mechanism, ε) cells"
            raise ValueError(f"num_trials: {data['num_trials']} is not trials_per_mechanism × {what} = {total} "
                             "(set one of them)")
        return {**data, "num_trials": total}

    @property
    def cells(self) -> list[Cell]:
        """The search's budgets: each mechanism at each ε of the ladder (once when it has none, or for a mechanism
        calibrated to no ε), mechanism by mechanism."""
        ladder: list[float | None] = [*self.target_epsilons] if self.target_epsilons else [None]
        return [Cell(m, e) for m in self.mechanisms for e in (ladder if MECHANISM_SETTINGS[m].calibrated else [None])]

    @property
    def trial_count(self) -> int:
        """Every trial the sweep runs: `num_trials` and its positive control."""
        return self.num_trials + (self.control is not None)

    @property
    def per_cell(self) -> int:
        """Trials of each cell (each mechanism, at each ε of a ladder) in a search."""
        return self.num_trials // len(self.cells)

    @property
    def looks(self) -> list[int]:
        """The trials per ranked mechanism at each planned look of its rank tests: the planned `per_cell`, then every
        `adaptive.step` more up to the cap (the last look, which a shorter step reaches); one look without `adaptive`."""
        if self.adaptive is None:
            return [self.per_cell]
        cap, step = self.adaptive.max_trials_per_mechanism, self.adaptive.step
        return [*range(self.per_cell, cap, step), cap]

    @field_validator("target_epsilons")
    @classmethod
    def _rungs(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or len(set(v)) != len(v) or not all(0 < e < math.inf for e in v)):
            raise ValueError("an ε ladder is a list of distinct finite targets > 0, e.g. [1, 3, 8]")
        return sorted(v) if v is not None else None

    @model_validator(mode="after")
    def _search_or_grid(self) -> "SweepConfig":
        if (self.search_space is None) == (self.experiments is None):
            raise ValueError("a sweep needs exactly one of `search_space` (a search) and `experiments` (a grid)")
        if self.experiments is not None:
            if not self.experiments:
                raise ValueError("experiments: at least one arm is needed")
            if self.early_stopping:
                raise ValueError("early_stopping: a grid runs every arm to the end (its claims compare whole runs)")
            bad = next((n for n in self.experiments if not n.replace("_", "").isalnum()), None)
            if bad is not None:
                raise ValueError(f"experiments: arm name {bad!r} must be letters, digits and _")
        if self.experiments is None and self.num_trials % len(self.cells):
            what = (f"{len(self.mechanisms)} mechanisms" if self.target_epsilons is None
                    else f"{len(self.cells)} (mechanism, ε) cells")
            raise ValueError(f"num_trials: {self.num_trials} trials do not divide evenly over {what} (each gets the "
                             "same budget): use a multiple, or trials_per_mechanism")
        if self.experiments is not None and self.target_epsilons is not None:
            raise ValueError("target_epsilons: a grid sets each arm's ε in its `set:`, not with a ladder")
        if self.experiments is not None and self.trials_per_mechanism is not None:
            raise ValueError("trials_per_mechanism: not used with `experiments` (a grid sweep runs every arm × seed)")
        if self.adaptive is not None and self.experiments is not None:
            raise ValueError("adaptive: a grid runs its arms × seeds; only a search adds trials")
        if self.adaptive is not None and self.adaptive.max_trials_per_mechanism <= self.per_cell:
            raise ValueError(f"adaptive.max_trials_per_mechanism: {self.adaptive.max_trials_per_mechanism} adds "
                             f"nothing to the {self.per_cell} planned trials per mechanism (the cap is above them)")
        if self.control is not None and not (self.base.data.canaries and self.base.evaluation.exposure):
            raise ValueError("control: a positive control is measured by canary exposure; set base.data.canaries "
                             "(and keep base.evaluation.exposure)")
        unknown = [a for c in self.claims for a in c.arm_names() if a not in (self.experiments or {})]
        if unknown:
            raise ValueError(f"claims: arm {unknown[0]!r} is not in experiments")
        return self

    @field_validator("mechanisms")
    @classmethod
    def _known_mechanisms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one mechanism is needed")
        unknown = [m for m in v if m not in MECHANISM_SETTINGS]
        if unknown:
            raise ValueError(f"unknown mechanism {unknown[0]!r} (known: {', '.join(MECHANISM_SETTINGS)})")
        return v


def sweep_number(sweep: SweepConfig, cell: Cell, number: int) -> int:
    """The sweep's trial number of trial `number` in `cell`'s study: trials of the cells interleave."""
    return number * len(sweep.cells) + sweep.cells.index(cell)


def trial_id(number: int) -> str:
    """The id of sweep trial `number` (n·M + i: trial n of mechanism i of M) in file names and tables: `trial_0007`."""
    return f"trial_{number:04d}"
