"""Saving and loading a trial's model: weights, architecture and tokenizer, and never any training text."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerFast

from sdp_core.config import ModelConfig
from sdp_core.errors import UserError
from sdp_core.io import atomic_write_bytes, atomic_write_json
from sdp_core.models import build_model
from sdp_core.text.tokenizer import load_saved_tokenizer, save_tokenizer

WEIGHTS, META = "weights.pt", "model.json"


def save_model(directory: str | Path, model: nn.Module, tokenizer: PreTrainedTokenizerFast, cfg: ModelConfig,
               max_length: int) -> Path:
    import io

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    atomic_write_bytes(directory / WEIGHTS, buffer.getvalue())
    save_tokenizer(tokenizer, directory)
    atomic_write_json(directory / META, {"model": cfg.model_dump(mode="json"), "vocab_size": len(tokenizer),
                                         "max_length": max_length})
    return directory


def load_model(directory: str | Path) -> tuple[nn.Module, PreTrainedTokenizerFast, dict]:
    """(model in eval mode, tokenizer, metadata) from a directory written by `save_model`."""
    directory = Path(directory)
    if not (directory / META).is_file() or not (directory / WEIGHTS).is_file():
        raise UserError(f"not a saved trial model (needs {META} and {WEIGHTS})", str(directory))
    meta = json.loads((directory / META).read_text())
    cfg = ModelConfig.model_validate(meta["model"])
    # The weights are the trained ones: never re-download pretrained weights to rebuild the shape.
    cfg = cfg.model_copy(update={"name_or_path": None}) if cfg.name_or_path and cfg.preset else cfg
    model = build_model(cfg, meta["vocab_size"], meta["max_length"])
    model.load_state_dict(torch.load(directory / WEIGHTS, map_location="cpu", weights_only=True))
    model.eval()
    return model, load_saved_tokenizer(directory), meta
