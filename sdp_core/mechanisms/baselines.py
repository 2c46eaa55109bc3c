"""The baselines: No-DP, DP-SGD (Abadi et al. 2016) and Redacted (train on policy-redacted text)."""

from __future__ import annotations

from typing import ClassVar, Literal

from sdp_core.config.mechanism import MechanismSettings
from sdp_core.mechanisms.base import (
    MechanismPlan,
    TrialData,
    calibrate,
    private_phase,
    public_phase,
    within_token_budget,
)
from sdp_core.mechanisms.registry import MechanismSpec, register_mechanism
from sdp_core.privacy import PrivacyLedger


class NoDPConfig(MechanismSettings):
    name: Literal["nodp"] = "nodp"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")


class DPSGDConfig(MechanismSettings):
    name: Literal["dpsgd"] = "dpsgd"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")


class RedactedConfig(MechanismSettings):
    name: Literal["redacted"] = "redacted"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")


def nodp(d: TrialData) -> MechanismPlan:
    """Plain fine-tuning on the original text: no privacy claim at all (notion `none`, ε = ∞)."""
    cfg = d.cfg
    phases = within_token_budget([public_phase("train", d.train, cfg, cfg.training.epochs)], cfg.training.max_tokens)
    return MechanismPlan(phases, PrivacyLedger("none", cfg.privacy.delta, cfg.privacy.accountant), {})


def dpsgd(d: TrialData) -> MechanismPlan:
    """DP-SGD on every token of every record: record-level (ε, δ)-DP."""
    cfg = d.cfg
    phases, ledger = calibrate([private_phase("dp", d.train, cfg, cfg.training.epochs)], cfg, notion="DP")
    return MechanismPlan(phases, ledger, {})


def redacted(d: TrialData) -> MechanismPlan:
    """Fine-tune on redacted text: ε_s = 0 for what the policy catches, no guarantee for what it misses."""
    cfg = d.cfg
    phases = within_token_budget([public_phase("redacted", d.train_redacted, cfg, cfg.training.epochs)],
                                 cfg.training.max_tokens)
    ledger = PrivacyLedger("SDP", cfg.privacy.delta, cfg.privacy.accountant)
    return MechanismPlan(phases, ledger, {"guarantee": "epsilon_s = 0 for detected secrets only; none for missed"})


register_mechanism(MechanismSpec(
    NoDPConfig, nodp, "No-DP", "#8c564b", notion="none",
    caveat="No-DP trains without noise: no privacy guarantee; a reference point only."))
register_mechanism(MechanismSpec(
    DPSGDConfig, dpsgd, "DP-SGD", "#1f77b4", notion="DP",
    caveat="DP-SGD protects every record entirely, whatever the detector finds."))
register_mechanism(MechanismSpec(
    RedactedConfig, redacted, "Redacted", "#e0a800", notion="SDP (ε = 0 for detected secrets)",
    caveat="Redacted trains without noise on policy-redacted text: it protects the secrets the policy detects; "
           "secrets it misses have no guarantee."))
