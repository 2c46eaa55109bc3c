"""Canaries (Carlini et al., *The Secret Sharer*, 2019): k secrets of one format, each inserted n times.

A format holds one placeholder of format characters: `d` a digit, `a` a lower-case letter, `A` an upper-case
letter, `X` an upper-case letter or digit. `My ID is {dddddd}` has a secret space of 10^6 values.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import string
from dataclasses import dataclass, field

from sdp_core.data.records import Record, Span
from sdp_core.errors import UserError

ALPHABETS = {"d": string.digits, "a": string.ascii_lowercase, "A": string.ascii_uppercase,
             "X": string.ascii_uppercase + string.digits}
_PLACEHOLDER = re.compile(r"\{([daAX]+)\}")


@dataclass(frozen=True)
class CanaryFormat:
    """A parsed format: the text before and after the secret, and one alphabet per secret character."""

    template: str
    prefix: str
    suffix: str
    alphabets: tuple[str, ...]

    @classmethod
    def parse(cls, template: str) -> "CanaryFormat":
        matches = list(_PLACEHOLDER.finditer(template))
        if len(matches) != 1:
            raise UserError(
                f"canary format {template!r} needs exactly one placeholder like {{dddddd}} "
                f"(d digit, a lower, A upper, X upper or digit); found {len(matches)}"
            )
        m = matches[0]
        return cls(template, template[: m.start()], template[m.end() :], tuple(ALPHABETS[c] for c in m.group(1)))

    @property
    def space_size(self) -> int:
        """|R|: how many secrets the format can hold."""
        return math.prod(len(a) for a in self.alphabets)

    def render(self, secret: str) -> str:
        return self.prefix + secret + self.suffix

    def random_secret(self, rng: random.Random) -> str:
        return "".join(rng.choice(a) for a in self.alphabets)

    def all_secrets(self):
        """Every candidate, in a fixed order (only for spaces small enough to enumerate)."""
        return ("".join(chars) for chars in itertools.product(*self.alphabets))


@dataclass(frozen=True)
class Insertion:
    canary: int  # index into CanaryPlan.secrets
    record: int  # index of the training record that holds it
    span: Span  # where the secret itself sits in that record's final text


@dataclass(frozen=True)
class CanaryPlan:
    """What was inserted where: part of every trial result (secret values are kept out of reports)."""

    format: CanaryFormat
    secrets: tuple[str, ...]
    insertions: tuple[Insertion, ...] = field(default=())
    missed_by_detector: bool = False

    def summary(self) -> dict:
        """A report-safe description: format, space size and positions, never the secret values."""
        return {
            "format": self.format.template,
            "space_size": self.format.space_size,
            "count": len(self.secrets),
            "repeats": len(self.insertions) // max(1, len(self.secrets)),
            "records": sorted({i.record for i in self.insertions}),
            "missed_by_detector": self.missed_by_detector,
        }


def insert_canaries(records: list[Record], template: str, count: int, repeats: int, seed: int,
                    missed_by_detector: bool = False) -> tuple[list[Record], CanaryPlan]:
    """Insert `count` canaries, each `repeats` times, as a new line at a seeded line boundary of seeded records.

    Each insertion goes into a distinct record, so a canary's n copies are n records (record-level DP counts them
    n times). The secret's gold span is added to the record (label `canary`) and existing spans are shifted.
    """
    fmt = CanaryFormat.parse(template)
    total = count * repeats
    if total > len(records):
        raise UserError(f"{count} canaries x {repeats} repeats need {total} training records; the data has {len(records)}")
    rng = random.Random(f"canaries-{seed}")
    secrets: list[str] = []
    while len(secrets) < count:
        s = fmt.random_secret(rng)
        if s not in secrets:
            secrets.append(s)
    targets = rng.sample(range(len(records)), total)
    out = list(records)
    insertions = []
    for k, record_index in enumerate(targets):
        canary = k // repeats
        record = out[record_index]
        line_starts = [0] + [i + 1 for i, ch in enumerate(record.text) if ch == "\n"]
        at = rng.choice(line_starts + [len(record.text) + 1])
        line = "USR: " + fmt.render(secrets[canary])
        if at > len(record.text):  # append as a last line
            text, offset = record.text + "\n" + line, len(record.text) + 1
        else:
            text, offset = record.text[:at] + line + "\n" + record.text[at:], at
        shift = len(line) + 1
        start = offset + len("USR: ") + len(fmt.prefix)
        span = Span(start, start + len(secrets[canary]), "canary")
        moved = [Span(s.start + shift, s.end + shift, s.label) if s.start >= offset else s for s in record.spans or ()]
        out[record_index] = Record(text=text, spans=tuple(sorted(moved + [span])), label=record.label, meta=record.meta)
        insertions.append(Insertion(canary, record_index, span))
    return out, CanaryPlan(fmt, tuple(secrets), tuple(insertions), missed_by_detector)
