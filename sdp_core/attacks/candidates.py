"""The token sequences of a canary format's candidates, as numpy arrays (no Python object per candidate).

A candidate is `context + prefix + secret + suffix`, tokenized as a whole: a BPE may merge characters across the
secret's edges or inside it, so tokenizing pieces separately would score sequences the model never sees. The
token prefix shared by every candidate is the cached context; the remainders (padded with -1) are what is scored.

Secrets are handled as rows of alphabet positions (`chars[i, j]` = index of character j in alphabet j), so
spaces too large for a 64-bit index (e.g. 36^16) can still be sampled.
"""

from __future__ import annotations

import itertools
import json
import string
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from sdp_core.config.canary import CanaryFormat
from sdp_core.errors import UserError

PAD = -1
_ENCODE_CHUNK = 65_536


@dataclass(frozen=True)
class CandidateTokens:
    context: np.ndarray  # [c] token ids every candidate starts with (evaluated once and cached)
    rest: np.ndarray  # [N, L] int64 remaining token ids of each candidate, PAD after its end
    lengths: np.ndarray  # [N] number of real tokens in each row of `rest`

    def __len__(self) -> int:
        return len(self.rest)


def default_context(tokenizer: PreTrainedTokenizerBase, lead: str = "") -> str:
    """What precedes a canary: a record start (`<eos>` acts as BOS), then `lead`, the text the canary follows in
    its record (`Canaries.context`: a dialog's speaker tag and a space, or a space in prose)."""
    return (tokenizer.eos_token or "") + lead


def secret_chars(fmt: CanaryFormat, secrets: Sequence[str]) -> np.ndarray:
    """[n, k] alphabet positions of the given secrets; the error never echoes a secret."""
    rows = []
    for n, secret in enumerate(secrets, 1):
        if len(secret) != len(fmt.alphabets) or any(ch not in a for ch, a in zip(secret, fmt.alphabets)):
            raise UserError(f"secret #{n} does not fit the canary format {fmt.template!r}")
        rows.append([a.index(ch) for ch, a in zip(secret, fmt.alphabets)])
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), len(fmt.alphabets))


def _radix(fmt: CanaryFormat) -> tuple[np.ndarray, np.ndarray]:
    """(base, stride) of each secret position in the mixed-radix numbering of `fmt.all_secrets()`."""
    bases = np.array([len(a) for a in fmt.alphabets], dtype=np.int64)
    return bases, np.concatenate([np.cumprod(bases[::-1])[::-1][1:], [1]])


def all_chars(fmt: CanaryFormat) -> np.ndarray:
    """Every candidate, in `fmt.all_secrets()` order."""
    bases, strides = _radix(fmt)
    return (np.arange(fmt.space_size, dtype=np.int64)[:, None] // strides) % bases


def random_chars(fmt: CanaryFormat, n: int, rng: np.random.Generator) -> np.ndarray:
    """n candidates drawn uniformly (with replacement) from the format's space."""
    return np.stack([rng.integers(0, len(a), n) for a in fmt.alphabets], axis=1)


def chars_index(fmt: CanaryFormat, chars: np.ndarray) -> np.ndarray:
    """Position of each row in `all_chars(fmt)` (only for spaces that fit in int64)."""
    return chars @ _radix(fmt)[1]


def _render(fmt: CanaryFormat, context: str, chars: np.ndarray) -> Iterator[str]:
    tables = [np.array(list(a)) for a in fmt.alphabets]
    for lo in range(0, len(chars), _ENCODE_CHUNK):
        block = chars[lo : lo + _ENCODE_CHUNK]
        columns = [tables[j][block[:, j]] for j in range(block.shape[1])]
        for secret in map("".join, zip(*columns)):
            yield context + fmt.render(secret)


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.backend_tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


def _isolates_digits(tokenizer: PreTrainedTokenizerBase) -> bool:
    """True when the tokenizer has no normalizer and pre-splits every digit into its own piece (our default BPE):
    then a digit's token never depends on its neighbours, and candidates can be assembled from per-digit tokens."""
    config = json.loads(tokenizer.backend_tokenizer.to_str())

    def has_digit_split(node: object) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "Digits" and node.get("individual_digits"):
                return True
            return any(has_digit_split(v) for v in node.values())
        return isinstance(node, list) and any(has_digit_split(v) for v in node)

    return config.get("normalizer") is None and has_digit_split(config.get("pre_tokenizer"))


def _assembled(tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, context: str,
               chars: np.ndarray) -> CandidateTokens | None:
    """Candidates built from per-character tokens (digit formats under a digit-isolating tokenizer), or None."""
    if not all(set(a) <= set(string.digits) for a in fmt.alphabets) or not _isolates_digits(tokenizer):
        return None
    digit_tokens = _encode(tokenizer, list(string.digits))
    if any(len(t) != 1 for t in digit_tokens):
        return None
    digit_id = {d: t[0] for d, t in zip(string.digits, digit_tokens)}
    tables = [np.array([digit_id[ch] for ch in a], dtype=np.int64) for a in fmt.alphabets]
    head, tail = _encode(tokenizer, [context + fmt.prefix, fmt.suffix])
    rest = np.concatenate([np.stack([tables[j][chars[:, j]] for j in range(chars.shape[1])], axis=1),
                           np.broadcast_to(np.asarray(tail, dtype=np.int64), (len(chars), len(tail)))], axis=1)
    # Belt and braces: a few whole candidates must tokenize exactly as assembled.
    probe = np.random.default_rng(0).choice(len(chars), min(32, len(chars)), replace=False)
    encoded = _encode(tokenizer, list(_render(fmt, context, chars[probe])))
    if any(e != head + rest[i].tolist() for i, e in zip(probe, encoded)):
        return None
    return CandidateTokens(np.asarray(head, dtype=np.int64), np.ascontiguousarray(rest),
                           np.full(len(chars), rest.shape[1], dtype=np.int64))


def _tokenized(tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, context: str,
               chars: np.ndarray) -> CandidateTokens:
    """Any tokenizer: encode every candidate (in chunks, straight into a padded array) and split off the
    longest common token prefix."""
    blocks, texts = [], _render(fmt, context, chars)
    for lo in range(0, len(chars), _ENCODE_CHUNK):
        ids = _encode(tokenizer, [next(texts) for _ in range(min(_ENCODE_CHUNK, len(chars) - lo))])
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        block = np.full((len(ids), lengths.max()), PAD, dtype=np.int64)
        block[np.arange(block.shape[1]) < lengths[:, None]] = np.fromiter(itertools.chain.from_iterable(ids), np.int64)
        blocks.append(block)
    width = max(b.shape[1] for b in blocks)
    full = np.concatenate([np.pad(b, ((0, 0), (0, width - b.shape[1])), constant_values=PAD) for b in blocks])
    shared = np.all(full == full[0], axis=0) & (full[0] != PAD)
    c = width if shared.all() else int(np.argmin(shared))
    rest = full[:, c:]
    return CandidateTokens(full[0, :c].copy(), np.ascontiguousarray(rest), (rest != PAD).sum(1))


def candidate_tokens(tokenizer: PreTrainedTokenizerBase, fmt: CanaryFormat, context: str,
                     chars: np.ndarray) -> CandidateTokens:
    """Token sequences of the candidates `chars` ([n, k] alphabet positions), split into shared context and rest."""
    cand = _assembled(tokenizer, fmt, context, chars)
    if cand is None:
        cand = _tokenized(tokenizer, fmt, context, chars)
    if len(cand.context) == 0:
        raise UserError("canary exposure needs a non-empty context before the secret (e.g. the tokenizer's eos token)")
    return cand
