"""Redaction: every maximal sensitive run of a text becomes ONE `<mask>` (Shi et al., JFT §3.1; Zhao et al., CRT §3.2).

A run is a union of spans (trimmed of surrounding whitespace) that overlap, touch, or are separated only by
whitespace: "Betty" + "Sims" detected separately give one `<mask>`, not two, so the number of masks does not
reveal how many words a secret had. Spans separated by anything else (", " in "Betty, 555-123-4567") stay
separate masks. The tokenizer holds `<mask>` as one atomic special token that the loss ignores.
"""

from __future__ import annotations

from typing import Sequence

from sdp_core.data.records import Span, TextsOnRead
from sdp_core.text.alignment import merged_intervals

MASK = "<mask>"


def redaction_runs(text: str, spans: Sequence[Span]) -> list[tuple[int, int]]:
    """The maximal [start, end) runs `redact` replaces, in order."""
    runs: list[tuple[int, int]] = []
    for start, end in merged_intervals(text, spans).tolist():
        if runs and text[runs[-1][1] : start].isspace():
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
    return runs


def redact(text: str, spans: Sequence[Span], mask: str = MASK) -> str:
    """`text` with each sensitive run replaced by one `mask`."""
    pieces, last = [], 0
    for start, end in redaction_runs(text, spans):
        pieces += [text[last:start], mask]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


class RedactedTexts(TextsOnRead):
    """Texts redacted as they are read: `redact(texts[i], spans[i])` for each i, made on each read and not kept, so
    that a corpus's redacted copy never exists whole (encoding reads it a chunk at a time, `text.encode`)."""

    def __init__(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]):
        assert len(texts) == len(spans), "a list of spans per text"
        super().__init__(len(texts), lambda i: redact(texts[i], spans[i]))
