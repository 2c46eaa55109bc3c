"""Estimated exposure for secret spaces too large to enumerate (Carlini et al. 2019, §4.3 "extrapolation").

The scores of a random sample of candidates are close to skew-normally distributed; fit
`scipy.stats.skewnorm` to the sample's negative log-likelihoods and read off the probability F that a random
candidate is at least as likely as the canary. With the same tie convention as the exact rank,

    rank ≈ 1 + (|R| − 1)·F,    exposure ≈ log2 |R| − log2 rank   (≈ −log2 F when |R|·F ≫ 1).

The extrapolation is only as good as the fit in the far tail: a memorised canary sits far beyond every sample,
where the fitted tail decides alone. `benchmarks/exposure.py` reports its error against the exact value.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats
from torch import nn
from transformers import PreTrainedTokenizerBase

from sdp_core.attacks.candidates import random_chars, secret_chars
from sdp_core.attacks.exposure import score_candidates
from sdp_core.config.canary import CanaryFormat


def estimate_exposures(model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat,
                       secrets: Sequence[str], *, context: str | None = None, sample_size: int = 10_000, seed: int = 0,
                       batch_size: int = 1024) -> tuple[list[dict], dict]:
    """Estimated exposure of each secret from one seeded sample: (per secret `exposure`, `rank` (estimated, float),
    `score`, `tail_probability`; the fit's `skewnorm_a`, `loc`, `scale`, `sample_size`)."""
    chars = np.concatenate([random_chars(fmt, sample_size, np.random.default_rng(seed)), secret_chars(fmt, secrets)])
    # One call, so the sample and the secrets are scored against the same cached context.
    scores = score_candidates(model, tokenizer, fmt, chars, enumeration="trie", context=context, batch_size=batch_size)
    sample, targets = -scores[:sample_size], -scores[sample_size:]
    a, loc, scale = stats.skewnorm.fit(sample)
    log_tail = stats.skewnorm.logcdf(targets, a, loc, scale)  # ln P(random candidate's NLL ≤ the secret's)
    log_rank = np.logaddexp(0.0, math.log(fmt.space_size - 1) + log_tail)
    out = [{"exposure": math.log2(fmt.space_size) - lr / math.log(2), "rank": math.exp(lr), "score": float(-t),
            "tail_probability": math.exp(lt)} for lr, lt, t in zip(log_rank, log_tail, targets)]
    return out, {"skewnorm_a": float(a), "loc": float(loc), "scale": float(scale), "sample_size": sample_size}


def exposure_estimate(model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, canary_secret: str, *,
                      context: str | None = None, sample_size: int = 10_000, seed: int = 0,
                      batch_size: int = 1024) -> dict:
    """Estimated exposure of one canary: `exposure`, `rank`, `score`, `tail_probability`, `space_size`, `method`,
    and the fit (`skewnorm_a`, `loc`, `scale`, `sample_size`)."""
    (result,), fit = estimate_exposures(model, tokenizer, fmt, [canary_secret], context=context,
                                        sample_size=sample_size, seed=seed, batch_size=batch_size)
    return {**result, **fit, "space_size": fmt.space_size, "method": "estimate"}
