"""Mechanisms by name: each module registers its plan against the settings `sdp_core.config.mechanism` registered.

Importing this package registers the built-in plans; `get_plan(name)(data, cfg)` maps a trial's prepared data and config to
calibrated phases and a privacy ledger.
"""

from sdp_core.mechanisms import atdp, baselines, crt, jft, sdpsgd  # noqa: F401  (each registers its plan)
from sdp_core.mechanisms.base import MechanismPlan
from sdp_core.mechanisms.registry import PLANS, Mechanism, get_plan, register_plan
from sdp_core.preparation import TrialData

__all__ = ["PLANS", "Mechanism", "MechanismPlan", "TrialData", "get_plan", "register_plan"]
