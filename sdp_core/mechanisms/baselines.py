"""The baselines: No-DP, DP-SGD (Abadi et al. 2016) and Redacted (train on policy-redacted text)."""

from __future__ import annotations

from sdp_core.mechanisms.base import MechanismPlan, TrialData, calibrate, private_phase, public_phase
from sdp_core.privacy import PrivacyLedger


def nodp(d: TrialData) -> MechanismPlan:
    """Plain fine-tuning on the original text: no privacy claim at all (notion `none`, ε = ∞)."""
    cfg = d.cfg
    phases = [public_phase("train", d.train, cfg, cfg.training.epochs)]
    return MechanismPlan(phases, PrivacyLedger("none", cfg.privacy.delta, cfg.privacy.accountant), {})


def dpsgd(d: TrialData) -> MechanismPlan:
    """DP-SGD on every token of every record: record-level (ε, δ)-DP."""
    cfg = d.cfg
    phases, ledger = calibrate([private_phase("dp", d.train, cfg, cfg.training.epochs)], cfg, notion="DP")
    return MechanismPlan(phases, ledger, {})


def redacted(d: TrialData) -> MechanismPlan:
    """Fine-tune on redacted text: ε_s = 0 for what the policy catches, no guarantee for what it misses."""
    cfg = d.cfg
    phases = [public_phase("redacted", d.train_redacted, cfg, cfg.training.epochs)]
    ledger = PrivacyLedger("SDP", cfg.privacy.delta, cfg.privacy.accountant)
    return MechanismPlan(phases, ledger, {"guarantee": "epsilon_s = 0 for detected secrets only; none for missed"})
