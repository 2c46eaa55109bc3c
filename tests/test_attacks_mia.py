"""Membership inference on secrets: memorised secrets are told apart, an untrained model is at chance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_attacks_helpers import digit_tokenizer, encode, one_thread, small_gpt2, train  # noqa: F401

from sdp_core.attacks.mia import membership_inference
from sdp_core.attacks.mia import auc, best_accuracy, secret_nll
from sdp_core.data.customersim import generate_customersim
from sdp_core.errors import UserError
from sdp_core.tensors import LMData


@pytest.fixture(scope="module")
def splits():
    tok = digit_tokenizer()
    records = generate_customersim(48, 7)
    return tok, encode(tok, records[:24]), encode(tok, records[24:])


def test_trained_model_reveals_its_training_secrets(splits):
    tok, members, nonmembers = splits
    model = train(small_gpt2(len(tok), seed=0), members, steps=60)
    result = membership_inference(model, members, nonmembers, group_size=20)
    assert result["auc"] > 0.8 and result["best_accuracy"] > 0.7
    assert result["group_auc"] > 0.8 and result["member_groups"] == result["members"] // 20 > 0
    assert result["member_nll_mean"] < result["nonmember_nll_mean"]
    assert result["unit"] == "secret" and result["score"] == "mean_nll"
    zlib = membership_inference(model, members, nonmembers, reference="zlib", tokenizer=tok)
    assert zlib["score"] == "zlib_ratio" and zlib["auc"] > 0.8


def test_untrained_model_is_at_chance(splits):
    tok, members, nonmembers = splits
    result = membership_inference(small_gpt2(len(tok), seed=1), members, nonmembers)
    assert 0.35 < result["auc"] < 0.65
    assert result["members"] == result["nonmembers"] > 50  # ~3 secrets a dialog
    assert "training records' secrets" in result["not_covered"]  # read without noise: outside the trial's ε


def test_secrets_are_maximal_sensitive_runs_scored_by_mean_nll():
    tok = digit_tokenizer()
    model = small_gpt2(len(tok), seed=2).eval()
    ids = torch.randint(5, len(tok), (2, 8))
    sensitive = torch.zeros(2, 8, dtype=torch.bool)
    sensitive[0, [1, 2, 5]] = True  # runs {1, 2} and {5}
    sensitive[1, [1, 7]] = True  # a run at the row start, and one at its end
    data = LMData(ids, torch.ones(2, 8), sensitive, torch.arange(2))
    nll, tokens = secret_nll(model, data)
    with torch.no_grad():
        lp = torch.log_softmax(model(ids), -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    expected = [-(lp[0, 0] + lp[0, 1]) / 2, -lp[0, 4], -lp[1, 0], -lp[1, 6]]
    assert nll == pytest.approx([float(e) for e in expected], abs=1e-5)
    assert tokens == [ids[0, 1:3].tolist(), [int(ids[0, 5])], [int(ids[1, 1])], [int(ids[1, 7])]]


def test_auc_and_accuracy_statistics():
    assert auc(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert auc(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 0.5
    assert best_accuracy(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert best_accuracy(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 0.5  # never worse than "all non-member"


def test_data_without_secrets_is_a_user_error(splits):
    tok, members, _ = splits
    empty = LMData(members.input_ids, members.weights, torch.zeros_like(members.sensitive), members.record_index)
    with pytest.raises(UserError, match="sensitive tokens"):
        membership_inference(small_gpt2(len(tok)), members, empty)
    with pytest.raises(UserError, match="tokenizer"):
        membership_inference(small_gpt2(len(tok)), members, members, reference="zlib")
