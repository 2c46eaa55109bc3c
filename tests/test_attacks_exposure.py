"""Canary exposure: trie enumeration == naive scoring; memorised canary -> log2|R|; indifferent model -> 0."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_attacks_helpers import digit_tokenizer, encode, merging_tokenizer, one_thread, small_gpt2, train  # noqa: F401

from sdp_core.attacks import (canary_exposures, estimate_exposures, exposure_estimate, exposure_exact, exposure_naive,
                              rank_secrets, score_space)
from sdp_core.attacks.candidates import _assembled, _tokenized, all_chars, candidate_tokens, default_context
from sdp_core.data.canaries import CanaryFormat, insert_canaries
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Record
from sdp_core.errors import UserError
from sdp_core.models.lstm import LSTMLM

CANARY = "341752"


def _assert_same_ranking(model, tok, fmt, secrets):
    trie = score_space(model, tok, fmt, enumeration="trie", batch_size=512)
    naive = score_space(model, tok, fmt, enumeration="naive", batch_size=512)
    assert np.abs(trie - naive).max() < 1e-4
    ranks = [[r["rank"] for r in rank_secrets(scores, fmt, secrets)] for scores in (trie, naive)]
    assert ranks[0] == ranks[1]


@pytest.fixture(scope="module")
def memorised():
    """A small GPT-2 trained only on the canary line: it should single the canary out of all 10^6 candidates."""
    tok = digit_tokenizer()
    model = small_gpt2(len(tok))
    data = encode(tok, [Record(f"USR: My ID is {CANARY}")] * 8)
    return train(model, data, steps=120), tok


def test_memorised_canary_has_maximal_exposure_over_a_million_candidates(memorised):
    model, tok = memorised
    fmt = CanaryFormat.parse("My ID is {dddddd}")
    result = exposure_exact(model, tok, fmt, CANARY, batch_size=4096)
    assert result["rank"] == 1
    assert result["exposure"] == pytest.approx(math.log2(10**6))
    assert result["space_size"] == 10**6 and CANARY not in json.dumps(result)
    # The skew-normal extrapolation also puts it far in the tail.
    assert exposure_estimate(model, tok, fmt, CANARY, sample_size=2000)["exposure"] > 15


def test_model_indifferent_to_digits_ranks_every_canary_last():
    tok = digit_tokenizer()
    fmt = CanaryFormat.parse("My ID is {dddd}")
    gpt2 = small_gpt2(len(tok))
    torch.nn.init.zeros_(gpt2.model.lm_head.weight)  # uniform next-token distribution everywhere
    lstm = LSTMLM(len(tok), 16, 16)
    torch.nn.init.zeros_(lstm.head.weight)
    torch.nn.init.zeros_(lstm.head.bias)
    for model in (gpt2, lstm):
        for scorer in (exposure_exact, exposure_naive):
            result = scorer(model, tok, fmt, "0420")
            assert result["rank"] == 10**4  # every candidate ties, and ties count against the canary
            assert result["exposure"] == 0.0


def test_trie_equals_naive_with_digit_per_token_tokenizer():
    tok = digit_tokenizer()
    fmt = CanaryFormat.parse("My ID is {dddd}.")  # a suffix is scored too
    _assert_same_ranking(small_gpt2(len(tok), seed=1), tok, fmt, ["0000", "1234", "9876", "5050"])


def test_trie_equals_naive_with_bpe_that_merges_digits():
    tok = merging_tokenizer()
    fmt = CanaryFormat.parse("My ID is {dddd}")
    cand = candidate_tokens(tok, fmt, default_context(tok), all_chars(fmt))
    assert cand.lengths.max() < 4 and cand.lengths.min() < cand.lengths.max()  # merged and uneven splits
    _assert_same_ranking(small_gpt2(len(tok), seed=2), tok, fmt, ["0000", "1234", "9876", "5050"])


def test_lstm_trie_equals_naive():
    tok = digit_tokenizer()
    torch.manual_seed(3)
    _assert_same_ranking(LSTMLM(len(tok), 24, 24), tok, CanaryFormat.parse("code {ddd}"), ["000", "123", "987"])


def test_assembled_digit_candidates_equal_full_tokenization():
    tok = digit_tokenizer()
    fmt = CanaryFormat.parse("My ID is {ddd}, thanks")
    chars = all_chars(fmt)
    fast, slow = _assembled(tok, fmt, default_context(tok), chars), _tokenized(tok, fmt, default_context(tok), chars)
    assert fast is not None
    assert np.array_equal(fast.context, slow.context) and np.array_equal(fast.rest, slow.rest)
    # Letters are not isolated by the pre-tokenizer: no assembly, the general path is used.
    letters = CanaryFormat.parse("key {aa}")
    assert _assembled(tok, letters, default_context(tok), all_chars(letters)) is None


def test_estimate_tracks_exact_on_an_untrained_model():
    tok = digit_tokenizer()
    fmt = CanaryFormat.parse("My ID is {dddd}")
    model = small_gpt2(len(tok), seed=4)
    scores = score_space(model, tok, fmt)
    # Candidates at exact ranks 200, 2000, 8000 (all_secrets order is numeric): the bulk the fit sees well. Far in
    # the tail the skew-normal extrapolation is rougher (benchmarks/exposure.py reports its error there).
    secrets = [f"{i:04d}" for i in np.argsort(-scores)[[199, 1999, 7999]]]
    exact = [r["exposure"] for r in rank_secrets(scores, fmt, secrets)]
    estimated, fit = estimate_exposures(model, tok, fmt, secrets, sample_size=3000)
    assert fit["sample_size"] == 3000
    assert np.abs(np.array([r["exposure"] for r in estimated]) - exact).max() < 0.5


def test_canary_exposures_of_a_plan():
    tok = digit_tokenizer()
    records, plan = insert_canaries(generate_customersim(20, 1), "My ID is {dddd}", count=3, repeats=2, seed=0)
    model = small_gpt2(len(tok), seed=5)
    result = canary_exposures(model, tok, plan, "exact")
    assert result["count"] == 3 and result["repeats"] == 2 and len(result["exposures"]) == 3
    assert len(result["reference_exposures"]) == 3
    assert result["exposure_max"] == max(result["exposures"]) <= result["max_exposure"]
    assert result["max_exposure"] == pytest.approx(math.log2(10**4))
    direct = [exposure_exact(model, tok, plan.format, s)["exposure"] for s in plan.secrets]
    assert result["exposures"] == pytest.approx(direct)
    estimated = canary_exposures(model, tok, plan, "estimate", sample_size=1000)
    assert estimated["method"] == "estimate" and len(estimated["exposures"]) == 3
    for report in (result, estimated):
        text = json.dumps(report)
        assert not any(s in text for s in plan.secrets)
    with pytest.raises(UserError, match="use method estimate"):
        canary_exposures(model, tok, plan, "exact", limit=1000)


def test_user_errors_never_echo_the_secret():
    tok = digit_tokenizer()
    model = small_gpt2(len(tok))
    with pytest.raises(UserError, match="use method estimate"):
        exposure_exact(model, tok, CanaryFormat.parse("ID {dddddddd}"), "12345678")
    with pytest.raises(UserError) as err:
        exposure_exact(model, tok, CanaryFormat.parse("ID {dddd}"), "12x4")
    assert "12x4" not in str(err.value)
    with pytest.raises(UserError):
        CanaryFormat.parse("My ID is 123")
