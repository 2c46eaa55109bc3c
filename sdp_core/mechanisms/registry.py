"""The mechanism registry: each mechanism's module registers one `MechanismSpec`, and the rest of the framework
(trial configs, trials, the sweep's search space, reports) reads it from here instead of keeping its own table
per mechanism.

A new mechanism is one module (its settings, its plan, its words and colour) plus its test: `register_mechanism`
at import time, as Opacus registers its grad samplers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from sdp_core.config.mechanism import MechanismSettings, register_settings
from sdp_core.errors import UserError

if TYPE_CHECKING:
    from sdp_core.mechanisms.base import MechanismPlan, TrialData


@dataclass(frozen=True)
class MechanismSpec:
    """What the framework knows about one mechanism."""

    settings: type[MechanismSettings]  # its `mechanism:` block of a trial config; its `name` is the mechanism's
    plan: Callable[["TrialData"], "MechanismPlan"]  # prepared data -> calibrated phases and ledger
    display_name: str  # in reports
    colour: str  # its points and bars in reports
    caveat: str  # what its guarantee covers, in one or two sentences for the privacy statement
    notion: str  # the notion it claims, in words (e.g. "SDP", or "DP / SDP / none by base")

    @property
    def name(self) -> str:
        return self.settings.model_fields["name"].default


MECHANISMS: dict[str, MechanismSpec] = {}


def register_mechanism(spec: MechanismSpec) -> MechanismSpec:
    """Make `spec` known by its name, to trial configs too (a later registration of the name replaces it)."""
    register_settings(spec.settings)
    MECHANISMS[spec.name] = spec
    return spec


def get_mechanism(name: str) -> MechanismSpec:
    try:
        return MECHANISMS[name]
    except KeyError:
        raise UserError(f"unknown mechanism {name!r} (known: {', '.join(MECHANISMS)})") from None
