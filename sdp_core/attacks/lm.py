"""One view of our language models for the attacks: score whole sequences, or extend a cached state by one token.

Both attacks need log p(token | everything before it). The trie enumeration of canary candidates additionally
needs to *continue* from a cached state (GPT-2 keys/values, the LSTM's (h, c)) for many branches at once: the
state of a batch of trie nodes is gathered from their parents' rows and extended by one token each. The vocabulary
head is kept apart from the body so that only the positions that are scored pay for the [V]-wide projection.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import torch
from torch import nn
from transformers import DynamicCache, GPT2Model

from sdp_core.errors import UserError
from sdp_core.models.gpt2 import GPT2LM
from sdp_core.models.lstm import LSTMLM


class SteppableLM(Protocol):
    """A model split into body (ids -> hidden states, with a cache) and head (hidden -> logits)."""

    device: torch.device
    max_positions: int | None

    def prefill(self, ids: torch.Tensor, keep: int, cache: bool) -> tuple[torch.Tensor, Any]:
        """Hidden states [B, keep, H] of the last `keep` positions, and the state after all of `ids` (if `cache`)."""
        ...

    def step(self, state: Any, rows: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Extend row `rows[i]` of `state` by `tokens[i]`: hidden states [n, H] and the new n-row state."""
        ...

    def head(self, hidden: torch.Tensor) -> torch.Tensor: ...


CACHE = "cache" if "cache" in inspect.signature(GPT2Model.forward).parameters else "past_key_values"
"""What the installed transformers calls the key/value cache, in and out of a forward (`past_key_values` before
its rename, which the new name's releases still take with a deprecation notice on every audit)."""


class _GPT2:
    def __init__(self, lm: GPT2LM):
        self.body, self.lm_head = lm.model.transformer, lm.model.lm_head
        self.device = lm.model.device
        self.max_positions = lm.model.config.n_positions

    def prefill(self, ids: torch.Tensor, keep: int, cache: bool) -> tuple[torch.Tensor, Any]:
        b, t = ids.shape
        out = self.body(input_ids=ids, position_ids=torch.arange(t, device=ids.device).repeat(b, 1), use_cache=cache)
        state = ([(layer.keys, layer.values) for layer in getattr(out, CACHE).layers], t) if cache else None
        return out.last_hidden_state[:, t - keep :], state

    def step(self, state: Any, rows: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        kv, t = state
        past = DynamicCache(ddp_cache_data=[(k[rows], v[rows]) for k, v in kv])
        n = len(tokens)
        out = self.body(input_ids=tokens[:, None], position_ids=torch.full((n, 1), t, device=tokens.device),
                        use_cache=True, **{CACHE: past})
        return out.last_hidden_state[:, 0], ([(layer.keys, layer.values) for layer in past.layers], t + 1)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)


class _LSTM:
    max_positions: int | None = None  # any length

    def __init__(self, lm: LSTMLM):
        self.lm = lm
        self.device = lm.head.weight.device
        self.max_positions = None

    def prefill(self, ids: torch.Tensor, keep: int, cache: bool) -> tuple[torch.Tensor, Any]:
        out, state = self.lm.lstm(self.lm.embedding(ids))
        return out[:, ids.shape[1] - keep :], state if cache else None

    def step(self, state: Any, rows: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        h, c = state
        out, new_state = self.lm.lstm(self.lm.embedding(tokens[:, None]), (h[:, rows], c[:, rows]))
        return out[:, 0], new_state

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm.head(hidden)


def steppable(model: nn.Module) -> SteppableLM:
    """The attack view of a `GPT2LM` or `LSTMLM` (put in eval mode: dropout would randomise the scores)."""
    model.eval()
    if isinstance(model, GPT2LM):
        return _GPT2(model)
    if isinstance(model, LSTMLM):
        return _LSTM(model)
    raise UserError(f"the attacks need a GPT2LM or LSTMLM language model, not {type(model).__name__}")


def log_softmax_head(lm: SteppableLM, hidden: torch.Tensor) -> torch.Tensor:
    """log p(· | state) for each hidden state, in float32 whatever the model's dtype."""
    return torch.log_softmax(lm.head(hidden).float(), dim=-1)


def selected_logprobs(lm: SteppableLM, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(ids[b, t + 1] | ids[b, :t + 1]) wherever `targets[b, t]` ([B, T - 1] bool), in row-major order: the
    head runs only at those positions (with a small model and a large vocabulary, most of a forward pass)."""
    hidden, _ = lm.prefill(ids, keep=ids.shape[1], cache=False)
    targets = targets.to(ids.device)
    logprobs = log_softmax_head(lm, hidden[:, :-1][targets])
    return logprobs.gather(-1, ids[:, 1:][targets][:, None]).squeeze(-1)


def target_logprobs(lm: SteppableLM, ids: torch.Tensor, start: int) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t = start .. T-1: [B, T - start]. Padding after a row's end is harmless
    (every model here is causal) as long as the caller masks the padded targets."""
    hidden, _ = lm.prefill(ids, keep=ids.shape[1] - start + 1, cache=False)
    logprobs = log_softmax_head(lm, hidden[:, :-1])
    return logprobs.gather(-1, ids[:, start:, None]).squeeze(-1)
