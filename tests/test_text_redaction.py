"""One `<mask>` per maximal sensitive run."""

from __future__ import annotations

from sdp_core.data.records import Span
from sdp_core.text.redaction import MASK, redact, redaction_runs


def test_single_span():
    assert redact("My ID is 1234.", [Span(9, 13)]) == "My ID is <mask>."


def test_overlapping_touching_and_whitespace_separated_spans_make_one_mask():
    text = "Sure, Betty Sims 555-123-4567."
    spans = [Span(6, 11, "PROPN"), Span(6, 16, "PERSON"), Span(12, 16, "PROPN"), Span(17, 29, "phone")]
    assert redact(text, spans) == "Sure, <mask>."
    assert redaction_runs(text, spans) == [(6, 29)]


def test_punctuation_between_spans_keeps_two_masks():
    assert redact("Betty, 555-123-4567", [Span(0, 5), Span(7, 19)]) == "<mask>, <mask>"


def test_surrounding_whitespace_in_spans_is_kept():
    assert redact("is 1234 ok", [Span(2, 8)]) == "is <mask> ok"


def test_no_spans_and_custom_mask():
    assert redact("nothing here", []) == "nothing here"
    assert redact("a 1 b", [Span(2, 3)], mask="[X]") == "a [X] b"
    assert MASK == "<mask>"


def test_unsorted_spans():
    assert redact("a 1 b 2 c", [Span(6, 7), Span(2, 3)]) == "a <mask> b <mask> c"


def test_texts_redacted_as_they_are_read_equal_the_redacted_list():
    from sdp_core.text.redaction import RedactedTexts

    texts = ["call Betty Sims at 555-123-4567", "nothing here", "id 42 and 43"]
    spans = [[Span(5, 10), Span(11, 15), Span(19, 31)], [], [Span(3, 5), Span(10, 12)]]
    lazy = RedactedTexts(texts, spans)
    expected = [redact(t, s) for t, s in zip(texts, spans)]
    assert len(lazy) == 3 and list(lazy) == expected and lazy[1:] == expected[1:] and lazy[-1] == expected[-1]
    assert expected[0] == "call <mask> at <mask>"
