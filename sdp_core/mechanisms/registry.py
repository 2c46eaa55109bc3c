"""The mechanism registry: what each mechanism trains, by the name its settings registered in
`sdp_core.config.mechanism`.

A mechanism's settings and facts (display name, colour, notion, caveat) live in the config layer, which imports no
torch; its module here registers the mechanism, `register_mechanism(name, mechanism)` at import time, as Opacus fills
its grad-sampler registry from the modules above it. A mechanism lays out a trial's plan (`MechanismPlan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.errors import UserError

if TYPE_CHECKING:
    from sdp_core.config.trial import TrialConfig
    from sdp_core.mechanisms.base import MechanismPlan
    from sdp_core.preparation import TrialData

Mechanism = Callable[["TrialData", "TrialConfig"], "MechanismPlan"]
"""A mechanism: a trial's prepared data and its config -> its plan (calibrated phases and a privacy ledger)."""

MECHANISMS: dict[str, Mechanism] = {}


def register_mechanism(name: str, mechanism: Mechanism) -> Mechanism:
    """Register `mechanism` as what mechanism `name` trains; its settings must be registered first."""
    if name not in MECHANISM_SETTINGS:
        raise KeyError(f"no settings registered for mechanism {name!r} (sdp_core.config.mechanism.register_settings)")
    MECHANISMS[name] = mechanism
    return mechanism


def get_mechanism(name: str) -> Mechanism:
    try:
        return MECHANISMS[name]
    except KeyError:
        raise UserError(f"unknown mechanism {name!r} (known: {', '.join(MECHANISMS)})") from None
