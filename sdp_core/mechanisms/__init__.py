"""Mechanisms by name: each module registers itself against the settings `sdp_core.config.mechanism` registered.

Importing this package registers the built-in mechanisms; `get_mechanism(name)(data, cfg)` maps a trial's prepared
data and config to its plan: calibrated phases and a privacy ledger.
"""

from sdp_core.mechanisms import atdp, baselines, crt, jft, sdpsgd  # noqa: F401  (each registers itself)
from sdp_core.mechanisms.base import MechanismPlan
from sdp_core.mechanisms.registry import MECHANISMS, Mechanism, get_mechanism, register_mechanism
from sdp_core.preparation import TrialData

__all__ = ["MECHANISMS", "Mechanism", "MechanismPlan", "TrialData", "get_mechanism", "register_mechanism"]
