"""CRT deduplication: second and later copies of a sentence become `<mask>`."""

from __future__ import annotations

from sdp_core.data.records import Span
from sdp_core.text.dedup import dedup_sentences, duplicate_spans, split_sentences


def sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in split_sentences(text)]


def test_sentence_rule():
    assert sentences("Hi. How are you?\nFine!! It costs 3.5 dollars") == ["Hi.", "How are you?", "Fine!!", "It costs 3.5 dollars"]
    assert sentences("SYS: Hello there. Bye.\nUSR:   Ok.") == ["Hello there.", "Bye.", "Ok."]
    assert sentences("") == [] and sentences("\n\n") == []


def test_only_second_and_later_copies_are_replaced_and_counted():
    texts = [
        "SYS: Hello, how can I help? My ID is 1.",
        "SYS: hello,   HOW can I help?\nUSR: My ID is 2.",
        "USR: Hello, how can I help? Thanks.",
        "Thanks.",
    ]
    out, replaced = dedup_sentences(texts)
    assert out == [
        "SYS: Hello, how can I help? My ID is 1.",
        "SYS: <mask>\nUSR: My ID is 2.",
        "USR: <mask> Thanks.",
        "<mask>",
    ]
    assert replaced == 3


def test_duplicates_within_one_text_and_no_duplicates():
    out, replaced = dedup_sentences(["Go. Go. Stop."])
    assert out == ["Go. <mask> Stop."] and replaced == 1
    # adjacent duplicates: two sentences counted, one mask (redaction merges whitespace-separated runs)
    out, replaced = dedup_sentences(["A b. C d.", "x. A b. C d."])
    assert out == ["A b. C d.", "x. <mask>"] and replaced == 2
    texts = ["One.", "Two.", "Three."]
    assert dedup_sentences(texts) == (texts, 0)


def test_duplicate_spans_locate_the_copies():
    texts = ["SYS: Hi. Bye.", "USR: bye. New."]
    assert duplicate_spans(texts) == [[], [Span(5, 9, "duplicate")]]
    assert texts[1][5:9] == "bye."
