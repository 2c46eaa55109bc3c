"""Utility metrics: perplexity (all / private-only / public-only tokens) and top-1 next-token accuracy.

All metrics are computed on the *original* (unredacted) text over every real token, so mechanisms that train
on redacted data are judged on what users will feed them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sdp_core.train.data import LMData


@torch.no_grad()
def token_statistics(model: nn.Module, data: LMData, batch_size: int = 64) -> dict[str, float]:
    """Summed NLL and counts over target tokens, split by the data's `sensitive` mask."""
    model.eval()
    totals = {k: 0.0 for k in ("nll_all", "n_all", "nll_private", "n_private", "nll_public", "n_public", "correct")}
    for i in range(0, len(data), batch_size):
        ids = data.input_ids[i : i + batch_size]
        logits = model(ids)[:, :-1]
        targets = ids[:, 1:]
        valid = data.weights[i : i + batch_size, 1:] > 0
        private = data.sensitive[i : i + batch_size, 1:] & valid
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        for name, mask in (("all", valid), ("private", private), ("public", valid & ~private)):
            totals[f"nll_{name}"] += nll[mask].sum().item()
            totals[f"n_{name}"] += mask.sum().item()
        totals["correct"] += (logits.argmax(-1) == targets)[valid].sum().item()
    model.train()
    return totals


def _ppl(nll: float, n: float) -> float | None:
    return math.exp(min(nll / n, 50.0)) if n else None


def utility_metrics(model: nn.Module, data: LMData, prefix: str) -> dict[str, float | None]:
    """`{prefix}_perplexity`, `{prefix}_private_perplexity`, `{prefix}_public_perplexity`, `{prefix}_accuracy`."""
    t = token_statistics(model, data)
    return {
        f"{prefix}_perplexity": _ppl(t["nll_all"], t["n_all"]),
        f"{prefix}_private_perplexity": _ppl(t["nll_private"], t["n_private"]),
        f"{prefix}_public_perplexity": _ppl(t["nll_public"], t["n_public"]),
        f"{prefix}_accuracy": t["correct"] / t["n_all"] if t["n_all"] else None,
    }
