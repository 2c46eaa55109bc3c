"""LSTM language model on `opacus.layers.DPLSTM` (Shi et al. 2022: one layer, embedding 200, hidden 200).

`nn.LSTM` has no per-sample gradient support in Opacus; DPLSTM is the drop-in replacement.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from opacus.layers import DPLSTM
from safetensors.torch import load_model, save_model
from torch import nn

from sdp_core.errors import UserError
from sdp_core.io import atomic_write_json

LSTM_PRESETS = {"lstm-200": dict(embedding_dim=200, hidden_dim=200, num_layers=1)}
LSTM_CONFIG, LSTM_WEIGHTS = "lstm_config.json", "model.safetensors"

State = tuple[torch.Tensor, torch.Tensor]


class LSTMLM(nn.Module):
    """Maps input ids [B, T] (and an optional carried (h, c) state) to logits [B, T, V].

    `forward_with_state` returns the final state too: Selective-DPSGD clips and noises it between segments.
    """

    def __init__(self, vocab_size: int, embedding_dim: int = 200, hidden_dim: int = 200, num_layers: int = 1,
                 dropout: float = 0.0):
        super().__init__()
        self.shape = dict(vocab_size=vocab_size, embedding_dim=embedding_dim, hidden_dim=hidden_dim,
                          num_layers=num_layers, dropout=dropout)
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = DPLSTM(embedding_dim, hidden_dim, num_layers=num_layers, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_dim, vocab_size)

    def forward_with_state(self, input_ids: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        out, state = self.lstm(self.dropout(self.embedding(input_ids)), state)
        return self.head(self.dropout(out)), state

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.forward_with_state(input_ids)[0]

    def save_pretrained(self, directory: str | Path) -> None:
        """`lstm_config.json` (the constructor's arguments) and `model.safetensors` (the weights), as transformers
        lays out a model; `LSTMLM.from_pretrained(directory)` loads them."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_model(self, str(directory / LSTM_WEIGHTS))  # DPLSTM's aliased parameters stored once
        atomic_write_json(directory / LSTM_CONFIG, {"model_type": "sdp-lstm", **self.shape})

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> "LSTMLM":
        directory = Path(directory)
        if not (directory / LSTM_CONFIG).is_file() or not (directory / LSTM_WEIGHTS).is_file():
            raise UserError(f"not a saved LSTM model (needs {LSTM_CONFIG} and {LSTM_WEIGHTS})", str(directory))
        shape = json.loads((directory / LSTM_CONFIG).read_text())
        shape.pop("model_type")
        model = cls(**shape)
        load_model(model, str(directory / LSTM_WEIGHTS))
        return model
