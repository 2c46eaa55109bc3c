"""Recall on the user's own data from a person's review (`sdp-sweep detect DATA --review N`): N sampled records are
shown with the policy's spans, the reviewer types what the policy missed (and names any span that is no secret),
and the labels are stored as gold spans beside the data. Recall computed from them, with its 95 % Wilson interval,
is what `sdp-sweep detect` and a sweep's report then show: a person's labels are the measure of recall to trust on
data without gold spans (the insertion estimate of `estimate.py` sees only the formats its generators know).

At each record the reviewer answers, one line at a time:

    name: Ann Lee       a missed secret: its type, a colon, and the text as the record writes it (every
                        occurrence in the record is labelled)
    -2                  detected span 2 is no secret
    (empty line)        the record is done: the next one
    q                   the review stops; the record on screen is not saved

Only records the reviewer finished with an empty line are saved: `q` or the end of the input leaves the open record
unreviewed (a record nobody answered is no evidence of recall), and `sdp-sweep detect --review` refuses to start
without a terminal on its standard input, where no person can answer.

The record's gold spans are the detected spans not named as no secret, typed by their detector label (`PERSON` is
a `name`, `credit_card` a `card`, `identifier` stays `identifier`), and the missed secrets typed.

Labels file: `<data file>.review.jsonl` beside the data (`chats.csv` -> `chats.csv.review.jsonl`), one JSON line
per reviewed record: `{"sha256": digest of the record's text, "spans": [{"start", "end", "label"}], "policy": the
policy at review}`. It holds offsets and types, not text: a record is found again by its text's digest, so
re-ordering the data keeps every label and editing a record drops only that record's. A later review adds records
not yet reviewed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence, TextIO

from sdp_core.data.records import Record, Span
from sdp_core.detectors.evaluation import Evaluation, evaluate
from sdp_core.errors import UserError
from sdp_core.io import atomic_write_text

if TYPE_CHECKING:
    from rich.console import Console

LABELS_SUFFIX = ".review.jsonl"
# The secret type of a detector label (the rest name their type already: phone, email, iban, national_id, ...).
TYPE_OF_LABEL = {"PERSON": "name", "DISPLAY_NAME": "name", "USERNAME": "username", "credit_card": "card",
                 "facility": "hospital"}
# Labels that say only "an identifier": a run they share with a typed label takes that label's type.
GENERIC_LABELS = frozenset({"identifier", "id", "digits"})
_MISSED = re.compile(r"(?P<type>[A-Za-z][\w-]{0,39})[ \t]*:[ \t]*(?P<text>\S.*?)[ \t]*")
_REJECT = re.compile(r"-[ \t]*(?P<k>\d+)")


def labels_path(data: str | Path) -> Path:
    """Where the labels of `data` live: `<data file>.review.jsonl` in the data's folder."""
    path = Path(data)
    return path.with_name(path.name + LABELS_SUFFIX)


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Labels:
    """The stored review: gold spans and the policy reviewed, by the digest of each record's text."""

    spans: dict[str, tuple[Span, ...]]
    policy: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> "Labels":
        """The labels at `path` (none when there is no file); a malformed line is a one-line error."""
        spans: dict[str, tuple[Span, ...]] = {}
        policy: dict[str, str] = {}
        if not path.is_file():
            return cls(spans, policy)
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                digest = str(row["sha256"])
                spans[digest] = tuple(Span(int(s["start"]), int(s["end"]), str(s["label"])) for s in row["spans"])
                policy[digest] = str(row.get("policy", ""))
            except (ValueError, KeyError, TypeError) as e:
                raise UserError(f"{path}:{i}: not a review label line ({type(e).__name__}: {e})") from None
        return cls(spans, policy)

    def write(self, path: Path) -> None:
        rows = ({"sha256": d, "spans": [s.to_dict() for s in spans], "policy": self.policy.get(d, "")}
                for d, spans in self.spans.items())
        try:
            atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
        except OSError as e:
            raise UserError(f"cannot write the review labels to {path}: {e.strerror or e}") from None


def review_recall(records: Iterable[Record], detected: Iterable[Sequence[Span]], labels: Labels
                  ) -> Evaluation | None:
    """The policy's recall on the reviewed records of `records` (its spans `detected`, record for record; each
    distinct text once), against the labels as gold spans; None when no record of `records` was reviewed. Read a
    record at a time: only the reviewed ones are kept (a sweep passes every split's records)."""
    if not labels.spans:
        return None
    gold, found, seen = [], [], set()
    for r, spans in zip(records, detected, strict=True):
        digest = text_digest(r.text)
        if digest in labels.spans and digest not in seen and all(s.end <= len(r.text) for s in labels.spans[digest]):
            seen.add(digest)
            gold.append(Record(r.text, labels.spans[digest], r.label, r.meta))
            found.append(list(spans))
    return evaluate(gold, found) if gold else None


def runs(spans: Sequence[Span]) -> list[Span]:
    """Detected spans merged where they overlap or touch (a union's members flag one secret several times), each run
    labelled with its first typed label, else its first label."""
    out: list[tuple[int, int, list[str]]] = []
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if out and s.start <= out[-1][1]:
            start, end, labels = out[-1]
            out[-1] = (start, max(end, s.end), labels + [s.label])
        else:
            out.append((s.start, s.end, [s.label]))
    return [Span(a, b, next((lab for lab in labels if lab not in GENERIC_LABELS), labels[0])) for a, b, labels in out]


def _show(console: "Console", position: str, text: str, shown: list[Span]) -> None:
    from rich.text import Text

    out = Text()
    at = 0
    for k, s in enumerate(shown, 1):
        out.append(text[at:s.start])
        out.append(text[s.start:s.end], style="bold reverse")
        out.append(f"[{k} {TYPE_OF_LABEL.get(s.label, s.label)}]", style="cyan")
        at = s.end
    out.append(text[at:])
    console.rule(position)
    console.print(out, highlight=False, markup=False)


def review(records: Sequence[Record], detected: Sequence[Sequence[Span]], n: int, labels: Labels, policy_key: str,
           answers: TextIO, console: "Console", seed: int = 0) -> Labels:
    """Show up to `n` sampled records not yet reviewed, read the reviewer's answers (module docstring), and return
    the labels with the records the reviewer finished added (not the one open at `q` or the end of `answers`)."""
    todo: dict[str, int] = {}
    for i, r in enumerate(records):
        digest = text_digest(r.text)
        if r.text.strip() and digest not in labels.spans:
            todo.setdefault(digest, i)
    chosen = random.Random(seed).sample(sorted(todo.values()), min(n, len(todo)))
    spans, policy = dict(labels.spans), dict(labels.policy)
    console.print(f"{len(chosen)} records to review ({len(todo)} not reviewed yet). Per record: `TYPE: text` for a "
                  "missed secret, `-K` when span K is no secret, an empty line when the record is done, `q` to stop "
                  "(the record on screen is then not saved).")
    for number, i in enumerate(chosen, 1):
        text = records[i].text
        shown = runs(detected[i])
        _show(console, f"record {number} of {len(chosen)}", text, shown)
        rejected: set[int] = set()
        missed: list[Span] = []
        while True:
            line = answers.readline()
            answer = line.strip()
            if not line or answer.lower() == "q":
                console.print(f"{'end of input' if not line else 'stopped'}: record {number} is not saved; "
                              f"{number - 1} record(s) reviewed")
                return Labels(spans, policy)
            if not answer:
                break
            if m := _REJECT.fullmatch(answer):
                k = int(m.group("k"))
                if 1 <= k <= len(shown):
                    rejected.add(k)
                    console.print(f"span {k}: no secret")
                else:
                    console.print(f"no span {k} here (1 to {len(shown)})")
            elif m := _MISSED.fullmatch(answer):
                kind, secret = m.group("type").lower(), m.group("text")
                # whole words only: "Ann" is not marked inside "Annual"
                pattern = (r"(?<!\w)" if secret[0].isalnum() else "") + re.escape(secret) + (
                    r"(?!\w)" if secret[-1].isalnum() else "")
                found = [Span(*j.span(), kind) for j in re.finditer(pattern, text)]
                missed += found
                console.print(f"{kind}: {len(found)} occurrence(s) marked" if found
                              else "not found in this record: type it as the record writes it")
            else:
                console.print("`TYPE: text`, `-K`, an empty line or `q`")
        kept = [Span(s.start, s.end, TYPE_OF_LABEL.get(s.label, s.label))
                for k, s in enumerate(shown, 1) if k not in rejected]
        digest = text_digest(text)
        spans[digest] = tuple(sorted({*kept, *missed}))
        policy[digest] = policy_key
    return Labels(spans, policy)


def recall_lines(ev: Evaluation) -> list[str]:
    """What `sdp-sweep detect` prints of a review's recall: counts and rates, never a labelled string."""
    lines = [f"  secrets fully masked {ev.secrets}  (95% Wilson interval)"]
    lines += [f"  recall {lr.label:<16} {lr.secrets}" for lr in ev.per_label.values()]
    return lines


def review_summary(ev: Evaluation) -> dict:
    """What a trial stores of a review's recall: counts and rates only."""
    rate = lambda r: {"value": r.value, "low": r.low, "high": r.high, "k": r.k, "n": r.n}  # noqa: E731
    return {"records": ev.records, "secrets": rate(ev.secrets),
            "per_type": {lr.label: rate(lr.secrets) for lr in ev.per_label.values()}}
