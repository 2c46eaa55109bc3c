"""A trial's model is saved in Hugging Face's layout: transformers' Auto classes (and the LSTM's own loader) load it
and give the trained model's outputs; no `weights.pt`."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from sdp_core.config.model import ModelConfig
from sdp_core.models import build_model
from sdp_core.models.checkpoint import load_model, save_model
from sdp_core.models.lstm import LSTMLM


@pytest.fixture(scope="module")
def tokenizer():
    from sdp_core.text.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(["USR: My ID is 123456.", "SYS: Your order ships on Monday."] * 20, 300)


def _hf_outputs(arch: str, directory, ids: torch.Tensor) -> torch.Tensor:
    """The saved model's outputs through transformers' own classes, given what the project's wrappers pass."""
    b, t = ids.shape
    if arch == "gpt2":
        return AutoModelForCausalLM.from_pretrained(directory)(input_ids=ids, position_ids=torch.arange(t).repeat(b, 1)
                                                               ).logits
    if arch == "roberta":
        model = AutoModelForSequenceClassification.from_pretrained(directory)
        pad = model.config.pad_token_id
        return model(input_ids=ids, attention_mask=(ids != pad).long(),
                     position_ids=torch.arange(pad + 1, pad + 1 + t).repeat(b, 1),
                     token_type_ids=torch.zeros_like(ids)).logits
    return LSTMLM.from_pretrained(directory)(ids)


@pytest.mark.parametrize("arch", ["gpt2", "roberta", "lstm"])
def test_a_saved_model_loads_with_from_pretrained_and_gives_the_same_outputs(arch, tokenizer, tmp_path):
    cfg = ModelConfig(arch=arch)  # each arch's default preset
    torch.manual_seed(0)
    model = build_model(cfg, len(tokenizer), 16)
    with torch.no_grad():
        for p in model.parameters():  # "trained": nothing the constructor alone would give back
            p.add_(0.01 * torch.randn_like(p))
    model.eval()
    save_model(tmp_path, model, tokenizer, cfg, 16)
    assert not (tmp_path / "weights.pt").exists() and any(tmp_path.glob("*.safetensors"))
    ids = torch.randint(3, len(tokenizer), (2, 10))
    with torch.no_grad():
        expected = model(ids)
        torch.testing.assert_close(_hf_outputs(arch, tmp_path, ids), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(load_model(tmp_path)[0](ids), expected, rtol=1e-5, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path)("USR: My ID")["input_ids"] == tokenizer("USR: My ID")["input_ids"]


def test_a_folder_without_a_saved_model_is_a_user_error(tmp_path):
    from sdp_core.errors import UserError

    with pytest.raises(UserError, match="model.json"):
        load_model(tmp_path)
