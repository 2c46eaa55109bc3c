"""Exposure of the k canaries a trial inserted n times each (Carlini et al. 2019; Shi et al. 2022, §5.1.1).

Besides the inserted canaries, the same enumeration (or sample) ranks *reference* secrets of the same format that
were never inserted: they are the non-members of the canary audit (`audit.empirical_epsilon`), and show the
exposure an unseen secret gets from this model (≈ uniform on [0, log2|R|] in rank, mean ≈ 1.44 bits).
The result holds exposures only, never secret values.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from torch import nn
from transformers import PreTrainedTokenizerBase

from sdp_core.attacks.estimate import estimate_exposures
from sdp_core.attacks.exposure import Progress, rank_secrets, score_space
from sdp_core.data.canaries import CanaryPlan
from sdp_core.errors import UserError


def reference_secrets(plan: CanaryPlan, count: int, seed: int) -> list[str]:
    """`count` distinct seeded secrets of the plan's format that are not among its canaries."""
    rng, taken, out = random.Random(f"reference-canaries-{seed}"), set(plan.secrets), []
    while len(out) < min(count, plan.format.space_size - len(taken)):
        s = plan.format.random_secret(rng)
        if s not in taken:
            taken.add(s)
            out.append(s)
    return out


def canary_exposures(model: nn.Module, tokenizer: PreTrainedTokenizerBase, plan: CanaryPlan,
                     method: Literal["exact", "estimate"] = "exact", limit: int = 1_000_000, *,
                     references: int | None = None, context: str | None = None, sample_size: int = 10_000,
                     seed: int = 0, batch_size: int = 1024, progress: Progress | None = None) -> dict:
    """Exposure of every canary of `plan`, exactly (trie enumeration, spaces up to `limit`) or estimated.

    Returns `method`, `format`, `space_size`, `max_exposure` (log2 |R|), `count`, `repeats`, `exposures` (plan
    order), `exposure_mean`, `exposure_max`, `reference_exposures` (`references` never-inserted secrets; default:
    as many as canaries), and for `estimate` the skew-normal `fit`.
    """
    if method not in ("exact", "estimate"):
        raise UserError(f"exposure method must be exact or estimate, not {method!r}")
    fmt = plan.format
    secrets = list(plan.secrets)
    refs = reference_secrets(plan, len(secrets) if references is None else references, seed)
    out: dict = {"method": method, "format": fmt.template, "space_size": fmt.space_size,
                 "max_exposure": math.log2(fmt.space_size), "count": len(secrets),
                 "repeats": plan.summary()["repeats"]}
    if method == "exact":
        scores = score_space(model, tokenizer, fmt, context=context, batch_size=batch_size, limit=limit,
                             progress=progress)
        results = rank_secrets(scores, fmt, secrets + refs)
    else:
        results, out["fit"] = estimate_exposures(model, tokenizer, fmt, secrets + refs, context=context,
                                                 sample_size=sample_size, seed=seed, batch_size=batch_size)
    exposures = [r["exposure"] for r in results]
    out["exposures"], out["reference_exposures"] = exposures[: len(secrets)], exposures[len(secrets) :]
    out["exposure_mean"] = sum(out["exposures"]) / len(secrets) if secrets else None
    out["exposure_max"] = max(out["exposures"], default=None)
    return out
