"""Mechanisms by name: each maps the trial's prepared data to calibrated phases and a privacy ledger."""

from sdp_core.mechanisms import atdp, baselines, crt, jft, sdpsgd
from sdp_core.mechanisms.base import Mechanism, MechanismPlan, TrialData

MECHANISMS: dict[str, Mechanism] = {
    "nodp": baselines.nodp,
    "dpsgd": baselines.dpsgd,
    "redacted": baselines.redacted,
    "jft": jft.jft,
    "crt": crt.crt,
    "atdp": atdp.atdp,
    "sdpsgd": sdpsgd.sdpsgd,
}

__all__ = ["MECHANISMS", "Mechanism", "MechanismPlan", "TrialData"]
