"""The unit of data everywhere: a text record with optional gold secret spans."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    """Train / validation / test records of one dataset."""

    train: list[Record]
    validation: list[Record]
    test: list[Record]


Part = str | tuple[str, str]
"""A piece of a generated record's text: literal text, or (value, gold label) for a secret the generator put in."""
