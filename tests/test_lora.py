"""LoRA adapters (`model.adapter`) under DP-SGD: the clipped, noised update against a micro-batch reference, the
weights after a step, the frozen base, and saving as a peft adapter or merged."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from sdp_core.config.model import ModelConfig
from sdp_core.models import build_model, parameter_counts
from sdp_core.models.checkpoint import load_model, save_model
from sdp_core.tensors import record_losses
from sdp_core.train.loop import DPStep, Phase, StepContext, make_optimizer
from sdp_core.train.randomness import TorchNoise
from test_train_clipping import VOCAB, _classification_data, _lm_data

LR, SIGMA = 0.5, 0.7
FAMILIES = {
    "gpt2": (dict(arch="gpt2", adapter={"rank": 4}), lambda: _lm_data(6, 16), 0.05),
    "roberta": (dict(arch="roberta", adapter={"rank": 4}, num_labels=3), lambda: _classification_data(6, 16), 0.05),
}


def _lora_model(settings: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(ModelConfig.model_validate(settings), VOCAB, 16)
    with torch.no_grad():  # B starts at 0, which would leave A without gradient: give both a part
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    return model


def _micro_batch_reference(model: torch.nn.Module, batch, clip: float, generator: torch.Generator
                           ) -> list[torch.Tensor]:
    """(Σ_i min(1, C/‖G_i‖)·G_i + N(0, σ²C²))/B with every G_i from its own forward and backward (no Opacus), in
    float64, and the noise drawn as the step draws it (`noise.MultiTensorNoise`: the adapters fit in one block, so
    one `torch.normal` over all trainable parameters, split in their order)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p, dtype=torch.float64) for p in trainable]
    for i in range(len(batch)):
        row = batch.subset([i])
        loss = record_losses(model(row.input_ids), row.input_ids, row.weights, row.labels)[0]
        grads = [g.double() for g in torch.autograd.grad(loss, trainable)]
        norm = torch.sqrt(sum(g.square().sum() for g in grads))
        factor = min(1.0, clip / (norm.item() + 1e-6))
        total = [t + factor * g for t, g in zip(total, grads)]
    flat = torch.normal(0, SIGMA * clip, (sum(p.numel() for p in trainable),), generator=generator)
    noise = [n.view_as(p) for n, p in zip(flat.split([p.numel() for p in trainable]), trainable)]
    return [((t + n.double()) / len(batch)).float() for t, n in zip(total, noise)]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["hooks", "bk"])
def test_dp_lora_step_equals_the_micro_batch_reference(family, mode):
    settings, data, clip = FAMILIES[family]
    model, batch = _lora_model(settings), data()
    reference_model = copy.deepcopy(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "classifier" in n for n in trainable)  # the adapters (and a head)

    phase = Phase("dp", batch, private=True, epochs=1, batch_size=len(batch), sigmas=(SIGMA,), max_grad_norm=clip)
    optimizer = make_optimizer(model, "sgd", LR, 0.0)
    step = DPStep(StepContext(model, optimizer, mode, TorchNoise(torch.Generator().manual_seed(11))), phase)
    step(batch, SIGMA)
    update = [p.grad.clone() for p in step.optimizer.params]
    model = step.close()

    expected = _micro_batch_reference(reference_model, batch, clip, torch.Generator().manual_seed(11))
    scale = max(e.abs().max() for e in expected)
    assert len(update) == len(expected)
    assert max((u - e).abs().max() for u, e in zip(update, expected)) <= 1e-5 * scale
    after = dict(model.named_parameters())
    expected_by_name = dict(zip([n for n, p in reference_model.named_parameters() if p.requires_grad], expected))
    for name, p in after.items():
        if name in trainable:  # the weights moved by exactly -lr · update
            torch.testing.assert_close(p.detach(), before[name] - LR * expected_by_name[name], rtol=1e-5,
                                       atol=1e-6 * scale)
        else:  # the frozen base did not move at all
            assert torch.equal(p.detach(), before[name]), name


@pytest.mark.parametrize("merge", [False, True])
def test_a_lora_model_saves_as_a_peft_adapter_or_merged(merge, tmp_path):
    from sdp_core.text.tokenizer import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["My ID is 123456. The order ships on Monday."] * 20, 300)
    cfg = ModelConfig(arch="gpt2", adapter={"rank": 4, "merge": merge})
    model = _lora_model(cfg.model_dump())
    model.eval()
    save_model(tmp_path, model, tokenizer, cfg, 16)
    ids = torch.randint(3, len(tokenizer), (2, 10))
    positions = torch.arange(10).repeat(2, 1)
    with torch.no_grad():
        expected = model(ids)
        hf = AutoModelForCausalLM.from_pretrained(tmp_path)
        if not merge:  # the directory holds the frozen base; the adapter beside it
            base_logits = hf(input_ids=ids, position_ids=positions).logits
            assert not torch.allclose(base_logits, expected, atol=1e-4)
            hf = PeftModel.from_pretrained(hf, tmp_path / "adapter")
        torch.testing.assert_close(hf(input_ids=ids, position_ids=positions).logits, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(load_model(tmp_path)[0](ids), expected, rtol=1e-4, atol=1e-4)
    assert AutoTokenizer.from_pretrained(tmp_path)("My ID")["input_ids"] == tokenizer("My ID")["input_ids"]


def test_a_lora_classifier_keeps_its_trained_head(tmp_path):
    from sdp_core.text.tokenizer import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["I love it.", "I hate it."] * 20, 300)
    cfg = ModelConfig(arch="roberta", adapter={"rank": 2, "merge": True}, num_labels=3)
    model = _lora_model(cfg.model_dump())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "classifier" in name and p.requires_grad:
                p.add_(0.5)  # a trained head differs from the frozen original copy
    model.eval()
    save_model(tmp_path, model, tokenizer, cfg, 16)
    ids = torch.randint(3, len(tokenizer), (2, 10))
    with torch.no_grad():
        hf = AutoModelForSequenceClassification.from_pretrained(tmp_path)
        torch.testing.assert_close(load_model(tmp_path)[0](ids), model(ids), rtol=1e-4, atol=1e-4)
        assert hf.config.num_labels == 3


def lora_parameters(n_layer: int, n_embd: int, rank: int) -> int:
    """LoRA on GPT-2's c_attn (d_in = n_embd, d_out = 3 n_embd): A is rank × d_in and B is d_out × rank per layer."""
    return n_layer * rank * (n_embd + 3 * n_embd)


def test_a_lora_model_counts_its_trainable_parameters():
    """The trainable count of a LoRA GPT-2 is the adapters' (Hu et al. 2022's r·(d_in + d_out) per adapted matrix),
    against every weight; a model without adapters trains all of its own."""
    model = build_model(ModelConfig(arch="gpt2", preset="gpt2-tiny", adapter={"rank": 4}), VOCAB, 16)
    adapters = lora_parameters(2, 128, 4)
    base = sum(p.numel() for p in build_model(ModelConfig(arch="gpt2", preset="gpt2-tiny"), VOCAB, 16).parameters())
    assert parameter_counts(model) == {"parameters": base + adapters, "trainable_parameters": adapters,
                                       "trainable_share": adapters / (base + adapters)}
    full = parameter_counts(build_model(ModelConfig(arch="gpt2", preset="gpt2-tiny"), VOCAB, 16))
    assert full == {"parameters": base, "trainable_parameters": base, "trainable_share": 1.0}


def test_an_lstm_has_no_adapter():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="LoRA"):
        ModelConfig(arch="lstm", adapter={"rank": 4})
