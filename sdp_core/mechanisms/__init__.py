"""Mechanisms by name: each module registers its `MechanismSpec` (settings, plan, notion, words, colour).

Importing this package registers the built-in mechanisms; `MECHANISMS[name].plan(data)` maps a trial's prepared
data to calibrated phases and a privacy ledger.
"""

from sdp_core.mechanisms import atdp, baselines, crt, jft, sdpsgd  # noqa: F401  (each registers itself)
from sdp_core.mechanisms.base import Mechanism, MechanismPlan, TrialData
from sdp_core.mechanisms.registry import MECHANISMS, MechanismSpec, get_mechanism, register_mechanism

__all__ = ["MECHANISMS", "Mechanism", "MechanismPlan", "MechanismSpec", "TrialData", "get_mechanism",
           "register_mechanism"]
