"""Mechanism settings: the base class, the registry, and the built-in mechanisms' settings and facts.

A mechanism is known by its settings class (its `mechanism:` block of a trial config, plus the facts a report
states about it: display name, colour, notion, caveat). This module imports no torch, so configs validate and
reports render without the training stack; `sdp_core.mechanisms` registers each mechanism (what it trains)
against a name registered here (as transformers' `configuration_*.py` sits under its `modeling_*.py`).

A new mechanism: a `MechanismSettings` subclass passed to `register_settings`, and its mechanism passed to
`sdp_core.mechanisms.register_mechanism`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, model_validator

from sdp_core.config.base import Strict

if TYPE_CHECKING:
    from sdp_core.config.trial import TrialConfig  # the trial config holds these settings: for type hints only


class MechanismSettings(Strict):
    """A mechanism's block of a trial config. Subclasses fix `name` with a `Literal`, add their fields, and state
    their facts as class variables."""

    name: str
    tasks: ClassVar[tuple[str, ...]] = ("lm",)
    """What the mechanism can train: `lm` (language models), `classification` (a classifier's labels)."""
    display_name: ClassVar[str]  # in reports
    colour: ClassVar[str]  # its points and bars in reports
    notion: ClassVar[str]  # the notion it claims, in words (e.g. "SDP", or "DP / SDP / none, by base")
    ledger_notion: ClassVar[str] = "none"
    """The notion its trials' ledgers state (`privacy.report.NOTIONS`: none, DP, SDP, confidentiality)."""
    caveat: ClassVar[str]  # what its guarantee covers, one or two sentences for the privacy statement
    calibrated: ClassVar[bool] = True
    """Whether its noise is calibrated to `privacy.target_epsilon` (a sweep's ε ladder runs it at every ε)."""

    def trial_problem(self, trial: "TrialConfig") -> str | None:
        """What makes `trial` unusable with these settings (one line), or None; the trial config reports it."""
        return None

    def stated_notion(self) -> str:
        """The notion a trial with these settings states (`ledger_notion`): what a report ranks it among, known
        before it runs."""
        return self.ledger_notion


MECHANISM_SETTINGS: dict[str, type[MechanismSettings]] = {}

FACTS = ("display_name", "colour", "notion", "caveat")


def register_settings(cls: type[MechanismSettings]) -> type[MechanismSettings]:
    """Make mechanism `cls.name` known to trial configs, sweeps and reports (a later class of the name replaces it)."""
    missing = [fact for fact in FACTS if not isinstance(getattr(cls, fact, None), str)]
    if missing:
        raise TypeError(f"{cls.__name__} states no {', '.join(missing)}")
    MECHANISM_SETTINGS[cls.model_fields["name"].default] = cls
    return cls


def settings_class(name: str) -> type[MechanismSettings]:
    """The registered settings of mechanism `name`; ValueError (a config problem) for an unknown name."""
    try:
        return MECHANISM_SETTINGS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mechanism {name!r} (known: {', '.join(MECHANISM_SETTINGS)})") from None


# ------------------------------------------------------------------------------------------ the baselines


@register_settings
class NoDPConfig(MechanismSettings):
    """Plain fine-tuning on the original text."""

    name: Literal["nodp"] = "nodp"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")
    display_name: ClassVar[str] = "No-DP"
    colour: ClassVar[str] = "#8c564b"
    notion: ClassVar[str] = "none"
    caveat: ClassVar[str] = "No-DP trains without noise: no privacy guarantee; a reference point only."
    calibrated: ClassVar[bool] = False


@register_settings
class DPSGDConfig(MechanismSettings):
    """DP-SGD on every token of every record (Abadi et al. 2016)."""

    name: Literal["dpsgd"] = "dpsgd"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")
    display_name: ClassVar[str] = "DP-SGD"
    colour: ClassVar[str] = "#1f77b4"
    notion: ClassVar[str] = "DP"
    ledger_notion: ClassVar[str] = "DP"
    caveat: ClassVar[str] = "DP-SGD protects every record entirely, whatever the detector finds."


@register_settings
class RedactedConfig(MechanismSettings):
    """Fine-tuning on policy-redacted text."""

    name: Literal["redacted"] = "redacted"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")
    display_name: ClassVar[str] = "Redacted"
    colour: ClassVar[str] = "#e0a800"
    notion: ClassVar[str] = "SDP (ε = 0 for detected secrets)"
    ledger_notion: ClassVar[str] = "SDP"
    caveat: ClassVar[str] = ("Redacted trains without noise on policy-redacted text: it protects the secrets the "
                             "policy detects; secrets it misses have no guarantee.")
    calibrated: ClassVar[bool] = False


# --------------------------------------------------------------------------------- the selective mechanisms


@register_settings
class JFTConfig(MechanismSettings):
    """Just Fine-tune Twice: phase 1 on redacted data, phase 2 DP-SGD on the original data."""

    name: Literal["jft"] = "jft"
    tasks: ClassVar[tuple[str, ...]] = ("lm", "classification")
    display_name: ClassVar[str] = "JFT"
    colour: ClassVar[str] = "#d62728"
    notion: ClassVar[str] = "SDP (light noise: an empirical estimate)"
    ledger_notion: ClassVar[str] = "SDP"
    caveat: ClassVar[str] = (
        "JFT protects the tokens the policy flags; phase 1 trains on redacted text (with light_noise, its "
        "amplification uses an estimated missing rate: an empirical, not a formal, bound, printed with the formal "
        "bound of phase 1 at its real sampling rate beside it).")
    phase1_mode: Literal["direct", "screened", "light_noise"] = "direct"
    phase1_epochs: int = Field(1, ge=1)
    audit_path: str | None = Field(
        None, description="sampling-audit file (sdp_core.detectors.audit): the screened subset for phase1_mode=screened; "
        "the missing-rate estimate m̃ for light_noise when the data has no gold spans")
    budget_split: float = Field(
        0.1, gt=0, lt=1, description="share of ε given to the light-noise phase 1 (only phase1_mode=light_noise)"
    )

    @model_validator(mode="after")
    def _screened_needs_audit(self) -> "JFTConfig":
        if self.phase1_mode == "screened" and not self.audit_path:
            raise ValueError("phase1_mode=screened needs mechanism.audit_path (a marked sampling audit)")
        return self

    def trial_problem(self, trial: "TrialConfig") -> str | None:
        if trial.model.task == "classification" and self.phase1_mode == "screened":
            return (f"jft phase1_mode=screened is for language models (an audit holds no class labels); "
                    f"model.arch {trial.model.arch} (a classifier)")
        return None


@register_settings
class CRTConfig(MechanismSettings):
    """Confidentially Redacted Training: dedup, redact, public/private split, alternating epochs."""

    name: Literal["crt"] = "crt"
    display_name: ClassVar[str] = "CRT"
    colour: ClassVar[str] = "#2ca02c"
    notion: ClassVar[str] = "confidentiality, Bayesian confidentiality"
    ledger_notion: ClassVar[str] = "confidentiality"
    caveat: ClassVar[str] = (
        "CRT's confidentiality is relative to the perfectly redacted data (policy π plus the conservative π_c) "
        "and holds only if π_c flags every secret π misses: where gold spans show a secret both miss, the trial "
        "has no formal guarantee and its confidentiality ε is marked as not holding. Bayesian confidentiality "
        "accounts for the shares of secrets π, and π with π_c, miss (95 % upper bounds).")
    dedup: bool = True


@register_settings
class ATDPConfig(MechanismSettings):
    """Adaptive token-weighted DP with the rise–reset noise schedule σ_e = σ_{e−1}·γ·ρ_e, reset above σ_max."""

    name: Literal["atdp"] = "atdp"
    display_name: ClassVar[str] = "ATDP"
    colour: ClassVar[str] = "#9467bd"
    notion: ClassVar[str] = "DP / SDP / none, by base"
    caveat: ClassVar[str] = ("ATDP noises every record's whole token-weighted gradient; its ε composes every σ of "
                             "the rise–reset schedule.")
    base: Literal["none", "nodp", "redacted", "jft"] = "none"
    base_epochs: int = Field(1, ge=1, description="epochs of the base phase when base is not none")
    w: float | None = Field(None, gt=0, le=1, description="weight of non-sensitive tokens; default from α and r_target")
    r_target: float = Field(0.5, gt=0, lt=1)
    function_tokens: list[str] = Field(
        default_factory=lambda: ["the", "a", "to", "of", "and", "is", "you", "I", "my", "your", "."]
    )
    escalation: float = Field(1.05, ge=1.0, description="γ: per-epoch growth of σ")
    jitter: float = Field(0.05, ge=0, lt=1, description="j: ρ_e ~ U[1−j, 1+j]")
    ceiling: float = Field(2.0, gt=1, description="σ_max as a multiple of σ₀; above it σ resets to σ₀")

    def stated_notion(self) -> str:
        """DP alone; SDP after a redacted or JFT base (its public phase saw detected secrets masked only); none after
        a No-DP base, which saw every secret in the clear."""
        return {"none": "DP", "nodp": "none"}.get(self.base, "SDP")


@register_settings
class SDPSGDConfig(MechanismSettings):
    """Selective-DPSGD for recurrent models: public/private segments, noised hidden state."""

    name: Literal["sdpsgd"] = "sdpsgd"
    display_name: ClassVar[str] = "Selective-DPSGD"
    colour: ClassVar[str] = "#ff7f0e"
    notion: ClassVar[str] = "SDP"
    ledger_notion: ClassVar[str] = "SDP"
    caveat: ClassVar[str] = ("Selective-DPSGD noises private token segments and the hidden state carried out of "
                             "them; public segments train without noise.")
    hidden_clip: float | None = Field(None, gt=0, description="C_h for the hidden state; None = privacy.max_grad_norm")
    hidden_noise_ratio: float = Field(1.0, gt=0, description="σ_h / σ_g (the paper uses 1)")

    def trial_problem(self, trial: "TrialConfig") -> str | None:
        if trial.model.arch != "lstm":
            return "mechanism sdpsgd needs model.arch: lstm (it noises a recurrent hidden state)"
        return None
