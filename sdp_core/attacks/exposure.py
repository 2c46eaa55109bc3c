"""Exact canary exposure (Carlini et al. 2019, *The Secret Sharer*; as used by Shi et al. 2022, §5.1.1).

    exposure(s) = log2 |R| − log2 rank(s)

rank(s) is the 1-based position of the canary among *all* |R| candidates of its format, ordered by the model's
summed log-probability of the candidate's tokens after the shared context (secret and suffix). Summed, not
per-token, log-probability: when a tokenizer splits secrets into unequal numbers of tokens, per-token perplexity
favours the longer splits (the released code of the papers ranked by perplexity). Ties count against the canary:
rank = #candidates scoring ≥ the canary, itself included, so a model indifferent to the secret gives rank |R| and
exposure 0 rather than a lucky rank.

Two enumerations give the same scores:
- `trie`: the candidates' token sequences form a trie below the cached context; every distinct token prefix is
  run through the model once, siblings batched together (one [V] log-softmax per inner node), so |R| = 10^6
  six-digit secrets cost ~1.1·10^5 one-token steps instead of 10^6 full sequences.
- `naive`: every candidate scored as a full sequence, in batches; the reference the trie is tested against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from sdp_core.attacks.candidates import (PAD, CandidateTokens, all_chars, candidate_tokens, chars_index,
                                         default_context, secret_chars)
from sdp_core.attacks.lm import SteppableLM, log_softmax_head, steppable, target_logprobs
from sdp_core.config.canary import CanaryFormat
from sdp_core.errors import UserError

Enumeration = Literal["trie", "naive"]
Progress = Callable[[int], None]  # called with the number of candidates just scored


def naive_scores(lm: SteppableLM, cand: CandidateTokens, batch_size: int,
                 progress: Progress | None = None) -> np.ndarray:
    """Summed log-probability of each candidate's remaining tokens, every candidate run as a full sequence.
    (Like `trie_scores`, meant to run under `torch.inference_mode()`, as `score_candidates` does.)"""
    context = torch.as_tensor(cand.context, device=lm.device)
    out = np.empty(len(cand))
    for lo in range(0, len(cand), batch_size):
        rest = torch.as_tensor(cand.rest[lo : lo + batch_size], device=lm.device)
        ids = torch.cat([context.expand(len(rest), -1), rest.clamp_min(0)], dim=1)
        logprobs = target_logprobs(lm, ids, start=len(context)).double().masked_fill(rest == PAD, 0.0)
        out[lo : lo + len(rest)] = logprobs.sum(1).cpu().numpy()
        if progress is not None:
            progress(len(rest))
    return out


@dataclass(frozen=True)
class _Trie:
    """Nodes by depth (depth 0: the context alone). At each depth nodes are sorted by (parent, token), so a node's
    children are the contiguous range `children[d][i] : children[d][i + 1]` of depth d + 1."""

    token: list[np.ndarray]  # token[d][i]: the token that node i of depth d adds (depth 0: none)
    children: list[np.ndarray]  # offsets, len = nodes at depth d + 1
    inner: list[np.ndarray]  # inner[d][i]: node i of depth d has children (needs a model step)
    leaf: np.ndarray  # [N] each candidate's node at its depth, which is `lengths[n]`

    @classmethod
    def build(cls, rest: np.ndarray, lengths: np.ndarray) -> "_Trie":
        base = int(rest.max()) + 1
        node = np.zeros(len(rest), dtype=np.int64)
        tokens, parents = [np.zeros(1, dtype=np.int64)], [np.zeros(1, dtype=np.int64)]
        leaf = np.zeros(len(rest), dtype=np.int64)
        for d in range(rest.shape[1]):
            active = np.flatnonzero(lengths > d)
            keys, node[active] = np.unique(node[active] * base + rest[active, d], return_inverse=True)
            parents.append(keys // base)
            tokens.append(keys % base)
            ends = active[lengths[active] == d + 1]
            leaf[ends] = node[ends]
        children = [np.searchsorted(parents[d + 1], np.arange(len(tokens[d]) + 1)) for d in range(len(tokens) - 1)]
        children.append(np.zeros(len(tokens[-1]) + 1, dtype=np.int64))
        return cls(tokens, children, [np.diff(c) > 0 for c in children], leaf)


def trie_scores(lm: SteppableLM, cand: CandidateTokens, batch_size: int,
                progress: Progress | None = None) -> np.ndarray:
    """The same scores as `naive_scores`, each distinct token prefix evaluated once from its parent's cached state.

    Depth-first over batches of at most `batch_size` sibling nodes, so memory stays at (depth × batch) states.
    """
    trie = _Trie.build(cand.rest, cand.lengths)
    scores = [np.zeros(len(t)) for t in trie.token]
    # A pending batch: (depth, its nodes, their parents' rows in `state`, the parents' state).
    pending: list[tuple[int, np.ndarray, np.ndarray, Any]] = []

    def expand(d: int, nodes: np.ndarray, hidden: torch.Tensor, state: Any) -> None:
        """Score the children of `nodes` (depth d) from their next-token distributions; queue inner children."""
        logprobs = log_softmax_head(lm, hidden)
        start, stop = trie.children[d][nodes], trie.children[d][nodes + 1]
        counts = stop - start
        row = np.repeat(np.arange(len(nodes)), counts)
        kids = np.repeat(start - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        picked = logprobs[torch.as_tensor(row, device=lm.device),
                          torch.as_tensor(trie.token[d + 1][kids], device=lm.device)]
        scores[d + 1][kids] = scores[d][nodes][row] + picked.double().cpu().numpy()
        inner = trie.inner[d + 1][kids]
        if progress is not None and (~inner).any():
            progress(int((~inner).sum()))
        inner_kids, inner_rows = kids[inner], row[inner]
        for lo in range(0, len(inner_kids), batch_size):
            pending.append((d + 1, inner_kids[lo : lo + batch_size], inner_rows[lo : lo + batch_size], state))

    hidden, state = lm.prefill(torch.as_tensor(cand.context, device=lm.device)[None], keep=1, cache=True)
    expand(0, np.zeros(1, dtype=np.int64), hidden[:, 0], state)
    while pending:
        d, nodes, rows, parent_state = pending.pop()
        tokens = torch.as_tensor(trie.token[d][nodes], device=lm.device)
        hidden, state = lm.step(parent_state, torch.as_tensor(rows, device=lm.device), tokens)
        expand(d, nodes, hidden, state)
    out = np.empty(len(cand))
    for d in np.unique(cand.lengths):
        at = cand.lengths == d
        out[at] = scores[d][trie.leaf[at]]
    return out


SCORERS: dict[str, Callable[[SteppableLM, CandidateTokens, int, Progress | None], np.ndarray]] = {
    "trie": trie_scores, "naive": naive_scores,
}


def score_candidates(model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, chars: np.ndarray, *,
                     enumeration: Enumeration, context: str | None = None, batch_size: int = 1024,
                     progress: Progress | None = None) -> np.ndarray:
    """Summed log-probability (nats) of the candidates `chars` ([n, k] alphabet positions) given the context
    (default `<eos>`) and the format's prefix, comparable across candidates of one call."""
    lm = steppable(model)
    cand = candidate_tokens(tokenizer, fmt, default_context(tokenizer) if context is None else context, chars)
    if lm.max_positions is not None and len(cand.context) + cand.rest.shape[1] > lm.max_positions:
        raise UserError(f"canary {fmt.template!r} with its context is longer than the model's "
                        f"{lm.max_positions} positions")
    with torch.inference_mode():
        return SCORERS[enumeration](lm, cand, batch_size, progress)


def check_enumerable(fmt: CanaryFormat, limit: int) -> None:
    if fmt.space_size > limit:
        raise UserError(f"canary format {fmt.template!r} has {fmt.space_size:.3g} candidates, above the exact "
                        f"enumeration limit {limit:,}: use method estimate")


def score_space(model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, *,
                enumeration: Enumeration = "trie", context: str | None = None, batch_size: int = 1024,
                limit: int = 1_000_000, progress: Progress | None = None) -> np.ndarray:
    """The score of every candidate of the format, in `fmt.all_secrets()` order."""
    check_enumerable(fmt, limit)
    return score_candidates(model, tokenizer, fmt, all_chars(fmt), enumeration=enumeration, context=context,
                            batch_size=batch_size, progress=progress)


def exposure_of_rank(rank: float, space_size: int) -> float:
    return math.log2(space_size) - math.log2(rank)


def exposure_floor(space_size: int) -> float:
    """The expected exposure of a secret the model has not memorised, whose rank is uniform on 1..|R|:

        E[log2 |R| − log2 rank] = log2 |R| − log2(|R|!)/|R|  →  E[−log2 U] = 1/ln 2 ≈ 1.44 bits as |R| grows

    (the exposure of Carlini et al. 2019 at a random rank). Near it means "not memorised"; it is not 0 bits.
    """
    return math.log2(space_size) - math.lgamma(space_size + 1) / (space_size * math.log(2))


def rank_secrets(scores: np.ndarray, fmt: CanaryFormat, secrets: Sequence[str]) -> list[dict]:
    """Rank and exposure of each secret among all candidates (`scores` from `score_space`); no secret values."""
    index = chars_index(fmt, secret_chars(fmt, secrets))
    ordered = np.sort(scores)
    ranks = len(scores) - np.searchsorted(ordered, scores[index], side="left")  # #scores ≥ the secret's
    return [{"rank": int(r), "exposure": exposure_of_rank(int(r), len(scores)), "score": float(scores[i])}
            for r, i in zip(ranks, index)]


def space_summary(scores: np.ndarray) -> dict:
    """What the score distribution alone says, without knowing any canary: how much of the format's probability
    mass the top candidate holds (1/|R| for an indifferent model) and the exposure it would have (0 when tied)."""
    top = scores.max()
    second = np.partition(scores, -2)[-2]
    log_mass = top + math.log(np.exp(scores - top).sum())
    return {
        "space_size": len(scores),
        "top_exposure": exposure_of_rank(int((scores >= top).sum()), len(scores)),
        "top_share": math.exp(top - log_mass),
        "uniform_share": 1 / len(scores),
        "top_gap_bits": (top - second) / math.log(2),
    }


def _exposure(enumeration: Enumeration, model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat,
              canary_secret: str, context: str | None, batch_size: int, limit: int) -> dict:
    scores = score_space(model, tokenizer, fmt, enumeration=enumeration, context=context, batch_size=batch_size,
                         limit=limit)
    return {**rank_secrets(scores, fmt, [canary_secret])[0], "space_size": fmt.space_size, "method": "exact",
            "enumeration": enumeration}


def exposure_exact(model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, canary_secret: str, *,
                   context: str | None = None, batch_size: int = 1024, limit: int = 1_000_000) -> dict:
    """Exposure of one canary by trie enumeration of its whole format space.

    Returns `exposure`, `rank`, `score` (summed log-probability, nats), `space_size`, `method`, `enumeration`.
    """
    return _exposure("trie", model, tokenizer, fmt, canary_secret, context, batch_size, limit)


def exposure_naive(model: nn.Module, tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, canary_secret: str, *,
                   context: str | None = None, batch_size: int = 1024, limit: int = 1_000_000) -> dict:
    """`exposure_exact` scoring every candidate as a full sequence (the reference; much slower)."""
    return _exposure("naive", model, tokenizer, fmt, canary_secret, context, batch_size, limit)
