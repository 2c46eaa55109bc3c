"""Canary exposure: trie enumeration == naive scoring; memorised canary -> log2|R|; indifferent model -> 0; a
random rank's floor ≈ 1.44 bits with a t-interval of the mean; the one-run bound of a memorising model > 0."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats
from test_attacks_helpers import digit_tokenizer, encode, merging_tokenizer, one_thread, small_gpt2, train  # noqa: F401

from sdp_core.attacks.audit import empirical_epsilon
from sdp_core.attacks.canaries import canary_exposures, mean_interval
from sdp_core.attacks.estimate import estimate_exposures, exposure_estimate
from sdp_core.attacks.exposure import exposure_exact, exposure_floor, exposure_naive, rank_secrets, score_space
from sdp_core.attacks.candidates import _assembled, _tokenized, all_chars, candidate_tokens, default_context
from sdp_core.config.canary import CanaryFormat
from sdp_core.data.canaries import insert_canaries
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Record
from sdp_core.errors import UserError
from sdp_core.models.lstm import LSTMLM
from sdp_core.text.encode import encode as encode_rows

CANARY = "341752"


def _assert_same_ranking(model, tok, fmt, secrets):
    trie = score_space(model, tok, fmt, enumeration="trie", batch_size=512)
    naive = score_space(model, tok, fmt, enumeration="naive", batch_size=512)
    assert np.abs(trie - naive).max() < 1e-4
    ranks = [[r["rank"] for r in rank_secrets(scores, fmt, secrets)] for scores in (trie, naive)]
    assert ranks[0] == ranks[1]


@pytest.fixture(scope="module")
def memorised():
    """A small GPT-2 trained only on the canary line: it should single the canary out of all 10^6 candidates when
    scored in the context it was trained in (after `USR: `)."""
    tok = digit_tokenizer()
    model = small_gpt2(len(tok))
    data = encode(tok, [Record(f"USR: My ID is {CANARY}")] * 8)
    return train(model, data, steps=120), tok


def test_memorised_canary_has_maximal_exposure_over_a_million_candidates(memorised):
    model, tok = memorised
    fmt = CanaryFormat.parse("My ID is {dddddd}")
    context = default_context(tok, "USR: ")
    result = exposure_exact(model, tok, fmt, CANARY, context=context, batch_size=4096)
    assert result["rank"] == 1
    assert result["exposure"] == pytest.approx(math.log2(10**6))
    assert result["space_size"] == 10**6 and CANARY not in json.dumps(result)
    # The skew-normal extrapolation also puts it far in the tail.
    assert exposure_estimate(model, tok, fmt, CANARY, context=context, sample_size=2000)["exposure"] > 15


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
    records, plan = insert_canaries(generate_customersim(40, 1), "My ID is {dddd}", count=8, repeats=2, seed=0)
    members = [s for s, i in zip(plan.secrets, plan.inserted) if i]
    held_out = [s for s, i in zip(plan.secrets, plan.inserted) if not i]
    assert len(members) >= 2 and held_out
    model = small_gpt2(len(tok), seed=5)
    result = canary_exposures(model, tok, plan, "exact")
    assert result["count"] == 8 and result["inserted"] == len(members) and result["repeats"] == 2
    assert len(result["exposures"]) == len(members) and len(result["held_out_exposures"]) == len(held_out)
    assert result["exposure_max"] == max(result["exposures"]) <= result["max_exposure"]
    assert result["max_exposure"] == pytest.approx(math.log2(10**4))
    assert result["floor"] == exposure_floor(10**4) and result["interval"] == mean_interval(result["exposures"], low=0.0,
                                                                                        high=result["max_exposure"])
    # Scored in the canaries' own context: `<eos>USR: `, as each was inserted as a line of the user.
    context = default_context(tok, "USR: ")
    direct = [exposure_exact(model, tok, plan.format, s, context=context)["exposure"] for s in members + held_out]
    assert result["exposures"] + result["held_out_exposures"] == pytest.approx(direct)
    estimated = canary_exposures(model, tok, plan, "estimate", sample_size=1000)
    assert estimated["method"] == "estimate" and len(estimated["exposures"]) == len(members)
    for report in (result, estimated):
        text = json.dumps(report)
        assert not any(s in text for s in plan.secrets)
    with pytest.raises(UserError, match="use method estimate"):
        canary_exposures(model, tok, plan, "exact", limit=1000)


def test_floor_is_the_mean_exposure_of_a_uniform_rank():
    for size in (10, 10**4, 10**6):
        ranks = np.arange(1, size + 1)
        assert exposure_floor(size) == pytest.approx(np.mean(np.log2(size) - np.log2(ranks)), rel=1e-9)
    assert exposure_floor(10**6) == pytest.approx(1 / math.log(2), abs=1e-4)  # E[-log2 U], U uniform on (0, 1)


def test_interval_is_the_t_interval_of_the_mean():
    values = [2.1, 0.4, 3.3, 1.0, 1.9, 0.2, 5.5]
    expected = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert mean_interval(values) == pytest.approx(list(expected))
    assert mean_interval([1.0]) is None


def test_interval_stays_in_the_metrics_range():
    """Exposure is never negative: a skewed sample whose t-interval reaches below 0 is cut at 0 (and at the top)."""
    values = [0.0, 0.0, 0.0, 0.1, 6.0]
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert low < 0
    assert mean_interval(values, low=0.0, high=20.0) == pytest.approx([0.0, high])
    assert mean_interval(values, low=0.0, high=3.0) == pytest.approx([0.0, 3.0])


def test_unmemorised_canaries_average_the_floor():
    """An untrained model has memorised no canary: the mean exposure of many canaries sits at the floor (not at 0,
    not at log2|R|), inside its interval."""
    tok = digit_tokenizer()
    _, plan = insert_canaries(generate_customersim(400, 2), "My ID is {dddd}", count=200, repeats=1, seed=1)
    result = canary_exposures(small_gpt2(len(tok), seed=6), tok, plan)
    everything = result["exposures"] + result["held_out_exposures"]
    low, high = mean_interval(everything)
    assert low < result["floor"] < high and high - low < 0.6


@pytest.fixture(scope="module")
def audited():
    """Canaries drawn for a one-run audit of 40, about half inserted twice each; a small GPT-2 trained heavily on
    the inserted canary lines, and an untrained one."""
    tok = digit_tokenizer()
    _, plan = insert_canaries(generate_customersim(80, 1), "My ID is {dddd}", count=40, repeats=2, seed=0)
    lines = [plan.text(i.canary) for i in plan.insertions]
    trained = train(small_gpt2(len(tok)), encode_rows(lines, [[] for _ in lines], tok, 24), steps=150)
    return tok, plan, trained, small_gpt2(len(tok), seed=1)


def test_one_run_bound_is_positive_for_a_memorising_model_and_zero_for_an_untrained_one(audited):
    tok, plan, trained, untrained = audited
    bounds = {}
    for name, model in (("trained", trained), ("untrained", untrained)):
        exposure = canary_exposures(model, tok, plan)
        bounds[name] = empirical_epsilon(exposure["exposures"], exposure["held_out_exposures"], group_size=2)
        if name == "trained":  # memorised: far above the floor, with a tight interval
            assert exposure["interval"][0] > exposure["floor"] + 5
    assert bounds["trained"]["epsilon_lower_bound"] > 1 and bounds["trained"]["epsilon_lower_bound_per_record"] > 0.3
    assert bounds["trained"]["canaries"] == 40 and bounds["trained"]["correct"] == bounds["trained"]["guesses"]
    assert bounds["untrained"]["epsilon_lower_bound"] == 0.0


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
