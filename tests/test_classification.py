"""Sequence classification (JFT's GLUE setting): the embedded review set, the RoBERTa classifier under Opacus, and
DP-SGD vs JFT through `run_trial` on one loop."""

from __future__ import annotations

import math
import re

import pytest
import torch

from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.data.classification import classification_splits, generate_reviews
from sdp_core.errors import ConfigError, DataError
from sdp_core.models.roberta import build_roberta
from sdp_core.tensors import LMData, per_record_classification_loss
from sdp_core.text.redaction import redact
from sdp_core.train.loop import DPStep, Phase, StepContext
from sdp_core.train.randomness import TorchNoise
from sdp_core.preparation import prepare_trial_data
from sdp_core.trial import run_trial
from tests.conftest import run_main

VOCAB, T = 300, 16


def classification_trial(mechanism: str, **training) -> TrialConfig:
    """A classifier trial of a few seconds: 600 reviews, regex policy (names are missed: an imperfect detector)."""
    return parse_model(TrialConfig, {
        "name": mechanism, "seed": 0,
        "data": {"source": "synthetic_classification", "n_train": 600, "n_validation": 100, "n_test": 100},
        "model": {"arch": "roberta"},
        "detector": {"policy": "phone,order_number"},
        "tokenizer": {"vocab_size": 600},
        "mechanism": {"name": mechanism},
        "privacy": {"reproducible_noise": True},  # a fixed draw of the noise: the accuracy bars below are exact
        "training": {"batch_size": 16, "epochs": 2, "max_steps": 40, "learning_rate": 2e-3, **training},
    })


# ------------------------------------------------------------------------------------------- the data


def test_reviews_are_seeded_with_exact_gold_spans_and_balanced_labels():
    a, b = generate_reviews(201, seed=3), generate_reviews(201, seed=3)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    assert [r.text for r in generate_reviews(20, seed=4)] != [r.text for r in a[:20]]
    assert abs(sum(r.label for r in a) - len(a) / 2) <= 0.5 and {r.label for r in a} == {0, 1}
    assert all({s.label for s in r.spans} >= {"name", "order_number"} for r in a)
    assert {s.label for r in a for s in r.spans} == {"name", "phone", "order_number"}


def test_gold_span_is_exactly_the_secret_value():
    formats = {"order_number": r"\d{3}-\d{5}-\d{4}", "phone": r"\(?\d{3}\)?[ .-]?\d{3}[.-]\d{4}",
               "name": r"[A-Z][\w'-]+ [A-Z][\w'-]+"}
    for r in generate_reviews(100, seed=0):
        for s in r.spans:
            assert re.fullmatch(formats[s.label], r.text[s.start : s.end]), (s.label, r.text[s.start : s.end])
        # nothing of a secret lies outside its span: the redacted text holds no digit at all
        assert not re.search(r"\d", redact(r.text, list(r.spans)))


def test_splits_resize_independently():
    small, large = classification_splits(10, 5, 5, seed=1), classification_splits(20, 5, 5, seed=1)
    assert small.validation == large.validation and small.test == large.test


# ------------------------------------------------------------------------------------ the model, Opacus


def _classifier(seed: int = 0):
    torch.manual_seed(seed)
    return build_roberta("roberta-tiny", None, VOCAB, T, 0.0, num_labels=2)


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("mode", ["hooks", "bk"])
def test_sigma_zero_without_clipping_equals_plain_step(mode):
    """Per-sample gradients of the RoBERTa wrapper are exact: a private step with σ = 0, C = ∞ is a plain step."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (8, T), generator=g)
    ids[:, 0] = 1
    for r in range(8):  # rows of different lengths: the padding mask matters
        ids[r, 6 + r :] = 0
    labels = torch.randint(0, 2, (8,), generator=g)
    data = LMData(ids, (ids != 0).float(), torch.zeros_like(ids, dtype=torch.bool), torch.arange(8), labels)

    plain, private = _classifier(), _classifier()
    sgd = torch.optim.SGD(plain.parameters(), lr=0.1)
    per_record_classification_loss(plain(ids), labels).mean().backward()
    sgd.step()

    phase = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(0.0,), max_grad_norm=1e6)
    private_sgd = torch.optim.SGD(private.parameters(), lr=0.1)
    trainer = DPStep(StepContext(private, private_sgd, mode, TorchNoise(torch.Generator())), phase)
    trainer(data, 0.0)
    a, b, start = _flat(plain), _flat(trainer.close()), _flat(_classifier())
    assert (a - start).norm() > 1e-3  # the step did move the weights
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_padding_does_not_change_the_prediction():
    model = _classifier().eval()
    ids = torch.tensor([[1, 5, 6, 7, 1, 0, 0, 0]])
    longer = torch.cat([ids, torch.zeros(1, 8, dtype=torch.long)], 1)
    assert torch.allclose(model(ids), model(longer), atol=1e-5)


# --------------------------------------------------------------------------------------- whole trials


@pytest.fixture(scope="module")
def dpsgd_and_jft():
    return {m: run_trial(classification_trial(m)) for m in ("dpsgd", "jft")}


def test_dpsgd_and_jft_spend_their_target_with_their_notion(dpsgd_and_jft):
    for mechanism, notion in (("dpsgd", "DP"), ("jft", "SDP")):
        result = dpsgd_and_jft[mechanism]
        p = result.privacy
        assert result.state == "finished" and p["notion"] == notion and p["complete"]
        assert 0.995 * 3.0 <= p["epsilon"] <= 3.0
        assert not result.attacks  # exposure and MIA attack token likelihoods: not a classifier's
    jft = dpsgd_and_jft["jft"]
    assert [(ph["name"], ph["private"]) for ph in jft.phases] == [("phase1", False), ("phase2", True)]


def test_accuracy_is_reported_and_jft_beats_dpsgd(dpsgd_and_jft):
    dpsgd, jft = dpsgd_and_jft["dpsgd"].metrics, dpsgd_and_jft["jft"].metrics
    for m in (dpsgd, jft):
        assert 0 <= m["val_accuracy"] <= 1 and 0 <= m["test_accuracy"] <= 1 and math.isfinite(m["val_loss"])
        assert "val_perplexity" not in m
    # From scratch at this size a non-private classifier learns the task (1.0), DP-SGD stays at chance (0.50), and
    # JFT, whose SDP noise is calibrated for replace-one neighbours, does no worse than DP-SGD.
    assert jft["val_accuracy"] >= dpsgd["val_accuracy"]
    assert run_trial(classification_trial("nodp")).metrics["val_accuracy"] > 0.9


@pytest.mark.parametrize("mechanism,notion", [("nodp", "none"), ("redacted", "SDP")])
def test_nodp_and_redacted_classifiers_train_without_private_steps(mechanism, notion, tmp_path):
    from sdp_core.models.checkpoint import load_model

    result = run_trial(classification_trial(mechanism, max_steps=4), tmp_path)
    assert result.state == "finished" and result.privacy["notion"] == notion and not result.privacy["events"]
    assert result.phases[0]["steps"] == 4 and 0 <= result.metrics["val_accuracy"] <= 1
    model, tokenizer, _ = load_model(tmp_path / "model")  # the saved classifier reloads with its shape and pad id
    ids = tokenizer(["<eos>I love it.<eos>"], return_tensors="pt")["input_ids"]
    assert model(ids).shape == (1, 2) and int(model.pad_token_id) == tokenizer.pad_token_id


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("section,problem", [
    ({"mechanism": {"name": "crt"}}, "mechanism crt is for language models"),
    ({"mechanism": {"name": "atdp"}}, "mechanism atdp is for language models"),
    ({"data": {"source": "customersim"}}, "needs labelled data"),
    ({"data": {"source": "synthetic_classification", "canaries": {}}}, "data.canaries"),
])
def test_classifier_with_a_language_model_setting_is_a_one_line_config_error(section, problem):
    raw = classification_trial("dpsgd").model_dump(mode="json")
    with pytest.raises(ConfigError) as e:
        parse_model(TrialConfig, {**raw, **section})
    assert problem in str(e.value) and len(e.value.lines()) == 1


def test_cli_rejects_roberta_with_crt_in_one_line():
    proc = run_main("trial", "--set", "model.arch=roberta", "--set", "mechanism.name=crt",
                   "--set", "data.source=synthetic_classification")
    assert proc.returncode == 2 and "mechanism crt is for language models" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_unlabelled_records_are_a_data_error(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join('{"text": "a review number %d", "label": 1}\n' % i for i in range(9))
                    + '{"text": "no label here"}\n')
    cfg = parse_model(TrialConfig, {"data": {"source": "file", "path": str(data)}, "model": {"arch": "roberta"},
                                    "detector": {"policy": "phone"}, "tokenizer": {"vocab_size": 300}})
    with pytest.raises(DataError, match="has no class label"):
        prepare_trial_data(cfg)
