"""`docs/config.md`, generated from the settings classes themselves: every key of a trial config (each mechanism's
block apart), every key of a sweep file, and every metric name (`sdp_core.config.metrics`).

    python -m sdp_core.config.reference > docs/config.md

A test compares the file with this output, so the reference cannot go stale.
"""

from __future__ import annotations

import json
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from sdp_core.config.mechanism import MECHANISM_SETTINGS, MechanismSettings
from sdp_core.config.metrics import METRICS, NEEDS
from sdp_core.config.sweep import SweepConfig
from sdp_core.config.trial import TrialConfig


def type_name(annotation: Any) -> str:
    """A field's type as a reader writes it in YAML: `rdp | prv | pld`, `int`, `list[str]`, `mapping`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" \\| null" if type(None) in args else "")
    if origin is list:
        return f"list[{type_name(args[0])}]" if args else "list"
    if origin is dict:
        return f"mapping of {type_name(args[1])}" if len(args) == 2 else "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return ""
        return f"`{json.dumps(value, default=lambda v: v.model_dump(), ensure_ascii=False)}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{json.dumps(field.default, ensure_ascii=False)}`"


def _section(annotation: Any, path: str) -> tuple[type[BaseModel], str] | None:
    """The settings class a field holds and the prefix of its keys: `path.` for a section, `path.<name>.` for a
    mapping of sections, `path[].` for a list of them; None for a plain value (or a mechanism block)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation is not MechanismSettings:
        return annotation, f"{path}."
    if origin is dict and len(args) == 2 and (section := _section(args[1], "")) is not None:
        return section[0], f"{path}.<name>."
    if origin is list and args and (section := _section(args[0], "")) is not None:
        return section[0], f"{path}[]."
    if origin in (Union, types.UnionType):
        return next((found for a in args if (found := _section(a, path)) is not None), None)
    return None


def _rows(cls: type[BaseModel], prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    """One table row per key of `cls` below `prefix`, sections expanded in place."""
    rows = []
    for name, field in cls.model_fields.items():
        if name in skip:
            continue
        path, annotation = f"{prefix}{name}", field.annotation
        description = " ".join((field.description or "").split()).replace("|", "\\|")
        section = _section(annotation, path)
        if annotation is MechanismSettings:
            rows.append(f"| `{path}` | section | | the mechanism and its settings: see *Mechanisms* |")
        elif section is not None:
            rows.append(f"| `{path}` | {type_name(annotation)} | {_default(field)} | {description} |")
            rows += _rows(*section)
        else:
            rows.append(f"| `{path}` | {type_name(annotation)} | {_default(field)} | {description} |")
    return rows


HEADER = ["| key | type | default | what |", "| --- | --- | --- | --- |"]


def reference() -> str:
    """The whole of `docs/config.md`."""
    lines = ["# Configuration reference", "",
             "Generated from the settings classes by `python -m sdp_core.config.reference > docs/config.md`; a test "
             "fails when this file differs from that output. Every key is checked by `sdp-sweep validate`; a key "
             "that does not exist is an error with the closest existing key.", "",
             "## Trial", "",
             "A trial file (`sdp-sweep trial FILE`), a sweep's `base:`, a grid arm's `set:` keys and a search "
             "space's parameters all use these dotted paths.", "", *HEADER, *_rows(TrialConfig, ""), "",
             "## Mechanisms", "",
             "`mechanism.name` picks one; the other keys of `mechanism:` are that mechanism's own.", ""]
    for name, cls in MECHANISM_SETTINGS.items():
        doc = " ".join((cls.__doc__ or "").split()).replace("|", "\\|")
        lines += [f"### `{name}`", "", doc, ""] if doc else [f"### `{name}`", ""]
        rows = _rows(cls, "mechanism.", skip=("name",))
        lines += [*HEADER, *rows, ""] if rows else ["No settings of its own.", ""]
    lines += ["## Sweep", "",
              "A sweep file (`sdp-sweep run FILE`). `base` takes every trial key above.", "",
              *HEADER, "| `base` | section | | the trial every trial of the sweep starts from: every key of *Trial* |",
              *_rows(SweepConfig, "", skip=("base",)), "",
              "## Metrics", "",
              "What a trial's row can hold, for `objectives:` (`metric`, `mode: min | max`) and `claims:`. "
              "`direction` is the better way (`none`: a bound or a count).", "",
              "| metric | direction | needs | what |", "| --- | --- | --- | --- |"]
    for name, m in METRICS.items():
        needs = ", ".join(x for x in (NEEDS.get(m.needs or ""), f"model task {m.task}" if m.task else None) if x)
        lines.append(f"| `{name}` | {m.direction} | {needs} | {m.description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
