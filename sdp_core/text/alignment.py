"""Character spans -> per-token `sensitive` masks, for any tokenizer that reports character offsets.

Rule: a token is sensitive iff its [start, end) offsets overlap a span after the span is trimmed of leading and
trailing whitespace. So a byte-level BPE token ' 1234' (offsets include the space) overlapping the span '1234' is
sensitive, a token ' is' right after a span that carelessly includes a trailing space is not, and a zero-width
token (special tokens report (0, 0)) never is. Vectorised: spans are merged into disjoint intervals and every
token is located with one `searchsorted`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sdp_core.data.records import Span


def merged_intervals(text: str | None, spans: Sequence[Span]) -> np.ndarray:
    """Disjoint, sorted [start, end) intervals covering `spans` (trimmed of whitespace when `text` is given);
    overlapping or touching spans are merged. Shape (k, 2), int64."""
    intervals = []
    for s in spans:
        start, end = s.start, s.end
        if text is not None:
            piece = text[start:end]
            start += len(piece) - len(piece.lstrip())
            end -= len(piece) - len(piece.rstrip())
        if end > start:
            intervals.append((start, end))
    intervals.sort()
    merged: list[list[int]] = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return np.asarray(merged, dtype=np.int64).reshape(-1, 2)


def token_mask(offsets: Sequence[tuple[int, int]] | np.ndarray, spans: Sequence[Span], text: str | None = None) -> np.ndarray:
    """Boolean mask over tokens: True where the token's offsets overlap a (whitespace-trimmed) span."""
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    intervals = merged_intervals(text, spans)
    if len(offs) == 0 or len(intervals) == 0:
        return np.zeros(len(offs), dtype=bool)
    starts, ends = intervals[:, 0], intervals[:, 1]
    # The first interval ending after the token starts is the only one that can overlap it.
    idx = np.searchsorted(ends, offs[:, 0], side="right")
    found = idx < len(intervals)
    idx = np.minimum(idx, len(intervals) - 1)
    return found & (starts[idx] < offs[:, 1]) & (offs[:, 0] < offs[:, 1])


def token_masks(
    offsets: Sequence[Sequence[tuple[int, int]] | np.ndarray],
    spans: Sequence[Sequence[Span]],
    texts: Sequence[str] | None = None,
) -> list[np.ndarray]:
    """`token_mask` for a batch of records."""
    if len(offsets) != len(spans) or (texts is not None and len(texts) != len(spans)):
        raise ValueError("offsets, spans and texts must have one entry per record")
    return [token_mask(o, s, texts[i] if texts is not None else None) for i, (o, s) in enumerate(zip(offsets, spans))]
