"""Character spans -> token masks, with hand-made offsets and a real byte-level BPE."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from sdp_core.data.records import Span
from sdp_core.text.alignment import merged_intervals, token_mask, token_masks


def reference_mask(text: str, offsets, spans) -> list[bool]:
    """Brute force: a token is sensitive iff it shares a non-space character with a span."""
    inside = {i for s in spans for i in range(s.start, s.end) if not text[i].isspace()}
    return [any(i in inside for i in range(a, b)) for a, b in offsets]


def test_hand_made_offsets():
    text = "My ID is 1234 ok"
    #        0123456789012345
    offsets = [(0, 2), (2, 5), (5, 8), (8, 13), (13, 16), (0, 0), (16, 16)]  # ' 1234' carries its space
    spans = [Span(9, 13, "id")]
    assert token_mask(offsets, spans, text).tolist() == [False, False, False, True, False, False, False]


def test_partial_overlap_and_several_spans():
    offsets = np.array([(0, 4), (4, 8), (8, 12), (12, 16)])
    spans = [Span(3, 5), Span(13, 14)]
    assert token_mask(offsets, spans).tolist() == [True, True, False, True]


def test_span_with_trailing_space_does_not_leak_into_the_next_token():
    text = "code 1234  is"
    offsets = [(0, 4), (4, 9), (9, 13)]  # ' 1234', '  is'
    assert token_mask(offsets, [Span(5, 10)], text).tolist() == [False, True, False]
    assert token_mask(offsets, [Span(5, 10)]).tolist() == [False, True, True]  # without text: raw offsets


def test_zero_width_token_inside_a_span_is_not_sensitive():
    assert token_mask([(3, 3), (2, 5)], [Span(0, 10)]).tolist() == [False, True]


def test_empty_inputs():
    assert token_mask([], [Span(0, 3)]).shape == (0,)
    assert token_mask([(0, 3)], []).tolist() == [False]


def test_merged_intervals_trims_and_merges():
    text = "a  bc de f"
    # trimmed to "bc" and "de", which no longer touch; overlapping spans merge
    assert merged_intervals(text, [Span(1, 5), Span(5, 8), Span(9, 10)]).tolist() == [[3, 5], [6, 8], [9, 10]]
    assert merged_intervals(text, [Span(6, 8), Span(3, 7), Span(7, 10)]).tolist() == [[3, 10]]


@pytest.fixture(scope="module")
def bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<mask>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["My ID is 1234 and my phone is 555-123-4567.", "Call Betty Sims at 1234 Main Street, Springfield."]
    tok.train_from_iterator(corpus * 5, trainer=trainer)
    return tok


CASES = [
    ("My ID is 1234 and Betty Sims called.", [Span(9, 13, "id"), Span(18, 28, "name")]),
    ("Call 555-123-4567 or write to Betty.", [Span(5, 17, "phone"), Span(30, 35, "name")]),
    ("Springfield Main Street 1234", [Span(0, 11, "GPE"), Span(24, 28, "id")]),
]


@pytest.mark.parametrize("text,spans", CASES)
def test_byte_level_bpe_offsets_match_the_reference(bpe, text, spans):
    enc = bpe.encode(text)
    assert any(text[a] == " " for a, b in enc.offsets if b > a)  # offsets do carry leading spaces
    mask = token_mask(enc.offsets, spans, text)
    assert mask.tolist() == reference_mask(text, enc.offsets, spans)
    flagged = "".join(t for t, m in zip(enc.tokens, mask) if m).replace("Ġ", " ").strip()
    for s in spans:
        assert text[s.start : s.end].replace(" ", "") in flagged.replace(" ", "")


def test_batch_version(bpe):
    encs = [bpe.encode(t) for t, _ in CASES]
    masks = token_masks([e.offsets for e in encs], [s for _, s in CASES], [t for t, _ in CASES])
    assert [m.tolist() for m in masks] == [token_mask(e.offsets, s, t).tolist() for e, (t, s) in zip(encs, CASES)]
    with pytest.raises(ValueError):
        token_masks([encs[0].offsets], [[], []])
