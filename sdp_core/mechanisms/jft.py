"""JFT: Just Fine-tune Twice (Shi et al., EMNLP 2022, paper 000).

Phase 1 fine-tunes on redacted text — `direct`ly, on a small `screened` subset whose missed secrets a person
removed (sampling audit), or with `light_noise`: DP-SGD whose sampling rate, for a secret the policy missed, is
amplified to p = q·m̃ by the missing rate m̃ (§4.2; an empirical estimate, since m̃ is estimated). Phase 2 runs
DP-SGD on the original text from phase 1's weights. SDP ε is the composition of both phases' private steps; with
light noise it is tagged an empirical estimate and carries the formal bound, phase 1 at its real rate q
(`LightNoiseLedger`).
"""

from __future__ import annotations

from typing import Any, Mapping


from sdp_core.config.mechanism import JFTConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.detectors.audit import missing_rate, read_audit
from sdp_core.errors import UserError
from sdp_core.mechanisms.base import (
    MechanismPlan,
    calibrate,
    phase_events,
    private_phase,
    public_phase,
    within_token_budget,
)
from sdp_core.mechanisms.registry import register_mechanism
from sdp_core.preparation import TrialData
from sdp_core.privacy import PrivacyLedger, light_noise_epsilon
from sdp_core.privacy.light_noise import REAL_SAMPLE_RATES, at_real_rates, with_formal_bound
from sdp_core.text.encode import encode
from sdp_core.text.redaction import redact
from sdp_core.train.loop import Phase

class LightNoiseLedger(PrivacyLedger):
    """The ledger of JFT with a light-noise phase 1 (Shi et al. 2022, §3.1).

    Its plan charges phase 1 at the amplified rate q·m̃ that σ was calibrated for, so its ε is an empirical
    estimate: `report()` (spent and plan) is tagged so and carries `formal`, the same steps with phase 1 at its
    real rate q, under the ledger's notion and accountant. Made by `from_dict` from a saved ledger whose
    `real_sample_rates` maps each phase-1 ledger phase to q; `to_dict()` keeps them.
    """

    real_sample_rates: dict[str, float]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LightNoiseLedger":
        ledger = super().from_dict(data)
        ledger.real_sample_rates = dict(data[REAL_SAMPLE_RATES])
        return ledger

    def report(self) -> dict[str, Any]:
        report = super().report()

        def tagged(estimate: dict, events) -> dict:
            return with_formal_bound(estimate, at_real_rates(events, self.real_sample_rates))

        return {**tagged(report, self.spent_events()), "plan": tagged(report["plan"], self.plan)}

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), REAL_SAMPLE_RATES: self.real_sample_rates}


def screened_subset(d: TrialData, audit_path: str, max_length: int):
    """The audited records, redacted with the policy's spans plus the person's marks of missed secrets."""
    items = read_audit(audit_path)
    texts = [redact(item.text, sorted({*item.spans, *item.missed})) for item in items]
    if not texts:
        raise UserError("the audit holds no records", audit_path)
    return encode(texts, [[] for _ in texts], d.tokenizer, max_length)


def estimated_missing_rate(d: TrialData, m: JFTConfig):
    """m̃ with its 95 % interval: from gold spans when the data has them, else from a marked sampling audit."""
    if m.audit_path:
        return missing_rate(read_audit(m.audit_path)), "sampling audit"
    if d.missing_rate is not None:  # counted when the data was prepared: the records are not read again
        return d.missing_rate, "gold spans"
    raise UserError("jft light_noise needs gold spans in the data or mechanism.audit_path (a marked sampling audit)")


def jft_phases(d: TrialData, cfg: TrialConfig, m: JFTConfig, prefix: str = "") -> list[Phase]:
    """Phase 1 (public: direct or screened) then phase 2 (private, relative σ): JFT's layout before calibration."""
    phase1_data = d.train_redacted
    if m.phase1_mode == "screened":
        assert m.audit_path is not None, "validated: screened needs audit_path"
        phase1_data = screened_subset(d, m.audit_path, cfg.data.max_length)
    return [public_phase(f"{prefix}phase1", phase1_data, cfg, m.phase1_epochs),
            private_phase(f"{prefix}phase2", d.train, cfg, cfg.training.epochs)]


def jft(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    m = cfg.mechanism
    assert isinstance(m, JFTConfig)
    if m.phase1_mode != "light_noise":
        phases, ledger = calibrate(jft_phases(d, cfg, m), cfg, notion="SDP", held_out=d.validation)
        return MechanismPlan(phases, ledger, {"phase1_mode": m.phase1_mode})

    rate, source = estimated_missing_rate(d, m)
    # Phase 1 is calibrated at the pessimistic end of m̃'s interval, then phase 2 takes what is left.
    # Both phases held to the compute budget together before either is calibrated (each is then within it alone).
    phase1, phase2 = within_token_budget([private_phase("phase1", d.train_redacted, cfg, m.phase1_epochs),
                                          private_phase("phase2", d.train, cfg, cfg.training.epochs)],
                                         cfg.training.max_tokens, "SDP", d.validation)
    amplified = max(rate.high, 1e-12)
    (phase1,), light = calibrate([phase1], cfg, notion="SDP", held_out=d.validation, sample_rate_factor=amplified,
                                 target_epsilon=m.budget_split * cfg.privacy.target_epsilon)
    fixed = phase_events(phase1, "jft", "all", sample_rate_factor=amplified)
    (phase2,), ledger = calibrate([phase2], cfg, notion="SDP", held_out=d.validation, fixed=fixed)
    real = phase_events(phase1, "jft", "all")
    report = light_noise_epsilon(real, (rate.low, rate.high), cfg.privacy.delta, cfg.privacy.accountant,
                                 other_events=ledger.plan[len(fixed):])
    real_rates = {e.phase: e.sample_rate for e in real}
    ledger = LightNoiseLedger.from_dict({**ledger.to_dict(), REAL_SAMPLE_RATES: real_rates})
    details = {"phase1_mode": "light_noise", "missing_rate": rate.value, "missing_rate_interval": [rate.low, rate.high],
               "missing_rate_source": source, "light_noise": report}
    derived = [f"JFT light noise's missing rate m̃ and its interval, estimated from the training records ({source}) "
               "without noise, which set phase 1's amplified sampling rate, and the estimate built on them "
               "(`mechanism.missing_rate`, `mechanism.missing_rate_interval`, `mechanism.light_noise`)"]
    return MechanismPlan([phase1, phase2], ledger, details, derived)


register_mechanism("jft", jft)
