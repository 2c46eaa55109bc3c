"""The unit of data everywhere: a text record with optional gold secret spans."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence, overload

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

    train: Sequence[Record]
    validation: Sequence[Record]
    test: Sequence[Record]

    def __reduce__(self) -> tuple:
        return _splits_from_columns, tuple(record_columns(part) for part in (self.train, self.validation, self.test))


SPAN_CHUNK = 4096
"""Lists of spans made into arrays (`span_columns`), or read back as Span objects (`SpanColumns.__iter__`), at a
time: a corpus's spans are never all Python objects at once (about 120 bytes a span, 8 spans a clinic note)."""


@dataclass(frozen=True, eq=False)
class SpanColumns(Sequence[list[Span]]):
    """Lists of spans (or None) as arrays (`span_columns`): a corpus's detections, 12 bytes a span instead of
    about 280 as objects in lists (measured: 2.3 KB a clinic note as lists, 50 bytes as arrays).

    A sequence of span lists: item `i` is made from the arrays on each read (a list of `Span`s, empty where the list
    was None: `lists` keeps the None), slices and `take` are arrays again, and iterating makes `SPAN_CHUNK` lists at
    a time."""

    spans: np.ndarray  # int32 [S, 3]: every span's start, end and label code, list after list
    counts: np.ndarray  # int32 [R]: the spans of each list; −1 for None
    labels: tuple[str, ...]  # the label of each code

    def __reduce__(self) -> tuple:
        return SpanColumns, (self.spans, self.counts, self.labels)  # not the cached `ends`

    @functools.cached_property
    def ends(self) -> np.ndarray:
        """int64 [R]: where each list's spans end in `spans`."""
        return np.cumsum(np.maximum(self.counts, 0), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.counts)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same span lists (None reads as empty)."""
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(mine == list(theirs or ()) for mine, theirs in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, i: int) -> list[Span]: ...

    @overload
    def __getitem__(self, i: slice) -> SpanColumns: ...

    def __getitem__(self, i: int | slice) -> list[Span] | SpanColumns:
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = range(len(self))[i]  # a negative index counts from the end; out of range raises IndexError
        end = int(self.ends[i])
        return self._made(self.spans[end - max(int(self.counts[i]), 0) : end])

    def __iter__(self) -> Iterator[list[Span]]:
        for first in range(0, len(self), SPAN_CHUNK):
            counts = np.maximum(self.counts[first : first + SPAN_CHUNK], 0).tolist()
            start = int(self.ends[first - 1]) if first else 0
            spans = self._made(self.spans[start : start + sum(counts)])
            at = 0
            for count in counts:
                yield spans[at : at + count]
                at += count

    def _made(self, rows: np.ndarray) -> list[Span]:
        return [Span(a, b, self.labels[k]) for a, b, k in rows.tolist()]

    @property
    def total(self) -> int:
        """How many spans all lists hold."""
        return len(self.spans)

    def lists_at(self, i: int) -> tuple[Span, ...] | None:
        """List `i` as a tuple, None where there was none."""
        return None if self.counts[i] < 0 else tuple(self[i])

    def lists(self) -> list[tuple[Span, ...] | None]:
        """The lists as tuples, None where there was none."""
        return [None if count < 0 else tuple(spans) for count, spans in zip(self.counts.tolist(), self)]

    def take(self, indices: np.ndarray) -> SpanColumns:
        """The lists at `indices` (any order, repeats allowed), as arrays."""
        indices = np.asarray(indices, dtype=np.int64)
        counts = self.counts[indices]
        sizes = np.maximum(counts, 0).astype(np.int64)
        starts = self.ends[indices] - sizes
        rows = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
        return SpanColumns(self.spans[rows], counts, self.labels)

    def replaced(self, lists: Mapping[int, Sequence[Span]]) -> SpanColumns:
        """These lists with those of `lists` (by index) put in their place."""
        if not lists:
            return self
        at = sorted(lists)
        index = np.arange(len(self))
        index[at] = len(self) + np.arange(len(at))
        return concatenated([self, span_columns([lists[i] for i in at])]).take(index)


def span_columns(lists: Iterable[Sequence[Span] | None]) -> SpanColumns:
    """`lists` as arrays (`SpanColumns`), `SPAN_CHUNK` lists at a time; `SpanColumns.lists` gives them back, span for
    span. Lists already as arrays are returned as they are."""
    if isinstance(lists, SpanColumns):
        return lists
    codes: dict[str, int] = {}
    spans, counts = [], []
    iterator = iter(lists)
    while chunk := list(itertools.islice(iterator, SPAN_CHUNK)):
        flat = [(s.start, s.end, codes.setdefault(s.label, len(codes))) for ss in chunk for s in ss or ()]
        spans.append(np.array(flat, dtype=np.int32).reshape(-1, 3))
        counts.append(np.array([-1 if ss is None else len(ss) for ss in chunk], np.int32))
    return SpanColumns(np.concatenate(spans) if spans else np.zeros((0, 3), np.int32),
                       np.concatenate(counts) if counts else np.zeros(0, np.int32), tuple(codes))


def concatenated(parts: Sequence[SpanColumns]) -> SpanColumns:
    """The lists of `parts`, one after another, as arrays (their label codes merged)."""
    codes: dict[str, int] = {}
    spans = []
    for part in parts:
        recoded = np.array([codes.setdefault(label, len(codes)) for label in part.labels] or [0], np.int32)
        rows = part.spans.copy()
        rows[:, 2] = recoded[part.spans[:, 2]]
        spans.append(rows)
    return SpanColumns(np.concatenate(spans) if spans else np.zeros((0, 3), np.int32),
                       np.concatenate([p.counts for p in parts]) if parts else np.zeros(0, np.int32), tuple(codes))


@dataclass(frozen=True, eq=False)
class RecordColumns(Sequence[Record]):
    """Records as arrays (`record_columns`): what they hold, record for record, in a few objects (a clinic note
    about 0.55 KB instead of 1.2 KB as a `Record`). A sequence of records, each made from the arrays on each read,
    as `SpanColumns` is of span lists: a prepared corpus is held so (`data.splits.splits_with_canaries`)."""

    text: np.ndarray  # uint8: every text's UTF-8 bytes, one after another
    text_ends: np.ndarray  # int64 [R]: where each text ends in `text`
    spans: SpanColumns  # each record's gold spans, or None (no annotation)
    labels: np.ndarray  # int64 [R]: each record's class; −1 for none
    meta: dict[int, dict]  # the records whose meta is not empty, by position

    def __len__(self) -> int:
        return len(self.text_ends)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of equal records."""
        return isinstance(other, Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, i: int) -> Record: ...

    @overload
    def __getitem__(self, i: slice) -> RecordColumns: ...

    def __getitem__(self, i: int | slice) -> Record | RecordColumns:
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = range(len(self))[i]  # a negative index counts from the end; out of range raises IndexError
        spans = self.spans.lists_at(i)
        return Record(self.text_at(i), spans, None if self.labels[i] < 0 else int(self.labels[i]), self.meta.get(i, {}))

    def text_at(self, i: int) -> str:
        """Record `i`'s text."""
        start = int(self.text_ends[i - 1]) if i else 0
        return str(memoryview(self.text.data)[start : int(self.text_ends[i])], "utf-8", "surrogatepass")

    def texts(self) -> Sequence[str]:
        """The records' texts, each decoded on each read (`text_at`): never all of them at once."""
        return TextsOnRead(len(self), self.text_at)

    def take(self, indices: np.ndarray) -> RecordColumns:
        """The records at `indices` (any order, repeats allowed), as arrays, their texts gathered `SPAN_CHUNK`
        records at a time (a byte index of every text at once would be 8 bytes a byte)."""
        indices = np.asarray(indices, dtype=np.int64)
        sizes = self.text_ends[indices] - np.concatenate([[0], self.text_ends])[indices]
        starts, ends = self.text_ends[indices] - sizes, np.cumsum(sizes, dtype=np.int64)
        text = np.empty(int(ends[-1]) if len(ends) else 0, np.uint8)
        for first in range(0, len(indices), SPAN_CHUNK):
            size, start = sizes[first : first + SPAN_CHUNK], starts[first : first + SPAN_CHUNK]
            to = int(ends[first] - sizes[first])  # where this chunk's first text goes
            at = np.repeat(start - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
            text[to : to + len(at)] = self.text[at]
        meta = {k: self.meta[int(r)] for k, r in enumerate(indices.tolist()) if int(r) in self.meta}
        return RecordColumns(text, ends, self.spans.take(indices), self.labels[indices], meta)


class TextsOnRead(Sequence[str]):
    """`length` texts, text `i` made by `make(i)` on each read and not kept: a corpus's texts as arrays
    (`RecordColumns.texts`) or their redacted copy (`text.redaction.RedactedTexts`) never exist whole."""

    def __init__(self, length: int, make: Callable[[int], str]):
        self.length, self.make = length, make

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self.make(k) for k in range(*i.indices(len(self)))]
        return self.make(range(len(self))[i])  # a negative index counts from the end; out of range: IndexError


def record_columns(records: Iterable[Record]) -> RecordColumns:
    """`records` as arrays (`RecordColumns`), which read back as them, equal record for record, made `SPAN_CHUNK`
    records at a time from any iterable: a loader's stream of records never exists whole as objects. Records
    already as arrays are returned as they are."""
    if isinstance(records, RecordColumns):
        return records
    text = bytearray()  # grown in place (`realloc`), not pieces joined at the end: no second copy of the texts
    ends, spans, labels, meta = [], [], [], {}
    done = 0  # records so far
    iterator = iter(records)
    while chunk := list(itertools.islice(iterator, SPAN_CHUNK)):
        encoded = [r.text.encode("utf-8", "surrogatepass") for r in chunk]
        ends.append(len(text) + np.cumsum([len(t) for t in encoded], dtype=np.int64))
        text += b"".join(encoded)
        spans.append(span_columns([r.spans for r in chunk]))
        assert all(r.label is None or r.label >= 0 for r in chunk), "class labels are non-negative"
        labels.append(np.array([-1 if r.label is None else r.label for r in chunk], np.int64))
        meta.update({done + k: r.meta for k, r in enumerate(chunk) if r.meta})
        done += len(chunk)
    return RecordColumns(np.frombuffer(text, dtype=np.uint8), _joined(ends, np.int64), concatenated(spans),
                         _joined(labels, np.int64), meta)


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def replaced_records(records: Sequence[Record], changes: Mapping[int, Record]) -> RecordColumns:
    """`records` as arrays with those of `changes` (by index) in their place, read a record at a time."""
    return record_columns(changes.get(i, r) for i, r in enumerate(records))


def _splits_from_columns(train: RecordColumns, validation: RecordColumns, test: RecordColumns) -> Splits:
    return Splits(train, validation, test)


Part = str | tuple[str, str]
"""A piece of a generated record's text: literal text, or (value, gold label) for a secret the generator put in."""
