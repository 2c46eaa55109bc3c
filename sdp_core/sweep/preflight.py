"""Pre-flight: what no trial of a sweep could get past, found before Ray starts (`sdp-sweep run`, `validate`).

`resolve_sweep` loads a sweep file (`config.loading`) and checks it against the sweep layer's sampling rules
(`space.check_space`) and an adaptive budget's first look against its corrected level (`separation.check_looks`);
`preflight` then checks its trials against the data's sizes; `validate_file` runs what
applies to any config file.

A sweep's trials lie between the extremes of its search space (`space.end_configs`) or are its grid's arms. For each
distinct data block the split sizes are known from the config (generated sources: `n_train`, ...) or read from the
data (a file: its records, less the validation and test sets held out of it); every trial is then checked against
them: the canaries' insertions need as many training records (each copy goes into its own record), and an expected
batch larger than the training set would make every private step the whole data. The mechanisms' own needs
(Selective-DPSGD's LSTM, ...) are checked by the trial config itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

from sdp_core.config.base import parse_model, parse_override
from sdp_core.config.data import DataConfig
from sdp_core.config.loading import arm_trial_config, load_search_space, load_sweep_config, load_trial_config
from sdp_core.config.sweep import SearchSpace, SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.data.loaders import hf_local_path
from sdp_core.data.splits import load_splits
from sdp_core.errors import ConfigError, DataError
from sdp_core.io import read_yaml
from sdp_core.separation import check_looks
from sdp_core.sweep.space import check_space, end_configs, for_mechanisms

GENERATED = ("customersim", "clinic", "synthetic_classification")


@dataclass(frozen=True)
class SplitSizes:
    train: int
    validation: int
    test: int
    how: str  # where the sizes come from, for the problem line

    @classmethod
    def of(cls, data: DataConfig, elsewhere: bool) -> "SplitSizes | None":
        """The record counts of `data`'s splits before canaries. With `elsewhere` off, None for data that is not on
        this machine (a hub name, a missing file: a sweep meant for a cluster)."""
        if data.source in GENERATED:
            return cls(data.n_train, data.n_validation, data.n_test, "data.n_train")
        local = Path(data.location) if data.source == "file" else hf_local_path(data.location)
        here = local is not None and local.exists()
        if not (here or elsewhere):
            return None

        splits = load_splits(data, data.seed)
        total = len(splits.train) + len(splits.validation) + len(splits.test)
        held = (f"of {total} records, validation and test each {data.validation_fraction:.0%} held out"
                if data.source == "file" else "the dataset's train split")
        return cls(len(splits.train), len(splits.validation), len(splits.test), held)


def resolve_sweep(path: str | Path, overrides: Sequence[str] = ()) -> SweepConfig:
    """The sweep with overrides applied and its search space inlined (what `OUT/sweep.yaml` stores), after every
    check that needs no data: `load_sweep_config`, then every mechanism's trial at both ends of every range. A `--set
    mechanisms=[...]` drops the parameters of the mechanisms it leaves out."""
    cfg = load_sweep_config(path, overrides)
    if cfg.experiments is not None:  # a grid: every arm was validated as a trial on loading
        return cfg
    assert cfg.search_space is not None, "validated: a sweep searches or has a grid"
    space = load_search_space(cfg.search_space, Path(path).parent)
    if any(parse_override(o)[0] == ["mechanisms"] for o in overrides):
        space = for_mechanisms(space, cfg.mechanisms)
    check_space(cfg, space, str(path))
    check_looks(cfg, str(path))
    return cfg.model_copy(update={"search_space": space})


def sweep_trials(cfg: SweepConfig) -> list[tuple[str | None, TrialConfig]]:
    """The trials that bound the sweep, each with its grid arm: every arm, or every mechanism at both ends of every
    range (arm None)."""
    if cfg.experiments is not None:
        return [(arm, arm_trial_config(cfg, arm, 0)) for arm in cfg.experiments]
    assert isinstance(cfg.search_space, SearchSpace), "resolve the sweep first (its search space inlined)"
    return [(None, trial) for trial in end_configs(cfg, cfg.search_space)]


def sweep_setting(cfg: SweepConfig, arm: str | None, path: str) -> str:
    """Where in sweep `cfg` a trial's setting `path` is set, as a path to change: the search space's parameter, the
    grid arm's `set:` (when it sets `path` or a block holding it), else `base.`."""
    arm_sets = cfg.experiments[arm].set if arm is not None and cfg.experiments is not None else {}
    if any(path == key or path.startswith(key + ".") for key in arm_sets):
        return f"experiments.{arm}.set.{path}"
    if isinstance(cfg.search_space, SearchSpace) and path in cfg.search_space.parameters:
        return f"search_space.{path}"
    return f"base.{path}"


def trial_problems(trial: TrialConfig, sizes: SplitSizes, setting: Callable[[str], str]) -> list[str]:
    """Why `trial` cannot run on data of these sizes (one line each, naming the setting to change as `setting` gives
    its path)."""
    problems = []
    n = sizes.train
    if trial.data.canaries is not None:
        c = trial.data.canaries
        families = 2 if c.missed_format is not None else 1  # each family's copies go into records of their own
        if families * c.count * c.repeats > n:
            problems.append(f"{setting('data.canaries')}: {c.count} canaries x {c.repeats} repeats"
                            f"{' x 2 families' if families == 2 else ''} need {families * c.count * c.repeats} "
                            f"training records; the data has {n} ({sizes.how}): lower "
                            f"{setting('data.canaries.count')} or {setting('data.canaries.repeats')}, or use more data")
    if trial.training.batch_size > n:
        problems.append(f"{setting('training.batch_size')}: the expected batch of {trial.training.batch_size} is more "
                        f"than the {n} training records ({sizes.how}): every private step would be the whole data")
    return problems


def preflight(cfg: SweepConfig, where: str, elsewhere: bool = True) -> None:
    """Raise a ConfigError (one line per problem) for what no trial of the resolved sweep `cfg` could run with
    (or the DataError of unusable data). `elsewhere` off (`validate`) leaves out data not on this machine."""
    sizes: dict[str, SplitSizes | None] = {}
    problems: list[str] = []
    for arm, trial in sweep_trials(cfg):
        key = trial.data.model_dump_json()
        if key not in sizes:
            try:
                sizes[key] = SplitSizes.of(trial.data, elsewhere)
            except DataError as e:  # its advice names a trial's setting; a sweep sets it under base
                raise DataError(e.message.replace("--set data.", "--set base.data."), e.where) from None
        found = sizes[key]
        if found is not None:
            setting = partial(sweep_setting, cfg, arm)
            problems += [p for p in trial_problems(trial, found, setting) if p not in problems]
    if problems:
        raise ConfigError(problems, where)


def detect_kind(data: Any) -> str:
    """Which config a YAML mapping is, for `sdp-sweep validate`: sweep, search space or trial."""
    if isinstance(data, dict) and ("search_space" in data or "experiments" in data):
        return "sweep"
    if isinstance(data, dict) and set(data) == {"parameters"}:
        return "search_space"
    return "trial"


def validate_file(path: str | Path) -> str:
    """Validate any config file (a sweep also against the data on this machine); returns its kind or raises
    ConfigError/UserError."""
    data = read_yaml(path)
    kind = detect_kind(data)
    if kind == "sweep":
        preflight(resolve_sweep(path), str(path), elsewhere=False)
    elif kind == "search_space":
        parse_model(SearchSpace, data, str(path))
    else:
        load_trial_config(path)
    return kind
