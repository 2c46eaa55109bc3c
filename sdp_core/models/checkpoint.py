"""Saving and loading a trial's model in Hugging Face's layout: weights, architecture and tokenizer, never any
training text.

A GPT-2 is saved with `save_pretrained` (safetensors + config.json) beside its tokenizer, so
`AutoModelForCausalLM.from_pretrained(dir)` and `AutoTokenizer.from_pretrained(dir)` load it; a RoBERTa classifier
likewise for `AutoModelForSequenceClassification`. The LSTM writes the same two kinds of file under its own names
(`LSTMLM.from_pretrained(dir)`). A LoRA model is saved merged (`model.adapter.merge`), or as its frozen base in
`dir` plus the peft adapter in `dir/adapter` (`PeftModel.from_pretrained(base, dir / "adapter")`). `model.json`
records the project's model settings and data shape, so `load_model` rebuilds the project's wrapper around it.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast, RobertaForSequenceClassification

from sdp_core.config import ModelConfig
from sdp_core.errors import UserError
from sdp_core.io import atomic_write_json
from sdp_core.models.gpt2 import GPT2LM
from sdp_core.models.lstm import LSTMLM
from sdp_core.models.quiet import no_progress_bars
from sdp_core.models.roberta import RobertaClassifier
from sdp_core.text.tokenizer import load_saved_tokenizer, save_tokenizer

META, ADAPTER = "model.json", "adapter"
HF_CLASSES = {"gpt2": GPT2LMHeadModel, "roberta": RobertaForSequenceClassification}


def save_model(directory: str | Path, model: nn.Module, tokenizer: PreTrainedTokenizerFast, cfg: ModelConfig,
               max_length: int) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with no_progress_bars():
        _save_weights(directory, model, cfg)
    save_tokenizer(tokenizer, directory)
    atomic_write_json(directory / META, {"model": cfg.model_dump(mode="json"), "vocab_size": len(tokenizer),
                                         "max_length": max_length})
    return directory


def _save_weights(directory: Path, model: nn.Module, cfg: ModelConfig) -> None:
    if isinstance(model, LSTMLM):
        model.save_pretrained(directory)
    elif cfg.adapter is None:
        model.model.save_pretrained(directory)
    else:
        from sdp_core.models.adapters import without_adapters

        without_adapters(model.model, merge=cfg.adapter.merge).save_pretrained(directory)
        if not cfg.adapter.merge:
            model.model.save_pretrained(directory / ADAPTER)


def load_model(directory: str | Path) -> tuple[nn.Module, PreTrainedTokenizerFast, dict]:
    """(model in eval mode, tokenizer, metadata) from a directory written by `save_model`; a LoRA adapter saved
    apart is merged into its base."""
    directory = Path(directory)
    if not (directory / META).is_file():
        raise UserError(f"not a saved trial model (needs {META})", str(directory))
    meta = json.loads((directory / META).read_text())
    cfg = ModelConfig.model_validate(meta["model"])
    try:
        if cfg.arch == "lstm":
            model = LSTMLM.from_pretrained(directory)
        else:
            with no_progress_bars():
                inner = HF_CLASSES[cfg.arch].from_pretrained(directory)
            if cfg.adapter is not None and not cfg.adapter.merge:
                from peft import PeftModel  # only a LoRA model saved apart from its base reads it: 0.5 s to import

                inner = PeftModel.from_pretrained(inner, directory / ADAPTER).merge_and_unload()
            model = (GPT2LM(inner) if cfg.arch == "gpt2" else RobertaClassifier(inner, inner.config.pad_token_id))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load the saved model: {str(e).splitlines()[0]}", str(directory)) from None
    model.eval()
    return model, load_saved_tokenizer(directory), meta
