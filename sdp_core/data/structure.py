"""The structure of text, read from the data: dialog speaker tags, and where sentences start.

Dialog data are records whose lines open with a speaker tag (`SYS: ...`, `USR: ...` in CustomerSim). Whether data
are dialogs, and with which tags, is read from the data, never assumed: the tokenizer keeps the tags as atomic
special tokens only for dialog data, and a canary joins a dialog as a line of the speaker who answers the opening
line (the customer, in a support dialog), or joins prose as a sentence (`data.canaries`). Records longer than a
window of tokens are cut at line starts, else at sentence starts (`text.encode`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

SENTENCE_END = re.compile(r"[.!?][\"')\]]? (?=\S)")
"""The end of a sentence and the one space after it: the next sentence starts at the match's end."""
SPEAKER_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_]*:)[ \t]")
"""A speaker tag at the start of a line: one word and a colon, then a space (`USR: `)."""
DIALOG_SHARE = 0.9
"""Data are dialogs when at least this share of their non-empty lines open with a speaker tag ..."""
TAG_SHARE = 0.01
"""... counting only tags that open at least this share of the lines (a stray `Note: ` is no speaker)."""


def _line_tags(text: str) -> list[str | None]:
    """The speaker tag opening each non-empty line of `text` (None where a line has none)."""
    return [m.group(1) if (m := SPEAKER_LINE.match(line)) else None for line in text.split("\n") if line.strip()]


def speaker_tags(texts: Iterable[str]) -> tuple[str, ...]:
    """The speaker tags (with their colon, sorted) of dialog data; () for data that are not dialogs.

    Dialog data: at least `DIALOG_SHARE` of the non-empty lines open with one of at least two tags, each of which
    opens at least `TAG_SHARE` of the lines.
    """
    counts: Counter[str | None] = Counter(tag for text in texts for tag in _line_tags(text))
    lines = sum(counts.values())
    tags = sorted(t for t, n in counts.items() if t is not None and n >= TAG_SHARE * lines)
    if len(tags) < 2 or sum(counts[t] for t in tags) < DIALOG_SHARE * lines:
        return ()
    return tuple(tags)


def answering_speaker(texts: Iterable[str], tags: tuple[str, ...]) -> str:
    """The tag that most often opens a dialog's second line: the speaker who answers (CustomerSim: `USR:`); the
    last tag when no record has a second line."""
    second = Counter(line_tags[1] for text in texts if len(line_tags := _line_tags(text)) > 1 and line_tags[1] in tags)
    return second.most_common(1)[0][0] if second else tags[-1]
