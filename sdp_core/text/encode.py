"""Records -> `LMData`: tokenize, add `<eos>` framing, pad, and align character spans to token masks."""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import PreTrainedTokenizerFast

from sdp_core.data.records import Span
from sdp_core.text.alignment import token_mask
from sdp_core.tensors import LMData


def encode(texts: Sequence[str], spans: Sequence[Sequence[Span]], tokenizer: PreTrainedTokenizerFast,
           max_length: int, labels: Sequence[int] | None = None) -> LMData:
    """Row r = `<eos> tokens(texts[r]) <eos> <pad>...`; `sensitive` marks tokens overlapping `spans[r]`.

    Weights are 1 on every real token after the leading `<eos>` and 0 on padding and `<mask>`. With `labels`
    (one class id per text) the rows are classification data; a classifier reads the leading `<eos>`.
    """
    eos, pad, mask = tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.mask_token_id
    enc = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True, truncation=True,
                    max_length=max_length - 2)
    n = len(texts)
    input_ids = torch.full((n, max_length), pad, dtype=torch.long)
    sensitive = torch.zeros((n, max_length), dtype=torch.bool)
    for r, (ids, offsets) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        k = len(ids)
        input_ids[r, 0] = eos
        input_ids[r, 1 : k + 1] = torch.tensor(ids, dtype=torch.long)
        input_ids[r, k + 1] = eos
        if spans[r]:
            sensitive[r, 1 : k + 1] = torch.from_numpy(token_mask(offsets, spans[r], texts[r]))
    weights = ((input_ids != pad) & (input_ids != mask)).float()
    weights[:, 0] = 0.0
    y = None if labels is None else torch.tensor(list(labels), dtype=torch.long)
    return LMData(input_ids, weights, sensitive, torch.arange(n), y)
