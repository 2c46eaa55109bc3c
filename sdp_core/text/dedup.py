"""Sentence deduplication for CRT (Zhao et al. 2022, §3.2 "Deduplication"): the second and later copies of a
sentence are replaced by `<mask>`; first copies stay. One pass over the corpus with a set of hashes (the paper
hashes with SHA-1; a 128-bit BLAKE2b digest serves the same purpose). `duplicate_spans` gives the copies as
spans, to be redacted together with a policy's spans; `dedup_sentences` applies them directly.

Sentences (no spaCy): every line is split after a run of `.`, `!` or `?` followed by whitespace or the line end;
a leading speaker label (`SYS:`, `USR:`, any one word and a colon at the start of a line) is not part of the
sentence, so the label survives and the same utterance by either speaker counts as a duplicate. Decimal points
("3.5") do not split; abbreviations ("e.g. this") do, which only makes the units smaller.
Normalisation before comparison: lower-case and every whitespace run folded to one space.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

from sdp_core.data.records import Span
from sdp_core.text.redaction import MASK, redact

_SPEAKER = re.compile(r"[A-Za-z]+:[ \t]+")
_SENTENCE = re.compile(r"\S.*?(?:[.!?]+(?=\s|$)|$)")
_WHITESPACE = re.compile(r"\s+")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the sentences of `text`, in order (whitespace between them excluded)."""
    spans = []
    pos = 0
    for line in text.split("\n"):
        speaker = _SPEAKER.match(line)
        spans += [(pos + m.start(), pos + m.end()) for m in _SENTENCE.finditer(line, speaker.end() if speaker else 0)]
        pos += len(line) + 1
    return spans


def _digest(sentence: str) -> bytes:
    normalised = _WHITESPACE.sub(" ", sentence.lower()).strip()
    return hashlib.blake2b(normalised.encode("utf-8"), digest_size=16).digest()


def duplicate_spans(texts: Sequence[str]) -> list[list[Span]]:
    """Per text, the spans (label `duplicate`) of sentences already seen earlier in the corpus or the text."""
    seen: set[bytes] = set()
    out = []
    for text in texts:
        spans = []
        for start, end in split_sentences(text):
            digest = _digest(text[start:end])
            if digest in seen:
                spans.append(Span(start, end, "duplicate"))
            else:
                seen.add(digest)
        out.append(spans)
    return out


def dedup_sentences(texts: Sequence[str], mask: str = MASK) -> tuple[list[str], int]:
    """Texts with every repeated sentence after its first occurrence (in corpus order) masked, and how many
    sentences were masked. Masking follows `redact`, so adjacent duplicates become a single `mask`."""
    spans = duplicate_spans(texts)
    return [redact(t, s, mask) for t, s in zip(texts, spans)], sum(map(len, spans))
