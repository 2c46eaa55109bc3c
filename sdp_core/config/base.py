"""What every config block shares: strict pydantic models, one-line problems, and dotted-path settings.

Unknown keys are rejected everywhere (`extra="forbid"`), and every validation problem is reported as one line
with its YAML path (`privacy.target_epsilon: must be > 0`). `--set key.path=value` and a grid arm's `set:` both
go through `apply_settings`.
"""

from __future__ import annotations

import copy
import difflib
import types
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from sdp_core.errors import ConfigError, UserError


class Strict(BaseModel):
    """Base for every config block: unknown keys are errors, values are re-validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _value_defaults(data: Any, key: str, defaults: dict[str, dict[str, Any]]) -> Any:
    """A `before` validator's helper: add the defaults of `data[key]`'s value for the keys `data` does not set."""
    if isinstance(data, dict) and isinstance(data.get(key), str) and data[key] in defaults:
        return {**data, **{k: v for k, v in defaults[data[key]].items() if k not in data}}
    return data


_MESSAGES = {
    "greater_than": "must be > {gt:g}",
    "greater_than_equal": "must be >= {ge:g}",
    "less_than": "must be < {lt:g}",
    "less_than_equal": "must be <= {le:g}",
    "extra_forbidden": "unknown key",
    "missing": "required",
}


def _subclasses(cls: type[BaseModel]) -> list[type[BaseModel]]:
    return [cls] + [s for sub in cls.__subclasses__() for s in _subclasses(sub)]


def _step(annotation: Any, part: Any) -> list[Any]:
    """What the value at key or index `part` of a value typed `annotation` can be. A model's registered
    subclasses (the mechanisms' settings) count as the model, so their fields are known too."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [c.model_fields[part].annotation for c in _subclasses(annotation) if part in c.model_fields]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return [a for arg in args for a in _step(arg, part)]
    if origin is dict and len(args) == 2:
        return [args[1]]
    if origin is list and args:
        return [args[0]]
    return []


def known_keys(cls: type[BaseModel], path: list[Any]) -> set[str]:
    """The keys a config of type `cls` accepts in the mapping at `path` (empty when nothing is known there)."""
    annotations: list[Any] = [cls]
    for part in path:
        annotations = [a for annotation in annotations for a in _step(annotation, part)]
    models = {c for a in annotations for arg in (get_args(a) or (a,))
              if isinstance(arg, type) and issubclass(arg, BaseModel) for c in _subclasses(arg)}
    return {name for c in models for name in c.model_fields}


def did_you_mean(name: str, known: set[str] | list[str]) -> str:
    """` (did you mean X?)` for the closest of `known` (difflib's ratio >= 0.6), else the empty string."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _problems(err: ValidationError, cls: type[BaseModel] | None = None) -> list[str]:
    """One line per problem: `yaml.path: message`; an unknown key names the closest known key of its mapping."""
    lines = []
    errors = err.errors()
    for e in errors:
        if (e["type"] == "string_type" and e["loc"][-1:] == ("str",)
                and any(o is not e and o["loc"][: len(e["loc"]) - 1] == e["loc"][:-1] for o in errors)):
            continue  # `SearchSpace | str` given a mapping: report the mapping's problems, not "not a string"
        loc = [str(p) if str(p).isprintable() else repr(p)  # a key with a newline must not break the one line
               for p in e["loc"] if p != "SearchSpace"]
        template = _MESSAGES.get(e["type"])
        msg = template.format(**(e.get("ctx") or {})) if template else e["msg"]
        msg = " ".join(msg.removeprefix("Value error, ").split())
        if e["type"] == "extra_forbidden" and cls is not None:
            path = [p for p in e["loc"] if p != "SearchSpace"]
            msg += did_you_mean(str(path[-1]), known_keys(cls, path[:-1]))
        lines.append(f"{'.'.join(loc) or '(top level)'}: {msg}")
    return lines


def parse_model(cls: type[BaseModel], data: Any, where: str | None = None) -> Any:
    """Validate `data` as `cls`; every problem becomes one line of a ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], where)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_problems(e, cls), where) from None


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """`training.batch_size=64` -> (['training', 'batch_size'], 64); the value is read as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set expects key.path=value, got {assignment!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        problem = " ".join(str(getattr(e, "problem", None) or "invalid YAML").split())
        raise UserError(f"--set {assignment!r}: the value is not valid YAML ({problem})") from None
    return key.strip().split("."), value


def _set_path(data: dict, path: list[str], value: Any) -> None:
    """Set `data[path[0]]...[path[-1]] = value` in place, making (or replacing non-mapping) parents as needed."""
    for part in path[:-1]:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[path[-1]] = value


def apply_settings(data: dict, settings: dict[str, Any]) -> dict:
    """A copy of a raw config mapping with dotted paths set (validation happens afterwards, as for the file)."""
    data = copy.deepcopy(data)
    for key, value in settings.items():
        _set_path(data, key.split("."), copy.deepcopy(value))
    return data


def apply_overrides(data: dict, assignments: list[str]) -> dict:
    """A copy of a raw config mapping with `--set key.path=value` assignments applied, in order."""
    data = copy.deepcopy(data)
    for assignment in assignments:
        _set_path(data, *parse_override(assignment))
    return data
