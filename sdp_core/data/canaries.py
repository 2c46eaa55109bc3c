"""Canaries (Carlini et al., *The Secret Sharer*, 2019) drawn for a one-run audit (Steinke, Nasr & Jagielski 2023,
*Privacy Auditing with One (1) Training Run*, §3): m secrets of one format, each inserted n times with
probability 1/2, independently; the others are held out. The inserted ones are the members whose exposure the
trial reports, the held-out ones the non-members of the same format that the ε audit ranks them against.

The format is a `config.canary.CanaryFormat` (`My ID is {dddddd}`: a secret space of 10^6 values). A trial draws
one family of canaries, or two: one in a format its detector policy flags (redaction removes it) and one in a format
the policy misses (only a DP part protects it), the contrast of Shi et al. 2022 (§5.2) and the ATDP paper's
Table 2. Before any is inserted, the policy is run on every canary's text (`policy_verdicts`), so a family is
flagged or missed because the trial's own policy says so, not by assumption: a family's canaries are uniform
draws of its format that the policy flags whole (or misses), and each exposure still ranks its canary among every
candidate of the format.

A canary follows the data's own format (`data.structure`): in dialog data it is a line of the speaker who answers
the opening line (`USR: My ID is 123456` in CustomerSim), in prose a sentence (`My ID is 123456.`) after a sentence
end and a space. Either way the tokens just before the secret are the same wherever it sits (a speaker tag is one
special token; a byte-level BPE attaches the space to the next word), so the exposure is scored after the record
start and `Canaries.context` (`USR: `, or a space), the context it was trained in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Callable, Literal, Sequence

from sdp_core.config.canary import CanaryFormat
from sdp_core.data.records import Record, RecordColumns, Span, replaced_records
from sdp_core.errors import UserError
from sdp_core.data.structure import SENTENCE_END, answering_speaker, speaker_tags

Family = Literal["flagged", "missed"]
Detect = Callable[[Sequence[str]], list[list[Span]]]  # a policy's `detect`: texts in, spans of each out

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
    family: Family = "flagged"  # flagged: the trial's detector redacts these canaries; missed: it keeps them
    policy: dict | None = None  # the policy that judged each canary before insertion, and how many draws it took

    @property
    def dialog(self) -> bool:
        """The canaries are dialog lines (else sentences of prose)."""
        return bool(self.context.strip())

    def text(self, canary: int) -> str:
        """The whole inserted text of canary k: the dialog line, or the sentence."""
        return canary_text(self.format, self.context, self.secrets[canary])

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
            "family": self.family,
            "judged_by": self.policy,
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


def canary_text(fmt: CanaryFormat, context: str, secret: str) -> str:
    """A canary's whole inserted text: `context` and the rendered format as a dialog line, or (a blank `context`)
    the rendered format as a sentence."""
    rendered = fmt.render(secret)
    if context.strip():
        return context + rendered
    return rendered if rendered.endswith((".", "!", "?")) else rendered + "."


def policy_verdicts(fmt: CanaryFormat, context: str, secrets: Sequence[str], detect: Detect) -> list[bool | None]:
    """What the policy `detect` does to each secret in its canary's whole text (`canary_text`): True when its
    spans cover every character of the secret (redaction removes it), False when no span touches it (the secret
    stays in the clear), None when they cover part of it."""
    texts = [canary_text(fmt, context, s) for s in secrets]
    out: list[bool | None] = []
    for text, secret, spans in zip(texts, secrets, detect(texts)):
        start = text.index(fmt.render(secret)) + len(fmt.prefix)
        end = start + len(secret)
        covered = {i for s in spans for i in range(max(s.start, start), min(s.end, end))}
        out.append(True if len(covered) == end - start else False if not covered else None)
    return out


def _draw(fmt: CanaryFormat, count: int, rng: random.Random, family: Family | None,
          policy: tuple[str, Detect] | None, context: str) -> tuple[list[str], Family, int]:
    """`count` distinct uniform secrets of `fmt` and their family. Without a policy every draw is kept (family
    `family`, else flagged). With one, the family is `family`, else what the policy does to most of the first
    `count` draws (flags whole, or misses), and only draws it treats so are kept (`policy_verdicts`), so every
    canary of a family is flagged, or missed, by the policy itself. Returns (secrets, family, draws)."""
    seen: set[str] = set()
    secrets: list[str] = []
    while len(secrets) < count:
        batch: list[str] = []
        while len(batch) < count - len(secrets):
            if len(seen) == fmt.space_size:
                raise UserError(f"canary format {fmt.template!r} holds {fmt.space_size} secrets, too few for "
                                f"{count} canaries{' that its policy treats alike' if policy else ''}")
            s = fmt.random_secret(rng)
            if s not in seen:
                seen.add(s)
                batch.append(s)
        if policy is None:
            secrets += batch
            continue
        verdicts = policy_verdicts(fmt, context, batch, policy[1])
        if not secrets and family is None:
            family = "flagged" if verdicts.count(True) * 2 >= len(batch) else "missed"
        want = family == "flagged"
        if not secrets and verdicts.count(want) * 2 < len(batch):
            raise UserError(f"detector policy {policy[0]!r} {'flags' if want else 'misses'} only "
                            f"{verdicts.count(want)} of {len(batch)} draws of canary format {fmt.template!r}: choose "
                            f"a format it {'flags whole' if want else 'misses'} (data.canaries)")
        secrets += [s for s, v in zip(batch, verdicts) if v is want]
    return secrets, family or "flagged", len(seen)


def insert_canaries(records: Sequence[Record], template: str, count: int, repeats: int, seed: int,
                    missed_by_detector: bool = False, *, family: Family | None = None,
                    policy: tuple[str, Detect] | None = None, avoid: frozenset[int] = frozenset()
                    ) -> tuple[RecordColumns, Canaries]:
    """Draw `count` distinct canaries; insert each with probability 1/2, `repeats` times, into seeded records.

    With `policy` (its name and `detect`), the canaries are a family the policy flags or misses, each proven so
    before it is inserted (`_draw`; `family` says which, else the policy's treatment of most draws). A canary joins
    dialog data as a line of the answering speaker at a seeded line boundary, prose as a sentence at a seeded
    sentence start (see the module docstring). Each insertion goes into a distinct record outside `avoid` (the
    records another family went into), so a canary's n copies are n records (record-level DP counts them n times).
    The secret's gold span is added to the record (label `canary`) and existing spans are shifted. The records come
    back as arrays (`RecordColumns`), made a record at a time.
    """
    fmt = CanaryFormat.parse(template)
    free = [i for i in range(len(records)) if i not in avoid]
    if count * repeats > len(free):  # the case of every canary drawn in
        raise UserError(f"{count} canaries x {repeats} repeats need {count * repeats} training records; "
                        f"the data has {len(free)}{' free of other canaries' if avoid else ''}")
    tags = speaker_tags(r.text for r in records)
    context = answering_speaker((r.text for r in records), tags) + " " if tags else " "
    rng = random.Random(f"canaries-{seed}" if family != "missed" else f"canaries-missed-{seed}")
    secrets, family, drawn = _draw(fmt, count, rng, family, policy, context)
    inserted = tuple(rng.random() < 0.5 for _ in secrets)
    canaries = Canaries(fmt, tuple(secrets), inserted, repeats, context, missed_by_detector=missed_by_detector,
                        family=family, policy=None if policy is None else {"policy": policy[0], "draws": drawn})
    members = [k for k, i in enumerate(inserted) if i]
    targets = rng.sample(free, len(members) * repeats)
    place = _dialog_place if canaries.dialog else _prose_place
    lead = len(context) if canaries.dialog else 0  # characters of the inserted text before the rendered format
    changed: dict[int, Record] = {}  # the records the canaries went into, by index
    insertions = []
    for k, record_index in enumerate(targets):
        canary = members[k // repeats]
        record = changed.get(record_index, records[record_index])
        piece = canaries.text(canary)
        text, offset = place(record.text, piece, rng)
        shift = len(text) - len(record.text)
        start = offset + lead + len(fmt.prefix)
        span = Span(start, start + len(secrets[canary]), "canary")
        moved = [Span(s.start + shift, s.end + shift, s.label) if s.start >= offset else s for s in record.spans or ()]
        changed[record_index] = Record(text=text, spans=tuple(sorted(moved + [span])), label=record.label,
                                       meta=record.meta)
        insertions.append(Insertion(canary, record_index, span))
    return replaced_records(records, changed), replace(canaries, insertions=tuple(insertions))
