"""Utility metrics: perplexity (all / private-only / public-only tokens) and top-1 next-token accuracy for a
language model; cross-entropy loss and accuracy for a classifier (`{prefix}_accuracy` in both cases), each with its
95 % interval over its records (`{prefix}_..._ci_low`, `{prefix}_..._ci_high`).

All metrics are computed on the *original* (unredacted) text over every real token, so mechanisms that train
on redacted data are judged on what users will feed them. A trial computes them on a seeded subset of the held-out
records (`evaluation_rows`, `evaluation.held_out_records`), the same for every trial of a sweep.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from scipy.stats import bootstrap
from torch import nn

from sdp_core.tensors import LMData, model_device, record_groups

BOOTSTRAP_RESAMPLES = 2_000


def evaluation_rows(data: LMData, records: int | None, seed: int) -> LMData:
    """The rows of `records` of the data's records, drawn without replacement by `seed` (all of them when `records`
    is None or not below their number), in their order: what every trial of a sweep evaluates on, since it depends
    on the prepared data and the data seed alone. A statistic of the rows (`LMData.statistic`): drawn once, when a
    sweep plans its data, and kept with the rows, so a trial reads the subset's own rows and never the held-out
    split's (a subset scattered over a split would map most of its pages)."""
    if records is None or records >= data.records:
        return data
    return data.statistic(drawn_rows, records, seed)


def drawn_rows(data: LMData, records: int, seed: int) -> LMData:
    """`evaluation_rows`' draw: the rows of `records` records chosen without replacement by `seed`, in their order."""
    ids = data.record_index.unique()
    chosen = np.sort(np.random.default_rng(seed).choice(ids.numpy(), size=records, replace=False))
    return data.subset(torch.isin(data.record_index, torch.from_numpy(chosen)).nonzero().flatten())


def ratio_interval(numerator: np.ndarray, denominator: np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """95 % percentile-bootstrap interval of Σ numerator / Σ denominator over records resampled with replacement
    (Efron & Tibshirani 1993, ch. 13; `scipy.stats.bootstrap`): the record is the sampled unit, since the tokens of
    one record are not independent. Only the records that count (a positive denominator: those with private tokens,
    for the private perplexity) are resampled, so that no resample is empty; None with fewer than two of them."""
    counted = denominator > 0
    if np.count_nonzero(counted) < 2:
        return None

    def ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
        return num.sum(axis) / den.sum(axis)

    result = bootstrap((numerator[counted], denominator[counted]), ratio, paired=True, vectorized=True,
                       method="percentile", n_resamples=BOOTSTRAP_RESAMPLES, batch=200, rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return float(low), float(high)


def with_interval(name: str, numerator: np.ndarray, denominator: np.ndarray,
                  transform: Callable[[float], float] = float) -> dict[str, float | None]:
    """`name`: Σ numerator / Σ denominator through `transform` (increasing), with `name_ci_low`, `name_ci_high` its
    interval (`ratio_interval`; a percentile interval goes through an increasing transform unchanged)."""
    total = denominator.sum()
    interval = ratio_interval(numerator, denominator)
    return {name: transform(numerator.sum() / total) if total else None,
            f"{name}_ci_low": transform(interval[0]) if interval else None,
            f"{name}_ci_high": transform(interval[1]) if interval else None}


def _exp(mean_nll: float) -> float:
    return math.exp(min(mean_nll, 50.0))


@torch.no_grad()
def record_statistics(model: nn.Module, data: LMData, batch_size: int = 64) -> dict[str, np.ndarray]:
    """Per record (in `record_index` order): summed NLL and counts of its target tokens, split by the data's
    `sensitive` mask, and its correct top-1 predictions."""
    model.eval()
    groups = record_groups(data.record_index)
    names = ("nll_all", "n_all", "nll_private", "n_private", "nll_public", "n_public", "correct")
    totals = {k: torch.zeros(int(groups.max()) + 1 if len(groups) else 0, dtype=torch.float64) for k in names}
    device = model_device(model)
    for i in range(0, len(data), batch_size):
        rows = range(i, min(i + batch_size, len(data)))
        batch = data.subset(rows).to(device)
        logits = model(batch.input_ids)[:, :-1]
        targets = batch.input_ids[:, 1:]
        valid = batch.weights[:, 1:] > 0
        private = batch.sensitive[:, 1:] & valid
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        correct = (logits.argmax(-1) == targets) & valid
        group = groups[i : rows.stop]
        for name, mask in (("all", valid), ("private", private), ("public", valid & ~private)):
            totals[f"nll_{name}"].index_add_(0, group, (nll * mask).sum(1).double().cpu())
            totals[f"n_{name}"].index_add_(0, group, mask.sum(1).double().cpu())
        totals["correct"].index_add_(0, group, correct.sum(1).double().cpu())
    model.train()
    return {k: v.numpy() for k, v in totals.items()}


def language_model_metrics(model: nn.Module, data: LMData, prefix: str) -> dict[str, float | None]:
    """`{prefix}_perplexity`, `{prefix}_private_perplexity`, `{prefix}_public_perplexity`, `{prefix}_accuracy`, each
    with its interval."""
    t = record_statistics(model, data)
    return {**with_interval(f"{prefix}_perplexity", t["nll_all"], t["n_all"], _exp),
            **with_interval(f"{prefix}_private_perplexity", t["nll_private"], t["n_private"], _exp),
            **with_interval(f"{prefix}_public_perplexity", t["nll_public"], t["n_public"], _exp),
            **with_interval(f"{prefix}_accuracy", t["correct"], t["n_all"])}


@torch.no_grad()
def classification_metrics(model: nn.Module, data: LMData, prefix: str, batch_size: int = 64
                           ) -> dict[str, float | None]:
    """`{prefix}_loss` (mean cross-entropy) and `{prefix}_accuracy` (top-1) of a classifier on labelled rows, each
    with its interval (the rows of one record resampled together)."""
    model.eval()
    groups = record_groups(data.record_index)
    records = int(groups.max()) + 1 if len(groups) else 0
    nll, correct = torch.zeros(records, dtype=torch.float64), torch.zeros(records, dtype=torch.float64)
    device = model_device(model)
    for i in range(0, len(data), batch_size):
        rows = range(i, min(i + batch_size, len(data)))
        batch = data.subset(rows).to(device)
        logits, labels = model(batch.input_ids), batch.labels
        nll.index_add_(0, groups[i : rows.stop],
                       torch.nn.functional.cross_entropy(logits, labels, reduction="none").double().cpu())
        correct.index_add_(0, groups[i : rows.stop], (logits.argmax(-1) == labels).double().cpu())
    model.train()
    rows_per_record = torch.bincount(groups, minlength=records).double().numpy()
    return {**with_interval(f"{prefix}_loss", nll.numpy(), rows_per_record),
            **with_interval(f"{prefix}_accuracy", correct.numpy(), rows_per_record)}


TASK_METRICS: dict[str, Callable[[nn.Module, LMData, str], dict[str, float | None]]] = {
    "lm": language_model_metrics,
    "classification": classification_metrics,
}


def utility_metrics(model: nn.Module, data: LMData, prefix: str) -> dict[str, float | None]:
    """The utility metrics of the data's task (`TASK_METRICS`), each named `{prefix}_...`."""
    return TASK_METRICS[data.task](model, data, prefix)
