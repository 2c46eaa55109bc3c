"""A sweep's search space as an Optuna define-by-run function, and the trial config each sample becomes.

Parameters are dotted paths into a trial config (`training.learning_rate`). Each cell of a sweep (a mechanism, at
each ε of an ε ladder: `SweepConfig.cells`) has a study of its own (never a sampled categorical, whose share of
trials would follow the other cells' results); a parameter under `mechanism.` is sampled only for a mechanism that
has that field (`mechanism.w` only for atdp). A trial of several mechanisms records its mechanism as the parameter
`mechanism.name`, and a trial of a ladder its ε as `privacy.target_epsilon`. Study trial n of the sweep's i-th of
C cells is sweep trial n·C + i (`sweep_number`), with seed `sweep.seed + n·C + i` and name `<sweep>-trial_<n·C + i>`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdp_core.config import MECHANISM_SETTINGS, apply_settings, parse_model
from sdp_core.config.sweep import EPSILON_PARAM, Cell, Distribution, SearchSpace, SweepConfig, trial_id
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError

if TYPE_CHECKING:
    import optuna

MECHANISM_PARAM = "mechanism.name"


def mechanism_fields(mechanism: str) -> set[str]:
    """A registered mechanism's own settings: the `mechanism.<field>` paths a search space may sample for it."""
    return set(MECHANISM_SETTINGS[mechanism].model_fields) - {"name"}


def applies_to(path: str, mechanism: str) -> bool:
    """Whether parameter `path` is sampled for trials of `mechanism`."""
    if not path.startswith("mechanism."):
        return True
    return path.split(".", 2)[1] in mechanism_fields(mechanism)


def _suggest(trial: optuna.Trial, path: str, d: Distribution) -> Any:
    if d.type == "choice":
        return trial.suggest_categorical(path, d.values)
    low, high = d.ends
    if d.type == "int":
        return trial.suggest_int(path, int(low), int(high))
    return trial.suggest_float(path, low, high, log=d.type == "loguniform")


def sample(trial: optuna.Trial, space: SearchSpace, cell: Cell, mechanisms: list[str]) -> dict[str, Any]:
    """Define-by-run, in `cell`'s own study: the parameters that apply to its mechanism, and, recorded, not sampled,
    `mechanism.name` when the sweep has several mechanisms and `privacy.target_epsilon` at a rung of a ladder."""
    params: dict[str, Any] = {MECHANISM_PARAM: cell.mechanism} if len(mechanisms) > 1 else {}
    if cell.epsilon is not None:
        params[EPSILON_PARAM] = cell.epsilon
    for path, distribution in space.parameters.items():
        if applies_to(path, cell.mechanism):
            params[path] = _suggest(trial, path, distribution)
    return params


def trial_config_dict(sweep: SweepConfig, params: dict[str, Any], number: int) -> dict:
    """The trial config (not yet validated) of sample `params`: `base`, its mechanism, the sampled values.

    The mechanism block is `{name: chosen}`, or the base's own block when the base already names that mechanism
    (so a sweep can fix, e.g., JFT's `phase1_mode` in `base`).
    """
    mechanism = params.get(MECHANISM_PARAM, sweep.mechanisms[0])
    data = sweep.base.model_dump(mode="json")
    if data["mechanism"]["name"] != mechanism:
        data["mechanism"] = {"name": mechanism}
    data = apply_settings(data, {path: value for path, value in params.items() if path != MECHANISM_PARAM})
    data["name"] = f"{sweep.name}-{trial_id(number)}"
    data["seed"] = sweep.seed + number
    return data


def for_mechanisms(space: SearchSpace, mechanisms: list[str]) -> SearchSpace:
    """`space` without the `mechanism.` parameters that none of `mechanisms` has: `--set mechanisms=[...]` that
    leaves a mechanism out leaves its settings out with it."""
    kept = {path: d for path, d in space.parameters.items() if any(applies_to(path, m) for m in mechanisms)}
    return space.model_copy(update={"parameters": kept})


def check_space(sweep: SweepConfig, space: SearchSpace, where: str) -> None:
    """Reject, before anything runs, a space whose paths or bounds no trial config accepts.

    Every mechanism's trial is built at the low and at the high end of every range (first and last choice)
    and validated; a `mechanism.` path must belong to at least one of the sweep's mechanisms.
    """
    problems = []
    for path, d in space.parameters.items():
        if path == MECHANISM_PARAM:
            problems.append(f"search_space.{path}: the mechanism is chosen by `mechanisms:`, not sampled here")
        elif path == EPSILON_PARAM and sweep.target_epsilons is not None:
            problems.append(f"search_space.{path}: the sweep's ε ladder sets it, not a search")
        elif path.startswith("mechanism.") and not any(applies_to(path, m) for m in sweep.mechanisms):
            owners = [m for m in MECHANISM_SETTINGS if applies_to(path, m)]
            problems.append(f"search_space.{path}: none of the sweep's mechanisms has this field"
                            + (f" (it belongs to {', '.join(owners)})" if owners else ""))
        elif d.type == "choice" and any(isinstance(v, (list, dict)) for v in d.values or ()):
            problems.append(f"search_space.{path}: choice values must be single values (numbers, strings, booleans)")
    if problems:
        raise ConfigError(problems, where)
    end_configs(sweep, space, where)


def end_configs(sweep: SweepConfig, space: SearchSpace, where: str | None = None) -> list[TrialConfig]:
    """Every mechanism's trial at the low and at the high end of every range (first and last choice), validated:
    the extremes a sweep's trials lie between."""
    configs = []
    for mechanism in sweep.mechanisms:
        for end in (0, -1):
            params: dict[str, Any] = {MECHANISM_PARAM: mechanism}
            for path, d in space.parameters.items():
                if applies_to(path, mechanism):
                    params[path] = int(d.ends[end]) if d.type == "int" else d.ends[end]
            configs.append(parse_model(TrialConfig, trial_config_dict(sweep, params, 0),
                                       f"{where} ({mechanism} trial)"))
    return configs
