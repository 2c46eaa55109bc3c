"""Tokenizer and model settings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from sdp_core.config.base import Strict, _value_defaults


TOKENIZER_RECORDS = 100_000
"""The default `tokenizer.train_records`: the records a BPE learns from at most. Its merges are the corpus's most
frequent pairs, which a sample of this size already ranks as the whole data does (measured on clinic notes in
docs/performance.md), while the redacted texts it reads are held at once: a sample keeps that bounded as the data
grows."""


class TokenizerConfig(Strict):
    kind: Literal["bpe", "pretrained"] = "bpe"
    vocab_size: int = Field(4000, ge=300)
    train_records: int | None = Field(
        TOKENIZER_RECORDS, ge=1, description="records the BPE learns from: a sample of its corpus drawn by data.seed "
        "when it holds more (null: every record)")
    name_or_path: str | None = None
    corpus: Literal["training", "public"] = Field(
        "training", description="what the BPE learns from: the policy-redacted training text (a DP guarantee does "
        "not cover it; the privacy report says so), or public text (tokenizer.public_path, or for CustomerSim "
        "dialogs generated apart from the data) that no guarantee needs to cover")
    public_path: str | None = Field(None, description="JSONL / Parquet / text file of public text, for corpus=public")

    @model_validator(mode="after")
    def _pretrained_needs_name(self) -> "TokenizerConfig":
        if self.kind == "pretrained" and not self.name_or_path:
            raise ValueError("kind=pretrained needs tokenizer.name_or_path")
        return self


# What each architecture learns: next-token language modelling, or sequence classification (one label per record).
ARCH_TASKS = {"gpt2": "lm", "lstm": "lm", "roberta": "classification"}
ARCH_DEFAULTS: dict[str, dict[str, Any]] = {"lstm": {"preset": "lstm-200"}, "roberta": {"preset": "roberta-tiny"}}


class AdapterConfig(Strict):
    """LoRA (Hu et al. 2022, "LoRA: Low-rank adaptation of large language models") through peft: the base model is
    frozen and only the adapters (and a classifier's head) train, so DP-SGD clips and noises those alone (Yu et al.
    2022, "Differentially private fine-tuning of language models")."""

    type: Literal["lora"] = "lora"
    rank: int = Field(8, ge=1, description="r: the rank of each adapter's update B·A")
    alpha: float = Field(16.0, gt=0, description="the update is scaled by alpha / rank")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | None = Field(
        None, description="module names that get adapters; default: GPT-2 c_attn, RoBERTa query and value")
    merge: bool = Field(False, description="save the model with the adapters merged into its weights, instead of "
                        "the base model plus the peft adapter")


class ModelConfig(Strict):
    arch: Literal["gpt2", "lstm", "roberta"] = "gpt2"
    preset: str | None = Field("gpt2-tiny", description="gpt2-tiny | gpt2-small | gpt2-medium | gpt2-large | lstm-200 | "
                               "roberta-tiny | roberta-base; defaults to the arch's smallest")
    name_or_path: str | None = Field(None, description="HF from_pretrained name or local path (overrides preset)")
    dropout: float = Field(0.0, ge=0, lt=1)
    num_labels: int = Field(2, ge=2, description="classes of a classifier (model.arch roberta); 3 for MNLI")
    adapter: AdapterConfig | None = Field(None, description="train LoRA adapters instead of every weight (gpt2, "
                                          "roberta)")

    @model_validator(mode="before")
    @classmethod
    def _arch_defaults(cls, data: Any) -> Any:
        return _value_defaults(data, "arch", ARCH_DEFAULTS)

    @model_validator(mode="after")
    def _adapter_for_transformers(self) -> "ModelConfig":
        if self.adapter is not None and self.arch == "lstm":
            raise ValueError("model.adapter (LoRA) is for the transformer models (gpt2, roberta), not the LSTM")
        return self

    @property
    def task(self) -> str:
        """`lm` or `classification` (ARCH_TASKS)."""
        return ARCH_TASKS[self.arch]
