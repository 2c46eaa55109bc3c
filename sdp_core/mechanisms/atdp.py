"""ATDP: adaptive token-weighted DP with a rise–reset noise schedule (Yu et al. 2025, paper 003).

Token weights: 1 for sensitive tokens and for a list of frequent function tokens, `w` for every other token, with
the default w = α(1−r)/(r(1−α)) from the measured sensitive fraction α and the target r (§3: then sensitive
tokens carry a share r of the loss). Each record's gradient is the gradient of its weighted loss, clipped and
noised whole — so the guarantee is ordinary record-level DP; the weights only steer what the budget buys.

Noise schedule: σ_e = σ_{e−1}·γ·ρ_e with ρ_e ~ U[1−j, 1+j], reset to σ₀ once it exceeds σ_max. The multipliers
are drawn (seeded) before calibration, which scales σ₀ so the composition over every σ_e used meets the target.

Post-hoc use: `base` runs a No-DP, Redacted or JFT phase first and ATDP continues from its weights.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast

from sdp_core.config.mechanism import ATDPConfig, JFTConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import UserError
from sdp_core.mechanisms.base import MechanismPlan, calibrate, private_phase, public_phase
from sdp_core.mechanisms.jft import jft_phases
from sdp_core.mechanisms.registry import register_mechanism
from sdp_core.preparation import TrialData
from sdp_core.tensors import LMData, row_counts


def rise_reset_multipliers(epochs: int, escalation: float, jitter: float, ceiling: float, seed: int) -> tuple[float, ...]:
    """Relative σ_e / σ₀ for each epoch: multiply by γ·ρ_e, reset to 1 above `ceiling`."""
    rng = random.Random(f"atdp-schedule-{seed}")
    out = [1.0]
    for _ in range(epochs - 1):
        nxt = out[-1] * escalation * rng.uniform(1 - jitter, 1 + jitter)
        out.append(1.0 if nxt > ceiling else nxt)
    return tuple(out)


def function_token_ids(tokenizer: PreTrainedTokenizerFast, words: list[str]) -> list[int]:
    """Ids of tokens that are exactly one of `words`, with or without a leading space."""
    ids = set()
    for word in words:
        for variant in (word, " " + word):
            piece = tokenizer.encode(variant, add_special_tokens=False)
            if len(piece) == 1:
                ids.add(piece[0])
    return sorted(ids)


def default_weight(alpha: float, r_target: float) -> float:
    """w = α(1−r)/(r(1−α)): the weight that gives sensitive tokens a share r of the total loss weight."""
    if not 0 < alpha < 1:
        raise UserError(f"ATDP needs some sensitive and some non-sensitive tokens (sensitive fraction α = {alpha:.3f})")
    return alpha * (1 - r_target) / (r_target * (1 - alpha))


@dataclass(frozen=True)
class ATDPWeights:
    """ATDP's loss weights (a `tensors.TokenWeighting`): 1 on sensitive tokens and on the function tokens
    `function_ids`, `w` elsewhere, 0 where the loss reads nothing. Computed for the rows of each batch, never for
    every row of the data."""

    w: float
    function_ids: tuple[int, ...]

    def __call__(self, input_ids: torch.Tensor, sensitive: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        function = torch.isin(input_ids.long(), torch.tensor(list(self.function_ids)))
        return torch.where(sensitive | function, 1.0, self.w) * valid


def token_weights(data: LMData, tokenizer: PreTrainedTokenizerFast, cfg: ATDPConfig) -> tuple[LMData, dict]:
    """Weights 1 on sensitive and function tokens, w elsewhere (0 stays 0: padding and `<mask>`): `ATDPWeights`,
    with α the share of flagged tokens among those the loss reads (`tensors.row_counts`, counted once for the
    rows)."""
    counts = data.statistic(row_counts)
    alpha = float(torch.tensor(counts.flagged) / torch.tensor(counts.valid))  # the float32 quotient of the sums
    w = cfg.w if cfg.w is not None else default_weight(alpha, cfg.r_target)
    if not 0 < w <= 1:
        raise UserError(f"ATDP weight w = {w:.3f} is outside (0, 1] (α = {alpha:.3f}, r_target = {cfg.r_target}); "
                        "raise r_target or set mechanism.w")
    weighting = ATDPWeights(w, tuple(function_token_ids(tokenizer, cfg.function_tokens)))
    return data.with_weighting(weighting), {"w": w, "alpha": alpha, "r_target": cfg.r_target}


def _base_phases(d: TrialData, cfg: TrialConfig, m: ATDPConfig) -> list:
    """Phases that run before ATDP (the notion the combination can claim: `ATDPConfig.stated_notion`)."""
    if m.base == "none":
        return []
    if m.base == "nodp":
        return [public_phase("base_nodp", d.train, cfg, m.base_epochs)]
    if m.base == "redacted":
        return [public_phase("base_redacted", d.train_redacted, cfg, m.base_epochs)]
    return jft_phases(d, cfg, JFTConfig(phase1_epochs=m.base_epochs), prefix="base_jft_")


def atdp(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    m = cfg.mechanism
    assert isinstance(m, ATDPConfig)
    weighted, details = token_weights(d.train, d.tokenizer, m)
    sigmas = rise_reset_multipliers(cfg.training.epochs, m.escalation, m.jitter, m.ceiling, cfg.seed)
    base = _base_phases(d, cfg, m)
    phases, ledger = calibrate([*base, private_phase("atdp", weighted, cfg, cfg.training.epochs, sigmas)], cfg,
                               m.stated_notion(), d.validation)
    details["sigma_multipliers"] = list(sigmas)
    details["base"] = m.base
    derived = ["the share α of sensitive tokens in the training data, counted without noise (`mechanism.alpha`)"]
    if m.w is None:
        derived.append(f"ATDP's weight w = {details['w']:.4f}, set from α (fix mechanism.w to avoid it) "
                       "(`mechanism.w`)")
    return MechanismPlan(phases, ledger, details, derived)


register_mechanism("atdp", atdp)
