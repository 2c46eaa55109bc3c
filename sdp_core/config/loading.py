"""Reading config files: trials, search spaces and sweeps from YAML (with `--set` overrides), and validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from sdp_core.config.base import apply_overrides, apply_settings, parse_model
from sdp_core.config.sweep import SearchSpace, SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError
from sdp_core.io import read_yaml


def load_trial_config(path: str | Path | None, overrides: list[str] = ()) -> TrialConfig:
    data = read_yaml(path) if path else {}
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], str(path))
    return parse_model(TrialConfig, apply_overrides(data, list(overrides)), str(path) if path else "--set")


def load_search_space(ref: SearchSpace | str, relative_to: Path | None = None, where: str | None = None) -> SearchSpace:
    """An inline search space, or a file: looked up in `search_spaces/` beside the sweep's folder, then as a path."""
    if isinstance(ref, SearchSpace):
        return ref
    roots = [relative_to.parent / "search_spaces", relative_to] if relative_to is not None else []
    candidates = [root / ref for root in roots] + [Path("search_spaces") / ref, Path(ref)]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise ConfigError([f"search_space: file {ref!r} not found in search_spaces/"], where or str(relative_to or ref))
    return parse_model(SearchSpace, read_yaml(path), str(path))


def load_sweep_config(path: str | Path, overrides: list[str] = ()) -> SweepConfig:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], str(path))
    sweep = parse_model(SweepConfig, apply_overrides(data, list(overrides)), str(path))
    if sweep.experiments is None:
        load_search_space(sweep.search_space, Path(path).parent, str(path))  # a referenced file must exist and validate
    for arm in sweep.experiments or {}:  # every arm must be a valid trial
        try:
            arm_trial_config(sweep, arm, 0)
        except ConfigError as e:
            raise ConfigError([f"experiments.{arm}.set: {p}" for p in e.problems], str(path)) from None
    return sweep


def arm_trial_config(sweep: SweepConfig, arm: str, seed: int) -> TrialConfig:
    """The trial of one grid arm and seed: `base` with the arm's settings, named `<arm>-s<seed>`."""
    settings = {**sweep.experiments[arm].set, "name": f"{arm}-s{seed}", "seed": seed}
    return parse_model(TrialConfig, apply_settings(sweep.base.model_dump(mode="json"), settings))


def detect_kind(data: Any) -> str:
    """Which config a YAML mapping is, for `sdp-sweep validate`: sweep, search space or trial."""
    if isinstance(data, dict) and ("search_space" in data or "experiments" in data):
        return "sweep"
    if isinstance(data, dict) and set(data) == {"parameters"}:
        return "search_space"
    return "trial"


def validate_file(path: str | Path) -> str:
    """Validate any config file; returns its kind or raises ConfigError/UserError."""
    data = read_yaml(path)
    kind = detect_kind(data)
    if kind == "sweep":
        load_sweep_config(path)
    elif kind == "search_space":
        parse_model(SearchSpace, data, str(path))
    else:
        load_trial_config(path)
    return kind


def dump_yaml(model: BaseModel) -> str:
    return yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False)
