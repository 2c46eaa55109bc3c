"""Reading config files: trials, search spaces and sweeps from YAML (with `--set` overrides), each checked on its own.

What needs the sweep layer (its sampling rules, the data sizes every trial needs) is checked by `sweep.preflight`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import yaml
from pydantic import BaseModel

from sdp_core.config.base import (apply_overrides, apply_settings, did_you_mean, known_keys, parse_model,
                                  parse_override)
from sdp_core.config.metrics import METRICS, NEEDS, unknown_metric
from sdp_core.config.sweep import CONTROL_TRIAL, SearchSpace, SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError
from sdp_core.io import read_yaml


def load_trial_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrialConfig:
    data = read_yaml(path) if path else {}
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], str(path))
    check_overrides(TrialConfig, overrides)
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


def metric_problems(sweep: SweepConfig) -> list[str]:
    """Objectives and claims that name a metric no trial of this sweep produces: unknown names (with the closest
    known one), a metric of another task, or an attack's metric whose attack the base config turns off."""
    base, problems = sweep.base, []
    for i, o in enumerate(sweep.objectives):
        where = f"objectives.{i}.metric"
        unknown = unknown_metric(o.metric)
        metric = METRICS.get(o.metric)
        if unknown or metric is None:
            problems.append(f"{where}: {unknown}")
        elif metric.task and metric.task != base.model.task:
            problems.append(f"{where}: {o.metric} is measured on language models only; base.model.arch "
                            f"{base.model.arch} is a classifier")
        elif metric.needs == "exposure" and not (base.evaluation.exposure and base.data.canaries):
            problems.append(f"{where}: {o.metric} needs {NEEDS['exposure']}")
        elif metric.needs == "mia" and not base.evaluation.mia:
            problems.append(f"{where}: {o.metric} needs {NEEDS['mia']}")
    for i, c in enumerate(sweep.claims):  # `<guarantee>.<field>` names a further privacy report's number
        unknown = None if "." in c.metric else unknown_metric(c.metric)
        if unknown:
            problems.append(f"claims.{i}.metric: {unknown}")
    return problems


def setting_path_problem(path: str, config: type[TrialConfig | SweepConfig] = TrialConfig) -> str | None:
    """Why dotted `path` is no setting of a `config` (its first unknown part, with the closest known key of that
    block), or None. Mapping-valued settings (`detector.patterns.<name>`) take any key below them."""
    parts = path.split(".")
    for depth, part in enumerate(parts):
        known = known_keys(config, parts[:depth])
        if not known:
            return None
        if part not in known:
            block = ".".join(parts[:depth]) or ("a sweep" if config is SweepConfig else "a trial config")
            return f"no setting {part!r} in {block}{did_you_mean(part, known)}"
    return None


def check_overrides(config: type[TrialConfig | SweepConfig], overrides: Sequence[str]) -> None:
    """Raise a ConfigError that blames `--set` for an assignment to no setting of `config`; on a sweep, a trial's
    setting is named with the `base.` it needs."""
    problems = []
    for assignment in overrides:
        key = ".".join(parse_override(assignment)[0])
        problem = setting_path_problem(key, config)
        if problem and config is SweepConfig and not setting_path_problem(key, TrialConfig):
            problem = f"a sweep's trial settings are under base: --set base.{assignment.strip()}"
        if problem:
            problems.append(f"{assignment}: {problem}")
    if problems:
        raise ConfigError(problems, "--set")


def space_problems(space: SearchSpace) -> list[str]:
    return [f"search_space.{path}: {problem}" for path in space.parameters
            if (problem := setting_path_problem(path))]


def load_sweep_config(path: str | Path, overrides: Sequence[str] = ()) -> SweepConfig:
    """A sweep file with `--set` overrides, every problem found at once: its keys, its objectives' and claims'
    metrics, its search space's paths (a referenced file must exist) and its grid arms' settings."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], str(path))
    check_overrides(SweepConfig, overrides)
    sweep = parse_model(SweepConfig, apply_overrides(data, list(overrides)), str(path))
    problems = metric_problems(sweep)
    if sweep.experiments is None:
        problems += space_problems(load_search_space(sweep.search_space, Path(path).parent, str(path)))
    if sweep.control is not None:  # the control must be a valid trial too
        problems += [f"control.set.{key}: {p}" for key in sweep.control.set if (p := setting_path_problem(key))]
        try:
            if not problems:
                control_trial_config(sweep)
        except ConfigError as e:
            problems += [f"control.set: {p}" for p in e.problems]
    for arm, experiment in (sweep.experiments or {}).items():  # every arm must be a valid trial
        unknown = [f"experiments.{arm}.set.{key}: {p}" for key in experiment.set
                   if (p := setting_path_problem(key))]
        if unknown:
            problems += unknown
            continue
        try:
            arm_trial_config(sweep, arm, 0)
        except ConfigError as e:
            problems += [f"experiments.{arm}.set: {p}" for p in e.problems]
    if problems:
        raise ConfigError(problems, str(path))
    return sweep


def arm_trial_config(sweep: SweepConfig, arm: str, seed: int) -> TrialConfig:
    """The trial of one grid arm and seed: `base` with the arm's settings, named `<arm>-s<seed>`."""
    assert sweep.experiments is not None, "a grid sweep"
    settings = {**sweep.experiments[arm].set, "name": f"{arm}-s{seed}", "seed": seed}
    return parse_model(TrialConfig, apply_settings(sweep.base.model_dump(mode="json"), settings))


def control_trial_config(sweep: SweepConfig) -> TrialConfig:
    """The sweep's positive control (`SweepConfig.control`): `base` without DP, its `set` applied, named and seeded
    `control` and the sweep's seed."""
    assert sweep.control is not None, "a sweep with a control"
    settings = {"mechanism": {"name": "nodp"}, **sweep.control.set, "name": CONTROL_TRIAL, "seed": sweep.seed}
    return parse_model(TrialConfig, apply_settings(sweep.base.model_dump(mode="json"), settings))


def dump_yaml(model: BaseModel) -> str:
    return yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False)
