"""Utility metrics: perplexity (all / private-only / public-only tokens) and top-1 next-token accuracy for a
language model; cross-entropy loss and accuracy for a classifier (`{prefix}_accuracy` in both cases).

All metrics are computed on the *original* (unredacted) text over every real token, so mechanisms that train
on redacted data are judged on what users will feed them.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from sdp_core.tensors import LMData, model_device


@torch.no_grad()
def token_statistics(model: nn.Module, data: LMData, batch_size: int = 64) -> dict[str, float]:
    """Summed NLL and counts over target tokens, split by the data's `sensitive` mask."""
    model.eval()
    totals = {k: 0.0 for k in ("nll_all", "n_all", "nll_private", "n_private", "nll_public", "n_public", "correct")}
    device = model_device(model)
    for i in range(0, len(data), batch_size):
        batch = data.subset(range(i, min(i + batch_size, len(data)))).to(device)
        logits = model(batch.input_ids)[:, :-1]
        targets = batch.input_ids[:, 1:]
        valid = batch.weights[:, 1:] > 0
        private = batch.sensitive[:, 1:] & valid
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        for name, mask in (("all", valid), ("private", private), ("public", valid & ~private)):
            totals[f"nll_{name}"] += nll[mask].sum().item()
            totals[f"n_{name}"] += mask.sum().item()
        totals["correct"] += (logits.argmax(-1) == targets)[valid].sum().item()
    model.train()
    return totals


def _ppl(nll: float, n: float) -> float | None:
    return math.exp(min(nll / n, 50.0)) if n else None


def language_model_metrics(model: nn.Module, data: LMData, prefix: str) -> dict[str, float | None]:
    """`{prefix}_perplexity`, `{prefix}_private_perplexity`, `{prefix}_public_perplexity`, `{prefix}_accuracy`."""
    t = token_statistics(model, data)
    return {
        f"{prefix}_perplexity": _ppl(t["nll_all"], t["n_all"]),
        f"{prefix}_private_perplexity": _ppl(t["nll_private"], t["n_private"]),
        f"{prefix}_public_perplexity": _ppl(t["nll_public"], t["n_public"]),
        f"{prefix}_accuracy": t["correct"] / t["n_all"] if t["n_all"] else None,
    }


@torch.no_grad()
def classification_metrics(model: nn.Module, data: LMData, prefix: str, batch_size: int = 64) -> dict[str, float]:
    """`{prefix}_loss` (mean cross-entropy) and `{prefix}_accuracy` (top-1) of a classifier on labelled rows."""
    model.eval()
    nll, correct = 0.0, 0
    device = model_device(model)
    for i in range(0, len(data), batch_size):
        batch = data.subset(range(i, min(i + batch_size, len(data)))).to(device)
        logits, labels = model(batch.input_ids), batch.labels
        nll += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
    model.train()
    return {f"{prefix}_loss": nll / len(data), f"{prefix}_accuracy": correct / len(data)}


TASK_METRICS: dict[str, Callable[[nn.Module, LMData, str], dict[str, float | None]]] = {
    "lm": language_model_metrics,
    "classification": classification_metrics,
}


def utility_metrics(model: nn.Module, data: LMData, prefix: str) -> dict[str, float | None]:
    """The utility metrics of the data's task (`TASK_METRICS`), each named `{prefix}_...`."""
    return TASK_METRICS[data.task](model, data, prefix)
