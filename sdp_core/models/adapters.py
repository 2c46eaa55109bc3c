"""LoRA adapters through peft (`model.adapter`): the base model frozen, low-rank updates B·A beside its layers.

Hu et al. 2022 ("LoRA: Low-rank adaptation of large language models"); privately, Yu et al. 2022 ("Differentially
private fine-tuning of language models"): DP-SGD clips and noises the trainable parameters only — the adapters
and, for a classifier, its new head — and the accounting does not change (it counts sampled batches, not weights).
"""

from __future__ import annotations

import copy

from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedModel

from sdp_core.config.model import AdapterConfig

DEFAULT_TARGETS = {"gpt2": ["c_attn"], "roberta": ["query", "value"]}
"""Where adapters go when `target_modules` is not set: the attention projections, as in the LoRA paper."""
TRAINED_HEADS = {"roberta": ["classifier"]}
"""Modules trained in full beside the adapters: a classifier's head starts untrained."""


def with_lora(model: PreTrainedModel, cfg: AdapterConfig, arch: str) -> PeftModel:
    """`model` with LoRA adapters; only they (and the arch's trained head) keep `requires_grad`."""
    config = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                        target_modules=cfg.target_modules or DEFAULT_TARGETS[arch],
                        modules_to_save=TRAINED_HEADS.get(arch),
                        fan_in_fan_out=arch == "gpt2")  # GPT-2's Conv1D stores its weight as [d_in, d_out]
    return get_peft_model(model, config)


def without_adapters(model: PeftModel, merge: bool) -> PreTrainedModel:
    """A copy of the plain transformers model: the adapters merged into its weights, or removed (the frozen base)."""
    model = copy.deepcopy(model)
    return model.merge_and_unload() if merge else model.unload()
