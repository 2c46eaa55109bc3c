"""LSTM language model on `opacus.layers.DPLSTM` (Shi et al. 2022: one layer, embedding 200, hidden 200).

`nn.LSTM` has no per-sample gradient support in Opacus; DPLSTM is the drop-in replacement.
"""

from __future__ import annotations

import torch
from opacus.layers import DPLSTM
from torch import nn

LSTM_PRESETS = {"lstm-200": dict(embedding_dim=200, hidden_dim=200, num_layers=1)}

State = tuple[torch.Tensor, torch.Tensor]


class LSTMLM(nn.Module):
    """Maps input ids [B, T] (and an optional carried (h, c) state) to logits [B, T, V].

    `forward_with_state` returns the final state too: Selective-DPSGD clips and noises it between segments.
    """

    def __init__(self, vocab_size: int, embedding_dim: int = 200, hidden_dim: int = 200, num_layers: int = 1,
                 dropout: float = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = DPLSTM(embedding_dim, hidden_dim, num_layers=num_layers, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_dim, vocab_size)

    def forward_with_state(self, input_ids: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        out, state = self.lstm(self.dropout(self.embedding(input_ids)), state)
        return self.head(self.dropout(out)), state

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.forward_with_state(input_ids)[0]
