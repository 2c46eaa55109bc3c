"""Sampling audit of a policy without gold spans: estimate the missing rate m̃ from a person's marks.

JFT (Shi et al. 2022, §3.1) needs m̃ = missed sensitive tokens / all tokens, with a 95 % interval, for the
lightly-noised phase 1 (sampling rate p = q·m̃ at both ends of the interval); CRT's γ is estimated the same way.

1. `export_audit(texts, detected, path, n, seed)` writes n records sampled without replacement (seeded) as JSONL:
   `{"index", "text", "redacted", "spans", "missed": []}`. The reviewer reads `redacted` to see what is left
   and fills `missed` with what the policy let through: strings (every occurrence is marked) or
   `{"start": s, "end": e}` character spans of `text`.
2. `read_audit(path)` reads the marks back (a malformed file is a one-line DataError naming the line).
3. `missing_rate(items)` counts missed tokens (tokens overlapping a mark and no detected span) over all tokens
   of the sample, in the same units as `evaluation` (default `word_offsets`), with a Wilson interval.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sdp_core.data.records import Span
from sdp_core.detectors.evaluation import Rate, word_offsets
from sdp_core.errors import DataError
from sdp_core.io import atomic_write_text
from sdp_core.text.alignment import token_mask
from sdp_core.text.redaction import redact


@dataclass(frozen=True)
class AuditItem:
    index: int  # position of the record in the audited dataset
    text: str
    spans: tuple[Span, ...]  # what the policy detected
    missed: tuple[Span, ...]  # what the reviewer marked as missed


def export_audit(
    texts: Sequence[str], detected: Sequence[Sequence[Span]], path: str | Path, n: int, seed: int = 0
) -> list[int]:
    """Write a seeded sample of n records for review; returns the sampled record indices (sorted)."""
    if len(texts) != len(detected):
        raise ValueError("texts and detected must have one entry per record")
    indices = sorted(random.Random(seed).sample(range(len(texts)), min(n, len(texts))))
    lines = [
        json.dumps(
            {
                "index": i,
                "text": texts[i],
                "redacted": redact(texts[i], detected[i]),
                "spans": [s.to_dict() for s in detected[i]],
                "missed": [],
            }
        )
        for i in indices
    ]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return indices


def _marks(raw: Any, text: str, where: str) -> list[Span]:
    if not isinstance(raw, list):
        raise DataError("`missed` must be a list", where)
    spans = []
    for mark in raw:
        if isinstance(mark, str):
            if not mark.strip() or mark not in text:
                raise DataError(f"missed string {len(mark)} chars long does not occur in the text", where)
            start = text.find(mark)
            while start != -1:
                spans.append(Span(start, start + len(mark), "missed"))
                start = text.find(mark, start + 1)
        elif isinstance(mark, dict) and isinstance(mark.get("start"), int) and isinstance(mark.get("end"), int):
            if not 0 <= mark["start"] < mark["end"] <= len(text):
                raise DataError(f"missed span [{mark['start']}, {mark['end']}) is outside the text", where)
            spans.append(Span(mark["start"], mark["end"], str(mark.get("label", "missed"))))
        else:
            raise DataError("each `missed` entry must be a string or {start, end}", where)
    return spans


def read_audit(path: str | Path) -> list[AuditItem]:
    """Read a reviewed audit file."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read audit file ({type(e).__name__})", str(path)) from None
    items = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}: line {no}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON ({e.msg})", where) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not isinstance(obj.get("spans"), list):
            raise DataError("an audit line needs `text` and `spans` as written by export_audit", where)
        text = obj["text"]
        spans = tuple(Span(int(s["start"]), int(s["end"]), str(s.get("label", "SECRET"))) for s in obj["spans"])
        items.append(AuditItem(int(obj.get("index", no - 1)), text, spans, tuple(_marks(obj.get("missed", []), text, where))))
    if not items:
        raise DataError("audit file holds no records", str(path))
    return items


def missing_rate(
    items: Sequence[AuditItem], offsets: Sequence[np.ndarray] | None = None, confidence: float = 0.95
) -> Rate:
    """m̃ = missed sensitive tokens / all tokens of the audited sample, with its Wilson interval."""
    missed = total = 0
    for i, item in enumerate(items):
        offs = word_offsets(item.text) if offsets is None else np.asarray(offsets[i], dtype=np.int64).reshape(-1, 2)
        total += len(offs)
        missed += int((token_mask(offs, item.missed, item.text) & ~token_mask(offs, item.spans, item.text)).sum())
    return Rate.of(missed, total, confidence)
