"""Mechanism settings: the base every mechanism's settings class extends, and the registry of those classes.

Each mechanism module defines its settings (`name` plus its own fields) and registers them with the rest of its
spec (`sdp_core.mechanisms.register_mechanism`); a trial config's `mechanism:` block is validated by the class its
`name` registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from sdp_core.config.base import Strict

if TYPE_CHECKING:
    from sdp_core.config.trial import TrialConfig


class MechanismSettings(Strict):
    """A mechanism's block of a trial config. Subclasses fix `name` with a `Literal` and add their fields."""

    name: str
    tasks: ClassVar[tuple[str, ...]] = ("lm",)
    """What the mechanism can train: `lm` (language models), `classification` (a classifier's labels)."""

    def trial_problem(self, trial: "TrialConfig") -> str | None:
        """What makes `trial` unusable with these settings (one line), or None; the trial config reports it."""
        return None


MECHANISM_SETTINGS: dict[str, type[MechanismSettings]] = {}


def register_settings(cls: type[MechanismSettings]) -> type[MechanismSettings]:
    MECHANISM_SETTINGS[cls.model_fields["name"].default] = cls
    return cls


def settings_class(name: str) -> type[MechanismSettings]:
    """The registered settings of mechanism `name`; ValueError (a config problem) for an unknown name."""
    try:
        return MECHANISM_SETTINGS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mechanism {name!r} (known: {', '.join(MECHANISM_SETTINGS)})") from None
