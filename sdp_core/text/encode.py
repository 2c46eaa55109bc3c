"""Records -> `LMData`: tokenize, cut records longer than a row into windows, add `<eos>` framing, pad, and align
character spans to token masks.

Windows. A row is `<eos> tokens <eos> <pad>...` and holds at most `max_length - 2` tokens of a record. A longer
record becomes several consecutive rows, its windows, which keep the record's `record_index`; every token of the
record lies in exactly one window, so all of it is trained on. A window ends, in this order of preference, at the
latest line start, else the latest sentence start (`data.structure.SENTENCE_END`), else the latest token boundary
outside every sensitive span, else the latest token boundary that keeps it within the row; never inside one of
the `keep_whole` texts (the inserted canaries), so every copy of a canary lies inside one window. A classifier's
label belongs to the whole record, so a labelled record is never split: its tokens past one row are dropped, and
counted (`WindowSummary.tokens_dropped`; 0 for language-model data). `on_long="refuse"` makes any record longer
than a row a one-line `UserError` instead.

Privacy unit. The record, whatever its length: a private phase Poisson-samples records, each with all its windows
(`train.loop`), and clips the sum of its windows' gradients as one (`train.clipping`), so the ledger's q = B/N and
ε count records. `data.max_length` defaults to rows that hold every CustomerSim dialog with a canary line (at most
~180 tokens with framing, measured with the trained BPE), so there a row is a record.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Callable, Literal, Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from sdp_core.data.records import Span
from sdp_core.errors import UserError
from sdp_core.scoped import set_within
from sdp_core.tensors import LMData, array_tensor
from sdp_core.text.alignment import merged_intervals, token_mask
from sdp_core.data.structure import SENTENCE_END

OnLong = Literal["split", "refuse"]


@dataclass(frozen=True)
class WindowSummary:
    """How records became rows: counts only."""

    records: int
    rows: int
    records_split: int  # records of more than one window
    windows_per_record_max: int  # the most rows of one record (all sampled and clipped together)
    tokens: int  # tokens of the records (without framing)
    tokens_dropped: int  # tokens in no row (labelled records longer than a row; else 0)

    def to_dict(self) -> dict:
        return asdict(self)


def _strictly_inside(cuts: np.ndarray, intervals: np.ndarray) -> np.ndarray:
    """For each character position in `cuts`: does it fall strictly inside one of the disjoint sorted intervals?"""
    if len(intervals) == 0:
        return np.zeros(len(cuts), dtype=bool)
    k = np.searchsorted(intervals[:, 0], cuts, side="left") - 1
    return (k >= 0) & (cuts < intervals[np.maximum(k, 0), 1])


def _occurrences(text: str, pieces: Sequence[str]) -> np.ndarray:
    """[start, end) of every occurrence of every piece in `text`, as merged intervals."""
    found = []
    for piece in pieces:
        at = text.find(piece)
        while piece and at >= 0:
            found.append(Span(at, at + len(piece)))
            at = text.find(piece, at + 1)
    return merged_intervals(None, found)


def window_bounds(text: str, offsets: Sequence[tuple[int, int]], spans: Sequence[Span], capacity: int,
                  keep_whole: Sequence[str] = ()) -> list[tuple[int, int]]:
    """[start, end) token ranges of the windows of one record (see the module docstring for where they end)."""
    n = len(offsets)
    if n <= capacity:
        return [(0, n)]
    starts = np.array([a for a, _ in offsets], dtype=np.int64)
    # First non-space character of each token: a byte-level BPE token carries the space before its word.
    words = starts + np.array([len(text[a:b]) - len(text[a:b].lstrip()) for a, b in offsets], dtype=np.int64)
    line = np.array([a > 0 and text[a - 1] == "\n" for a in starts])
    sentence = np.isin(words, [m.end() for m in SENTENCE_END.finditer(text)])
    outside = ~_strictly_inside(starts, merged_intervals(text, spans))
    allowed = ~_strictly_inside(starts, _occurrences(text, keep_whole))
    tiers = [line & outside, sentence & outside, outside, np.ones(n, dtype=bool)]
    bounds, s = [], 0
    while n - s > capacity:
        lo, hi = s + 1, s + capacity  # a cut before token i, lo <= i <= hi
        cut = next((lo + int(np.flatnonzero(ok)[-1]) for tier in tiers
                    if (ok := tier[lo : hi + 1] & allowed[lo : hi + 1]).any()), None)
        if cut is None:
            raise UserError(f"a canary is longer than the {capacity} tokens a row holds: raise data.max_length")
        bounds.append((s, cut))
        s = cut
    return bounds + [(s, n)]


ENCODE_CHUNK = 1_024
"""Records tokenized at a time: the tokenizer's Python lists of ids and offsets (≈ 100 bytes a token) exist for one
chunk only. The rows hold 4 bytes a token: ids in uint16 where the vocabulary fits (`id_dtype`), the 0/1 weights and
the mask as bytes (a batch's are int64 and float: `LMData.subset`)."""


def id_dtype(tokenizer: PreTrainedTokenizerFast) -> type[np.unsignedinteger] | type[np.signedinteger]:
    """The smallest integer type that holds every id of `tokenizer`: uint16 up to 65,536 ids (GPT-2's 50,257)."""
    return np.uint16 if len(tokenizer) <= 1 << 16 else np.int32


@dataclass(frozen=True)
class RowLayout:
    """What encoding reads besides the records' texts and spans: plain data, the same for every block of them."""

    tokenizer: PreTrainedTokenizerFast
    max_length: int
    labelled: bool  # classification rows: a record is one row, never split (its label is the whole record's)
    keep_whole: tuple[str, ...]  # texts no window cuts (the inserted canaries)
    on_long: OnLong


@dataclass(frozen=True)
class EncodedRows:
    """The rows of consecutive records: ids (`id_dtype`), loss weights, secret mask, the record each row is, the
    records' tokens and how many of them the rows hold."""

    input_ids: np.ndarray  # [R, T]
    weights: np.ndarray  # [R, T] bool: every real token after the leading `<eos>`, not padding or `<mask>`
    sensitive: np.ndarray  # [R, T] bool
    record_index: np.ndarray  # [R] int32
    tokens: int
    kept: int

    def rows(self, labels: torch.Tensor | None = None) -> LMData:
        """These rows as a block of `LMData` over these arrays (no copy: in a sweep's preparation, the object store's
        memory), each row's class read from `labels` (one per record of the whole) for classification rows."""
        record_index = array_tensor(self.record_index)
        return LMData(array_tensor(self.input_ids), array_tensor(self.weights), array_tensor(self.sensitive), record_index,
                      None if labels is None else labels[record_index.long()])


RowEncoder = Callable[[Sequence[str], Sequence[Sequence[Span]], RowLayout], Sequence[EncodedRows]]
"""Encodes records as `encode_rows` does, wherever it runs (`encoding_runner`), as blocks of consecutive records."""

_ENCODER: ContextVar[RowEncoder | None] = ContextVar("row_encoder", default=None)


def encoding_runner(encoder: RowEncoder) -> AbstractContextManager[None]:
    """Inside this block, `encode_windows` hands its records to `encoder` (a sweep's preparation: blocks of them
    encoded on the cluster, `sweep.encoding`) instead of encoding them in this process."""
    return set_within(_ENCODER, encoder)


def encode_windows(texts: Sequence[str], spans: Sequence[Sequence[Span]], tokenizer: PreTrainedTokenizerFast,
                   max_length: int, labels: Sequence[int] | None = None, *, keep_whole: Sequence[str] = (),
                   on_long: OnLong = "split") -> tuple[LMData, WindowSummary]:
    """Rows `<eos> window <eos> <pad>...` of every record's windows, in record order, and how they were cut.

    `sensitive` marks tokens overlapping `spans[r]`. Weights (bool) are 1 on every real token after the leading
    `<eos>` and 0 on padding and `<mask>`. With `labels` (one class id per text) the rows are classification data; a
    classifier reads the leading `<eos>`. Records are tokenized `ENCODE_CHUNK` at a time, here or by the encoder of
    an `encoding_runner` block.
    """
    layout = RowLayout(tokenizer, max_length, labels is not None, tuple(keep_whole), on_long)
    encoder = _ENCODER.get()
    blocks = encoder(texts, spans, layout) if encoder is not None else [encode_rows(texts, spans, layout)]
    record_index = np.concatenate([block.record_index for block in blocks])
    windows = np.bincount(record_index, minlength=len(texts))
    summary = WindowSummary(records=len(texts), rows=len(record_index), records_split=int((windows > 1).sum()),
                            windows_per_record_max=int(windows.max(initial=0)), tokens=sum(b.tokens for b in blocks),
                            tokens_dropped=sum(b.tokens - b.kept for b in blocks))
    y = None if labels is None else torch.tensor(labels, dtype=torch.long)
    return LMData.joined([block.rows(y) for block in blocks]), summary


def encode_rows(texts: Sequence[str], spans: Sequence[Sequence[Span]], layout: RowLayout, first: int = 0
                ) -> EncodedRows:
    """The rows of `texts` in this process, `ENCODE_CHUNK` records at a time; record `i` of them is record
    `first + i` of the whole (its number in the rows and in a refusal)."""
    chunks = [_encode_chunk(texts, spans, layout, start, first) for start in range(0, len(texts), ENCODE_CHUNK)]
    return chunks[0] if len(chunks) == 1 else joined_rows(chunks, layout)


def joined_rows(parts: Sequence[EncodedRows], layout: RowLayout) -> EncodedRows:
    """`parts`' rows one after the other, copied into new arrays."""
    n = sum(len(p.record_index) for p in parts)
    ids = np.empty((n, layout.max_length), id_dtype(layout.tokenizer))
    weights = np.empty((n, layout.max_length), np.bool_)
    sensitive = np.empty((n, layout.max_length), np.bool_)
    record_index = np.empty(n, np.int32)
    at = 0
    for part in parts:
        end = at + len(part.record_index)
        ids[at:end], weights[at:end], sensitive[at:end] = part.input_ids, part.weights, part.sensitive
        record_index[at:end] = part.record_index
        at = end
    return EncodedRows(ids, weights, sensitive, record_index, sum(p.tokens for p in parts),
                       sum(p.kept for p in parts))


def _encode_chunk(texts: Sequence[str], spans: Sequence[Sequence[Span]], layout: RowLayout, start: int, first: int
                  ) -> EncodedRows:
    """The rows of records start .. start + `ENCODE_CHUNK` of `texts` (numbered from `first`)."""
    tokenizer, max_length = layout.tokenizer, layout.max_length
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    capacity = max_length - 2
    part = range(start, min(start + ENCODE_CHUNK, len(texts)))
    chunk = [texts[r] for r in part]  # read once: `texts` may make each text as it is read (`RedactedTexts`)
    enc = tokenizer(chunk, add_special_tokens=False, return_offsets_mapping=True)
    lengths = [len(ids) for ids in enc["input_ids"]]
    too_long = next((r for r, k in zip(part, lengths) if k > capacity), None)
    if layout.on_long == "refuse" and too_long is not None:
        raise UserError(f"record #{first + too_long + 1} has {lengths[too_long - start]} tokens, more than the "
                        f"{capacity} a row of data.max_length {max_length} holds: raise data.max_length, or set "
                        f"data.on_long_records: split")
    rows: list[tuple[int, int, int]] = []  # (record in the chunk, first token, end token)
    for i, (ids, offsets) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        if layout.labelled:
            bounds = [(0, min(len(ids), capacity))]
        else:
            bounds = window_bounds(chunk[i], offsets, spans[start + i], capacity, layout.keep_whole)
        rows += [(i, a, b) for a, b in bounds]
    input_ids = np.full((len(rows), max_length), pad, dtype=id_dtype(tokenizer))
    sensitive = np.zeros((len(rows), max_length), dtype=np.bool_)
    record_masks: dict[int, np.ndarray] = {}
    for row, (i, a, b) in enumerate(rows):
        input_ids[row, 0] = eos
        input_ids[row, 1 : b - a + 1] = enc["input_ids"][i][a:b]
        input_ids[row, b - a + 1] = eos
        if spans[start + i]:
            if i not in record_masks:
                record_masks = {i: token_mask(enc["offset_mapping"][i], spans[start + i], chunk[i])}
            sensitive[row, 1 : b - a + 1] = record_masks[i][a:b]
    record_index = np.array([first + start + i for i, _, _ in rows], dtype=np.int32).reshape(len(rows))
    weights = (input_ids != pad) & (input_ids != tokenizer.mask_token_id)
    weights[:, 0] = False
    return EncodedRows(input_ids, weights, sensitive, record_index, sum(lengths), sum(b - a for _, a, b in rows))


def encode(texts: Sequence[str], spans: Sequence[Sequence[Span]], tokenizer: PreTrainedTokenizerFast,
           max_length: int, labels: Sequence[int] | None = None, *, keep_whole: Sequence[str] = (),
           on_long: OnLong = "split") -> LMData:
    """`encode_windows` without its summary."""
    return encode_windows(texts, spans, tokenizer, max_length, labels, keep_whole=keep_whole, on_long=on_long)[0]
