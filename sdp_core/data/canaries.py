"""Canaries (Carlini et al., *The Secret Sharer*, 2019) drawn for a one-run audit (Steinke, Nasr & Jagielski 2023,
*Privacy Auditing with One (1) Training Run*, §3): m secrets of one format, each inserted n times with
probability 1/2, independently; the others are held out. The inserted ones are the members whose exposure the
trial reports, the held-out ones the non-members of the same format that the ε audit ranks them against.

The format is a `config.canary.CanaryFormat` (`My ID is {dddddd}`: a secret space of 10^6 values).

A canary follows the data's own format (`data.structure`): in dialog data it is a line of the speaker who answers
the opening line (`USR: My ID is 123456` in CustomerSim), in prose a sentence (`My ID is 123456.`) after a sentence
end and a space. Either way the tokens just before the secret are the same wherever it sits (a speaker tag is one
special token; a byte-level BPE attaches the space to the next word), so the exposure is scored after the record
start and `Canaries.context` (`USR: `, or a space), the context it was trained in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from sdp_core.config.canary import CanaryFormat
from sdp_core.data.records import Record, Span
from sdp_core.errors import UserError
from sdp_core.data.structure import SENTENCE_END, answering_speaker, speaker_tags

@dataclass(frozen=True)
class Insertion:
    canary: int  # index into Canaries.secrets
    record: int  # index of the training record that holds it
    span: Span  # where the secret itself sits in that record's final text


@dataclass(frozen=True)
class Canaries:
    """What was drawn and inserted where: part of every trial result (secret values are kept out of reports)."""

    format: CanaryFormat
    secrets: tuple[str, ...]  # every drawn canary, inserted or held out
    inserted: tuple[bool, ...]  # inserted[k]: secrets[k] is in the training data (probability 1/2 each)
    repeats: int
    context: str  # what precedes a canary in its record: a speaker tag and a space, or a space
    insertions: tuple[Insertion, ...] = field(default=())
    missed_by_detector: bool = False

    @property
    def dialog(self) -> bool:
        """The canaries are dialog lines (else sentences of prose)."""
        return bool(self.context.strip())

    def text(self, canary: int) -> str:
        """The whole inserted text of canary k: the dialog line, or the sentence."""
        rendered = self.format.render(self.secrets[canary])
        if self.dialog:
            return self.context + rendered
        return rendered if rendered.endswith((".", "!", "?")) else rendered + "."

    def inserted_texts(self) -> list[str]:
        """The whole text of every inserted canary (for keeping each copy inside one window of tokens)."""
        return [self.text(k) for k, inserted in enumerate(self.inserted) if inserted]

    def summary(self) -> dict:
        """A report-safe description: format, space size, counts and positions, never the secret values."""
        return {
            "format": self.format.template,
            "space_size": self.format.space_size,
            "count": len(self.secrets),
            "inserted": sum(self.inserted),
            "repeats": self.repeats,
            "inserted_as": f"dialog line after {self.context.strip()!r}" if self.dialog else "sentence",
            "records": sorted({i.record for i in self.insertions}),
            "missed_by_detector": self.missed_by_detector,
        }


def _dialog_place(text: str, line: str, rng: random.Random) -> tuple[str, int]:
    """`line` as a new line at a seeded line boundary of `text`: (new text, where the line starts)."""
    line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    at = rng.choice(line_starts + [len(text) + 1])
    if at > len(text):  # append as a last line
        return text + "\n" + line, len(text) + 1
    return text[:at] + line + "\n" + text[at:], at


def _prose_place(text: str, sentence: str, rng: random.Random) -> tuple[str, int]:
    """`sentence` at a seeded sentence start of `text` that follows a space, or appended after a space: (new text,
    where the sentence starts). Never at the very start, so a space always precedes it."""
    starts = [m.end() for m in SENTENCE_END.finditer(text)]
    at = rng.choice(starts + [len(text) + 1])
    if at > len(text):
        return text + " " + sentence, len(text) + 1
    return text[:at] + sentence + " " + text[at:], at


def insert_canaries(records: list[Record], template: str, count: int, repeats: int, seed: int,
                    missed_by_detector: bool = False) -> tuple[list[Record], Canaries]:
    """Draw `count` distinct canaries; insert each with probability 1/2, `repeats` times, into seeded records.

    A canary joins dialog data as a line of the answering speaker at a seeded line boundary, prose as a sentence at
    a seeded sentence start (see the module docstring). Each insertion goes into a distinct record, so a canary's
    n copies are n records (record-level DP counts them n times). The secret's gold span is added to the record
    (label `canary`) and existing spans are shifted.
    """
    fmt = CanaryFormat.parse(template)
    if count * repeats > len(records):  # the case of every canary drawn in
        raise UserError(f"{count} canaries x {repeats} repeats need {count * repeats} training records; "
                        f"the data has {len(records)}")
    rng = random.Random(f"canaries-{seed}")
    secrets: list[str] = []
    while len(secrets) < count:
        s = fmt.random_secret(rng)
        if s not in secrets:
            secrets.append(s)
    inserted = tuple(rng.random() < 0.5 for _ in secrets)
    tags = speaker_tags(r.text for r in records)
    context = answering_speaker((r.text for r in records), tags) + " " if tags else " "
    canaries = Canaries(fmt, tuple(secrets), inserted, repeats, context, missed_by_detector=missed_by_detector)
    members = [k for k, i in enumerate(inserted) if i]
    targets = rng.sample(range(len(records)), len(members) * repeats)
    place = _dialog_place if canaries.dialog else _prose_place
    lead = len(context) if canaries.dialog else 0  # characters of the inserted text before the rendered format
    out = list(records)
    insertions = []
    for k, record_index in enumerate(targets):
        canary = members[k // repeats]
        record = out[record_index]
        piece = canaries.text(canary)
        text, offset = place(record.text, piece, rng)
        shift = len(text) - len(record.text)
        start = offset + lead + len(fmt.prefix)
        span = Span(start, start + len(secrets[canary]), "canary")
        moved = [Span(s.start + shift, s.end + shift, s.label) if s.start >= offset else s for s in record.spans or ()]
        out[record_index] = Record(text=text, spans=tuple(sorted(moved + [span])), label=record.label, meta=record.meta)
        insertions.append(Insertion(canary, record_index, span))
    return out, replace(canaries, insertions=tuple(insertions))
