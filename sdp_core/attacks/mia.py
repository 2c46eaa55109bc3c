"""Perplexity-based membership inference on secrets (Carlini et al. 2021, *Extracting Training Data from Large
Language Models*; as run by Shi et al. 2022, §5.1.1: protected secrets from training vs fresh secrets of the same
kind, 50% is a random guess).

The unit is a *secret*: a maximal run of sensitive target tokens in a row of `LMData` (e.g. the gold spans of a
record, in its original text). Its score is the model's mean negative log-likelihood of those tokens given
everything before them in the record (log-perplexity: secrets differ in length, so the mean, not the sum). Lower
means "seen in training". Optionally the score is divided by the secret's zlib entropy (Carlini et al. 2021's
reference-free ratio), which discounts secrets that are simply easy to predict.

The group variant (sums of scores over random groups of `group_size` secrets of one side) asks whether the model
leaks membership in aggregate, even when single secrets are near chance.
"""

from __future__ import annotations

import zlib
from typing import Literal

import numpy as np
import torch
from scipy import stats
from torch import nn
from transformers import PreTrainedTokenizerBase

from sdp_core.attacks.lm import selected_logprobs, steppable
from sdp_core.errors import UserError
from sdp_core.privacy.report import EVALUATION_NOT_COVERED
from sdp_core.tensors import LMData

Reference = Literal["none", "zlib"]


def secret_nll(model: nn.Module, data: LMData, batch_size: int = 32) -> tuple[np.ndarray, list[list[int]]]:
    """(mean NLL of each secret in row-major order, each secret's token ids)."""
    lm = steppable(model)
    nll, tokens = [], []
    with torch.inference_mode():
        for lo in range(0, len(data), batch_size):
            batch = data.subset(range(lo, min(lo + batch_size, len(data))))
            mask = batch.sensitive[:, 1:] & batch.valid[:, 1:]
            # A run starts where the previous target is not sensitive (padding a False column keeps rows apart).
            starts = mask & ~torch.nn.functional.pad(mask[:, :-1], (1, 0))
            run = (torch.cumsum(starts.flatten(), 0) - 1)[mask.flatten()].numpy()
            if len(run) == 0:
                continue
            logprobs = selected_logprobs(lm, batch.input_ids.to(lm.device), mask).cpu()
            counts = np.bincount(run)
            nll.append(np.bincount(run, weights=-logprobs.double().numpy()) / counts)
            tokens.extend(np.split(batch.input_ids[:, 1:][mask].numpy(), np.cumsum(counts)[:-1]))
    return (np.concatenate(nll) if nll else np.zeros(0)), [t.tolist() for t in tokens]


def auc(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """P(score of a random member > that of a random non-member), ties half (Mann–Whitney U)."""
    ranks = stats.rankdata(np.concatenate([members, nonmembers]))
    n, m = len(members), len(nonmembers)
    return float((ranks[:n].sum() - n * (n + 1) / 2) / (n * m))


def best_accuracy(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """Best balanced accuracy (TPR + TNR) / 2 of "member iff score ≥ t" over every threshold t; 0.5 is chance."""
    thresholds = np.concatenate([np.unique(np.concatenate([members, nonmembers])), [np.inf]])
    tpr = 1 - np.searchsorted(np.sort(members), thresholds, side="left") / len(members)
    tnr = np.searchsorted(np.sort(nonmembers), thresholds, side="left") / len(nonmembers)
    return float(((tpr + tnr) / 2).max())


def _groups(scores: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    n = len(scores) // size * size
    return rng.permutation(scores)[:n].reshape(-1, size).sum(1)


def membership_inference(model: nn.Module, member_data: LMData, nonmember_data: LMData, group_size: int = 20, *,
                         reference: Reference = "none", tokenizer: PreTrainedTokenizerBase | None = None,
                         seed: int = 0, batch_size: int = 32) -> dict:
    """Threshold attack on the secrets of `member_data` (training records) vs `nonmember_data` (held-out records).

    Returns `auc`, `best_accuracy` (balanced), `group_auc`, `group_best_accuracy` (None without one full group per
    side), `group_size`, `members`, `nonmembers`, `member_groups`, `nonmember_groups`, `member_nll_mean`,
    `nonmember_nll_mean`, `score` (`mean_nll` or `zlib_ratio`), `unit` (`secret`) and `not_covered`: these
    statistics read the training records without noise, so the trial's ε does not cover them. No secret text.
    """
    if reference == "zlib" and tokenizer is None:
        raise UserError("membership inference with reference zlib needs the tokenizer")
    sides = []
    for data in (member_data, nonmember_data):
        nll, tokens = secret_nll(model, data, batch_size)
        if len(nll) == 0:
            raise UserError("membership inference needs sensitive tokens (secrets) in both member and non-member data")
        score = nll
        if reference == "zlib":
            assert tokenizer is not None, "the zlib reference decodes the secrets' tokens"
            entropy = np.array([8 * len(zlib.compress(tokenizer.decode(t).encode("utf-8"))) for t in tokens])
            score = nll / entropy
        sides.append((nll, -score))  # attack score: higher = more likely a member
    (member_nll, member), (nonmember_nll, nonmember) = sides
    rng = np.random.default_rng(seed)
    member_groups, nonmember_groups = _groups(member, group_size, rng), _groups(nonmember, group_size, rng)
    grouped = len(member_groups) > 0 and len(nonmember_groups) > 0
    return {
        "auc": auc(member, nonmember),
        "best_accuracy": best_accuracy(member, nonmember),
        "group_auc": auc(member_groups, nonmember_groups) if grouped else None,
        "group_best_accuracy": best_accuracy(member_groups, nonmember_groups) if grouped else None,
        "group_size": group_size,
        "members": len(member),
        "nonmembers": len(nonmember),
        "member_groups": len(member_groups),
        "nonmember_groups": len(nonmember_groups),
        "member_nll_mean": float(member_nll.mean()),
        "nonmember_nll_mean": float(nonmember_nll.mean()),
        "score": "zlib_ratio" if reference == "zlib" else "mean_nll",
        "unit": "secret",
        "not_covered": EVALUATION_NOT_COVERED["membership_inference"],
    }
