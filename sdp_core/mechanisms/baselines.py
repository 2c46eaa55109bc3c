"""The baselines: No-DP, DP-SGD (Abadi et al. 2016) and Redacted (train on policy-redacted text)."""

from __future__ import annotations

from sdp_core.config.trial import TrialConfig
from sdp_core.mechanisms.base import MechanismPlan, calibrate, private_phase, public_phase, within_token_budget
from sdp_core.mechanisms.registry import register_mechanism
from sdp_core.preparation import TrialData
from sdp_core.privacy import PrivacyLedger


def nodp(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    """Plain fine-tuning on the original text: no privacy claim at all (notion `none`, ε = ∞)."""
    phases = within_token_budget([public_phase("train", d.train, cfg, cfg.training.epochs)], cfg.training.max_tokens,
                                 "none", d.validation)
    return MechanismPlan(phases, PrivacyLedger("none", cfg.privacy.delta, cfg.privacy.accountant), {})


def dpsgd(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    """DP-SGD on every token of every record: record-level (ε, δ)-DP."""
    phases, ledger = calibrate([private_phase("dp", d.train, cfg, cfg.training.epochs)], cfg, notion="DP",
                               held_out=d.validation)
    return MechanismPlan(phases, ledger, {})


def redacted(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    """Fine-tune on redacted text: ε_s = 0 for what the policy catches, no guarantee for what it misses."""
    phases = within_token_budget([public_phase("redacted", d.train_redacted, cfg, cfg.training.epochs)],
                                 cfg.training.max_tokens, "SDP", d.validation)
    ledger = PrivacyLedger("SDP", cfg.privacy.delta, cfg.privacy.accountant)
    return MechanismPlan(phases, ledger, {"guarantee": "epsilon_s = 0 for detected secrets only; none for missed"})


register_mechanism("nodp", nodp)
register_mechanism("dpsgd", dpsgd)
register_mechanism("redacted", redacted)
