"""The unit of data everywhere: a text record with optional gold secret spans."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass(frozen=True, order=True, slots=True)
class Span:
    """A character span [start, end) of a record's text, with a label such as `PERSON` or `phone`. Slotted, as is
    `Record`: a corpus holds millions of them (about 120 bytes each instead of 300)."""

    start: int
    end: int
    label: str = "SECRET"

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "label": self.label}


@dataclass(frozen=True, slots=True)
class Record:
    """One training record. `spans` is None when the data carries no gold annotation."""

    text: str
    spans: tuple[Span, ...] | None = None
    label: int | None = None  # class label for sequence classification data
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def secrets(self) -> list[str]:
        """The gold secret strings of this record (empty when unannotated)."""
        return [self.text[s.start : s.end] for s in self.spans or ()]

    def to_dict(self) -> dict:
        out: dict = {"text": self.text}
        if self.spans is not None:
            out["spans"] = [s.to_dict() for s in self.spans]
        if self.label is not None:
            out["label"] = self.label
        return out


@dataclass(frozen=True)
class Splits:
    """Train / validation / test records of one dataset.

    Pickled (a sweep's records in Ray's object store) as columns (`record_columns`): each split's texts as one
    UTF-8 array, its spans as arrays of offsets and label codes. A list of records pickles as objects, each memoised
    by the pickler (about 3 KB of the pickling process's memory a record, for a 450-character note, beside the
    records themselves); the arrays go to the object store out of band, as they are."""

    train: list[Record]
    validation: list[Record]
    test: list[Record]

    def __reduce__(self) -> tuple:
        return _splits_from_columns, tuple(record_columns(part) for part in (self.train, self.validation, self.test))


@dataclass(frozen=True)
class SpanColumns:
    """Lists of spans (or None) as arrays (`span_columns`)."""

    spans: np.ndarray  # int32 [S, 3]: every span's start, end and label code, list after list
    counts: np.ndarray  # int32 [R]: the spans of each list; −1 for None
    labels: tuple[str, ...]  # the label of each code

    def lists(self) -> list[tuple[Span, ...] | None]:
        """The lists as tuples, None where there was none."""
        spans = [Span(a, b, self.labels[k]) for a, b, k in self.spans.tolist()]
        ends = np.cumsum(np.maximum(self.counts, 0)).tolist()
        return [None if count < 0 else tuple(spans[end - count : end])
                for count, end in zip(self.counts.tolist(), ends)]


def span_columns(lists: Sequence[Sequence[Span] | None]) -> SpanColumns:
    """`lists` as arrays (`SpanColumns`); `SpanColumns.lists` gives them back, span for span."""
    codes: dict[str, int] = {}
    flat = [(s.start, s.end, codes.setdefault(s.label, len(codes))) for spans in lists for s in spans or ()]
    return SpanColumns(np.array(flat, dtype=np.int32).reshape(-1, 3),
                       np.array([-1 if spans is None else len(spans) for spans in lists], np.int32), tuple(codes))


@dataclass(frozen=True)
class RecordColumns:
    """Records as arrays (`record_columns`): what they hold, record for record, in a few objects."""

    text: np.ndarray  # uint8: every text's UTF-8 bytes, one after another
    text_ends: np.ndarray  # int64 [R]: where each text ends in `text`
    spans: SpanColumns  # each record's gold spans, or None (no annotation)
    labels: np.ndarray  # int64 [R]: each record's class; −1 for none
    meta: dict[int, dict]  # the records whose meta is not empty, by position

    def records(self) -> list[Record]:
        text, starts = memoryview(self.text.data), [0, *self.text_ends.tolist()]
        return [Record(str(text[a:b], "utf-8", "surrogatepass"), spans, None if label < 0 else label,
                       self.meta.get(r, {}))
                for r, (a, b, spans, label) in enumerate(zip(starts, starts[1:], self.spans.lists(),
                                                             self.labels.tolist()))]


def record_columns(records: Sequence[Record]) -> RecordColumns:
    """`records` as arrays (`RecordColumns`); `RecordColumns.records` gives them back, equal record for record."""
    encoded = [r.text.encode("utf-8", "surrogatepass") for r in records]
    ends = np.cumsum([len(t) for t in encoded], dtype=np.int64)
    text = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    del encoded
    assert all(r.label is None or r.label >= 0 for r in records), "class labels are non-negative"
    return RecordColumns(text, ends, span_columns([r.spans for r in records]),
                         np.array([-1 if r.label is None else r.label for r in records], np.int64),
                         {i: r.meta for i, r in enumerate(records) if r.meta})


def _splits_from_columns(train: RecordColumns, validation: RecordColumns, test: RecordColumns) -> Splits:
    return Splits(train.records(), validation.records(), test.records())


Part = str | tuple[str, str]
"""A piece of a generated record's text: literal text, or (value, gold label) for a secret the generator put in."""
