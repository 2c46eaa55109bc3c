"""Models: GPT-2 family (preset config or pretrained path), the DPLSTM language model, and RoBERTa classifiers.

Every language model maps input ids [B, T] to next-token logits [B, T, V], so the training loop, metrics and
attacks treat them alike; a classifier maps them to class logits [B, C] (the loss follows the data's labels).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from sdp_core.config import ModelConfig
from sdp_core.errors import UserError
from sdp_core.models.gpt2 import GPT2_PRESETS, GPT2LM, build_gpt2
from sdp_core.models.lstm import LSTM_PRESETS, LSTMLM
from sdp_core.models.roberta import ROBERTA_PRESETS, RobertaClassifier, build_roberta


def _lstm(cfg: ModelConfig, vocab_size: int, max_length: int) -> LSTMLM:
    if cfg.preset not in LSTM_PRESETS:
        raise UserError(f"unknown LSTM preset {cfg.preset!r} (known: {', '.join(LSTM_PRESETS)})")
    return LSTMLM(vocab_size, dropout=cfg.dropout, **LSTM_PRESETS[cfg.preset])


def _gpt2(cfg: ModelConfig, vocab_size: int, max_length: int) -> GPT2LM:
    return build_gpt2(cfg.preset, cfg.name_or_path, vocab_size, max_length, cfg.dropout)


def _roberta(cfg: ModelConfig, vocab_size: int, max_length: int) -> RobertaClassifier:
    return build_roberta(cfg.preset, cfg.name_or_path, vocab_size, max_length, cfg.dropout, cfg.num_labels)


MODEL_BUILDERS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {"gpt2": _gpt2, "lstm": _lstm,
                                                                            "roberta": _roberta}


def build_model(cfg: ModelConfig, vocab_size: int, max_length: int) -> nn.Module:
    """The model `cfg` describes; with `cfg.adapter`, its transformers model carries LoRA adapters (`adapters`)."""
    if cfg.arch not in MODEL_BUILDERS:
        raise UserError(f"model.arch {cfg.arch!r} is not a known model here (known: {', '.join(MODEL_BUILDERS)})")
    model = MODEL_BUILDERS[cfg.arch](cfg, vocab_size, max_length)
    if cfg.adapter is not None:
        from sdp_core.models.adapters import with_lora

        model.model = with_lora(model.model, cfg.adapter, cfg.arch)
    return model


def parameter_counts(model: nn.Module) -> dict[str, float]:
    """How many of the model's parameters training updates: with LoRA adapters, peft's own count
    (`get_nb_trainable_parameters`: the adapters and any trained head, against every weight of the base model);
    else the parameters that require a gradient, against all."""
    peft_count = getattr(getattr(model, "model", None), "get_nb_trainable_parameters", None)
    if peft_count is not None:
        trainable, total = peft_count()
    else:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
    return {"parameters": total, "trainable_parameters": trainable, "trainable_share": trainable / total}


__all__ = ["build_model", "parameter_counts", "GPT2LM", "LSTMLM", "RobertaClassifier", "GPT2_PRESETS", "LSTM_PRESETS", "ROBERTA_PRESETS",
           "MODEL_BUILDERS"]
