"""RoBERTa-architecture sequence classifiers (JFT's GLUE experiments): presets built from a config, or HF
`from_pretrained`.

A row is `<eos> tokens... <eos> <pad>...` as for the language models; the classification head reads token 0,
so the leading `<eos>` plays RoBERTa's `<s>`/`[CLS]` role and no extra special token is needed.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import RobertaConfig, RobertaForSequenceClassification

from sdp_core.errors import UserError
from sdp_core.models.quiet import no_progress_bars
from sdp_core.models.gpt2 import resize_for_tokenizer
from sdp_core.text.tokenizer import PAD, SPECIAL_TOKENS

ROBERTA_PRESETS = {
    "roberta-tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256),
    "roberta-base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
}
BPE_PAD_ID = SPECIAL_TOKENS.index(PAD)  # a preset model reads our BPE tokenizer's ids


class RobertaClassifier(nn.Module):
    """A RoBERTa that maps input ids [B, T] to class logits [B, C].

    It builds the attention mask (padding ignored) and contiguous `position_ids` [B, T] itself: Opacus' per-sample
    hooks fail on broadcast [1, T] defaults. RoBERTa positions start at padding_idx + 1. The pad id
    is a buffer, so a reloaded checkpoint masks and positions exactly as the trained model did.
    """

    def __init__(self, model: RobertaForSequenceClassification, pad_token_id: int):
        super().__init__()
        self.model = model
        self.register_buffer("pad_token_id", torch.tensor(pad_token_id))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        b, t = input_ids.shape
        first = int(self.pad_token_id) + 1
        position_ids = torch.arange(first, first + t, device=input_ids.device).unsqueeze(0).repeat(b, 1)
        return self.model(input_ids=input_ids, attention_mask=(input_ids != self.pad_token_id).long(),
                          position_ids=position_ids, token_type_ids=torch.zeros_like(input_ids)).logits


def build_roberta(preset: str | None, name_or_path: str | None, vocab_size: int, max_length: int, dropout: float,
                  num_labels: int) -> RobertaClassifier:
    """A pretrained RoBERTa (by hub name or path, with its own tokenizer's pad id) or a preset one from scratch."""
    if name_or_path:
        try:
            with no_progress_bars():
                model = RobertaForSequenceClassification.from_pretrained(name_or_path, num_labels=num_labels)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot load model {name_or_path!r}: {str(e).splitlines()[0]}") from None
        pad = model.config.pad_token_id
        if max_length > model.config.max_position_embeddings - pad - 1:
            raise UserError(f"data.max_length {max_length} is longer than {name_or_path!r} allows "
                            f"({model.config.max_position_embeddings - pad - 1})")
        resize_for_tokenizer(model, vocab_size)
        return RobertaClassifier(model, pad)
    if preset not in ROBERTA_PRESETS:
        raise UserError(f"unknown RoBERTa preset {preset!r} (known: {', '.join(ROBERTA_PRESETS)})")
    config = RobertaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=max(max_length, 128) + BPE_PAD_ID + 1,
        type_vocab_size=1,
        pad_token_id=BPE_PAD_ID,
        bos_token_id=None,
        eos_token_id=None,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        num_labels=num_labels,
        **ROBERTA_PRESETS[preset],
    )
    return RobertaClassifier(RobertaForSequenceClassification(config), BPE_PAD_ID)
