"""GPT-2 architecture language models: presets built from a config, or HF `from_pretrained`."""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from sdp_core.errors import UserError

# GPT-2's activation `gelu_new` (tanh approximation) as torch's one fused kernel instead of HF's five elementwise
# ops: the same function, a gpt2-tiny CPU step about 5 % faster.
FUSED_GELU = {"gelu_new": "gelu_pytorch_tanh"}
# The head of a model built from a preset is untied from the input embedding; a pretrained GPT-2 keeps its tied
# pair, which private steps clip as one parameter (`clipping.shared`).
GPT2_PRESETS = {
    "gpt2-tiny": dict(n_layer=2, n_embd=128, n_head=4),
    "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt2-medium": dict(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-large": dict(n_layer=36, n_embd=1280, n_head=20),
}


class GPT2LM(nn.Module):
    """A GPT-2 that maps input ids [B, T] to logits [B, T, V].

    It passes contiguous `position_ids` of shape [B, T] itself: Opacus' per-sample hooks fail on the broadcast
    [1, T] default.
    """

    def __init__(self, model: GPT2LMHeadModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        b, t = input_ids.shape
        position_ids = torch.arange(t, device=input_ids.device).unsqueeze(0).repeat(b, 1)
        return self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits


def build_gpt2(preset: str | None, name_or_path: str | None, vocab_size: int, max_length: int, dropout: float) -> GPT2LM:
    if name_or_path:
        try:
            config = GPT2Config.from_pretrained(name_or_path)
            config.activation_function = FUSED_GELU.get(config.activation_function, config.activation_function)
            model = GPT2LMHeadModel.from_pretrained(name_or_path, config=config)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot load model {name_or_path!r}: {str(e).splitlines()[0]}") from None
        resize_for_tokenizer(model, vocab_size)
        return GPT2LM(model)
    if preset not in GPT2_PRESETS:
        raise UserError(f"unknown GPT-2 preset {preset!r} (known: {', '.join(GPT2_PRESETS)})")
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=max(max_length, 128),
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        tie_word_embeddings=False,
        activation_function=FUSED_GELU["gelu_new"],
        bos_token_id=None,
        eos_token_id=None,
        **GPT2_PRESETS[preset],
    )
    return GPT2LM(GPT2LMHeadModel(config))


def resize_for_tokenizer(model: GPT2LMHeadModel, vocab_size: int) -> None:
    """Grow the embedding for added special tokens; new rows start at the mean of the old ones.

    The JFT release overwrote an existing row when adding its mask token; HF's resize keeps old rows in place
    and `mean_resizing` initialises the new ones from the old rows' distribution.
    """
    if vocab_size != model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(vocab_size, mean_resizing=True)
