"""Token tensors: ids, per-token loss weights and sensitivity, one row per record, and the per-record losses.

The plain tensor type every layer shares (text encodes into it, training, metrics and attacks read it), so none
of them imports another for it.

A record longer than a row is several rows, its windows, which share its `record_index`; a private phase samples
and clips records (all of a record's rows together), so `records` and `record_groups` say which rows go together.

Row r of `input_ids` is `<eos> tokens... <eos> <pad>...` truncated to `max_length`. The rows keep their ids as
encoded, in uint16 where every id fits (any vocabulary up to 65,536: GPT-2's 50,257 does; `text.encode.id_dtype`),
and their weights as bool while every weight is 0 or 1 (as encoded; a mechanism that sets others makes them float):
4 bytes a token with the mask, not 13. A batch (`subset`, `to`) has int64 ids and float weights, what a model's
embedding and the loss read; code that reads whole rows directly widens them itself. `weights[r, t]` is
the loss weight of *predicting* token t (0 for padding, `<mask>` and the leading `<eos>`), so a mechanism changes
what is learned by changing weights only: redaction zeroes `<mask>`, ATDP down-weights non-sensitive tokens.

Rows that carry class `labels` are sequence-classification data: the loss is then the cross-entropy of each row's
class logits against its label (token weights play no part), and the same loop, mechanisms and phases apply.

Pickled (a sweep's prepared data in Ray's object store, a phase sent to Ray Train workers), `LMData` travels as
compact numpy arrays (`pack`): token ids as they are, 0/1 weights and the secret mask as bytes, record indices as
int32: about 4 bytes a token. Ray keeps numpy arrays zero-copy in its object store, so the arrays are stored once per
node and every trial there reads them from shared memory; unpickling gives back the same tensors, dtypes included,
and a tensor whose dtype its array already has (the dataset's compact [N, T] rows) is a view of that memory, not a
copy: what a trial holds of the rows does not grow with them. Those tensors are never written in place: a mechanism
that changes weights makes new ones (`with_weights`), a batch is a copy (`subset`, `to`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch


@dataclass(frozen=True)
class LMData:
    input_ids: torch.Tensor  # [N, T] integer: uint16 where the vocabulary fits (as encoded); a batch's are int64
    weights: torch.Tensor  # [N, T] loss weight of predicting token t: bool while all are 0 or 1; a batch's are float
    sensitive: torch.Tensor  # [N, T] bool: token overlaps a sensitive span (policy or gold, as built)
    record_index: torch.Tensor  # [N] long: which source record each row is
    labels: torch.Tensor | None = None  # [N] long: class of each row (classification data); None for LM data

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def records(self) -> int:
        """How many records these rows hold (a record longer than a row is several rows)."""
        return int(self.record_index.unique().numel())

    @property
    def task(self) -> str:
        """`lm` or `classification`: what a model trained on these rows predicts."""
        return "lm" if self.labels is None else "classification"

    def subset(self, rows: torch.Tensor | list[int]) -> "LMData":
        """These rows; LM rows are cut after the last column any of them predicts (padding the longest row in the
        whole data needs): a causal model's losses on the columns kept are the same, and each step costs less."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        if self.labels is not None:  # a classifier reads the whole row
            return LMData(self.input_ids[rows].long(), self.weights[rows].float(), self.sensitive[rows],
                          self.record_index[rows], self.labels[rows])
        weights = self.weights[rows]
        used = (weights > 0).any(0).nonzero()
        end = int(used[-1]) + 1 if len(used) else weights.shape[1]
        return LMData(self.input_ids[rows, :end].long(), weights[:, :end].float(), self.sensitive[rows, :end],
                      self.record_index[rows])

    def to(self, device: torch.device | str) -> "LMData":
        """The same rows on `device` (the model's: a batch moves, the dataset stays in host memory), as a batch has
        them: int64 ids, float weights."""
        rest = (self.sensitive, self.record_index, self.labels)
        return LMData(self.input_ids.to(device, torch.long), self.weights.to(device, torch.float32),
                      *(t.to(device) if t is not None else None for t in rest))

    def with_weights(self, weights: torch.Tensor) -> "LMData":
        return replace(self, weights=weights)

    @property
    def valid(self) -> torch.Tensor:
        """Positions a loss may use at all (ignores padding, `<mask>` and the leading `<eos>`)."""
        return self.weights > 0

    def __reduce__(self) -> tuple:
        """Pickled as compact arrays (see the module docstring), unpickled as these tensors."""
        tensors = (self.input_ids, self.weights, self.sensitive, self.record_index, self.labels)
        return _unpack, (tuple(pack(t) if t is not None else None for t in tensors),
                         tuple(str(t.dtype).removeprefix("torch.") if t is not None else None for t in tensors))


def pack(t: torch.Tensor) -> np.ndarray:
    """The smallest numpy array that holds `t` exactly: integers in uint16 (ids of a vocabulary up to 65,536) or
    int32 where they fit, 0/1 floats as bool, the rest as they are (bfloat16 as float32)."""
    a = t.detach().cpu()
    a = (a.float() if a.dtype == torch.bfloat16 else a).numpy()
    if a.dtype.kind in "iu" and a.size:
        low, high = int(a.min()), int(a.max())
        for small in (np.uint16, np.int32):
            if np.iinfo(small).min <= low and high <= np.iinfo(small).max:
                return a.astype(small, copy=False)
    if a.dtype.kind == "f" and ((a == 0) | (a == 1)).all():
        return a.astype(np.bool_)
    return a


def _unpack(arrays: tuple[np.ndarray | None, ...], dtypes: tuple[str | None, ...]) -> LMData:
    """`LMData.__reduce__`'s inverse: tensors of the original dtypes, over the arrays' own memory wherever the
    array already has that dtype (the dataset's compact rows: in Ray, the object store's shared memory), else
    converted (a copy: the [N] record indices, a batch's widened ids and weights)."""
    return LMData(*(_tensor(a, getattr(torch, d)) if a is not None and d is not None else None
                    for a, d in zip(arrays, dtypes)))


def _tensor(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """`a` as a tensor of `dtype`: a view of `a`'s memory when it has that dtype, else a converted copy."""
    with warnings.catch_warnings():
        # Ray hands out its arrays read-only, and torch warns that a tensor over them could be written. Safe: no
        # code writes a dataset's tensors in place (tests/test_tensors.py checks a trial leaves them unchanged),
        # and a copy would put every row in each trial's own memory.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        t = torch.from_numpy(a)
    return t if t.dtype == dtype else t.to(dtype)


def record_groups(record_index: torch.Tensor) -> torch.Tensor:
    """Each row's record numbered 0 .. R−1 among the R records of these rows (in `record_index` order): the rows
    with one number are one privacy unit, sampled and clipped together."""
    return torch.unique(record_index, return_inverse=True)[1]


def per_record_loss(logits: torch.Tensor, input_ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_t w_t · CE_t / #{t : w_t > 0} for each record: its gradient is the weighted sum of per-token gradients."""
    b, t, v = logits.shape
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, v), input_ids[:, 1:].reshape(-1), reduction="none"
    ).view(b, t - 1)
    w = weights[:, 1:]
    return (ce * w).sum(1) / (w > 0).sum(1).clamp_min(1)


def per_record_classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each record's class logits [B, C] against its label [B]."""
    return torch.nn.functional.cross_entropy(logits, labels, reduction="none")


def record_losses(output: torch.Tensor, input_ids: torch.Tensor, weights: torch.Tensor,
                  labels: torch.Tensor | None = None) -> torch.Tensor:
    """The task's per-record loss: `per_record_loss` on LM rows, `per_record_classification_loss` on labelled rows."""
    if labels is None:
        return per_record_loss(output, input_ids, weights)
    return per_record_classification_loss(output, labels)


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's parameters are: every batch goes there."""
    return next(model.parameters()).device
