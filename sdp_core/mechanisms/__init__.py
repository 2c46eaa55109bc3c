"""Mechanisms by name: each maps the trial's prepared data to calibrated phases and a privacy ledger."""

from sdp_core.mechanisms.base import Mechanism, MechanismPlan, TrialData
from sdp_core.mechanisms.baselines import dpsgd, nodp, redacted

MECHANISMS: dict[str, Mechanism] = {"nodp": nodp, "dpsgd": dpsgd, "redacted": redacted}

__all__ = ["MECHANISMS", "Mechanism", "MechanismPlan", "TrialData"]
