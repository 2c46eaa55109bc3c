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

Nor does a trial compute anything over every row: a mechanism's own weights are a function (`TokenWeighting`,
`with_weighting`) that each batch applies to its rows, and what a plan counts over every row (the records, the
tokens a loss reads, S-DPSGD's segments) is a `statistic` of the rows, computed once, block by block (`blocks`),
and pickled with them: a sweep plans every mechanism on its data before it goes to the object store, so its trials
read those counts instead of the rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable, Iterator, Protocol, TypeVar

import numpy as np
import torch


class TokenWeighting(Protocol):
    """A mechanism's loss weights of some rows, from their ids, their secret mask and the positions a loss reads
    (`valid`): positive exactly where `valid` is, so that applying it to its own output gives it back. Rows that
    carry one (`LMData.weighting`) compute it for the rows a batch takes (`LMData.subset`), never for all of them."""

    def __call__(self, input_ids: torch.Tensor, sensitive: torch.Tensor, valid: torch.Tensor) -> torch.Tensor: ...


class _Weights:
    """`LMData.weights`: the weights as stored, or, for rows with a `weighting`, that weighting of them, computed
    on each read (a batch computes it for its own rows only, `LMData.subset`)."""

    def __get__(self, rows: LMData | None, owner: type | None = None) -> torch.Tensor:
        if rows is None:
            raise AttributeError("weights")  # read on the class: the field has no default
        stored = rows.__dict__["_weights"]
        return stored if rows.weighting is None else rows.weighting(rows.input_ids, rows.sensitive, stored > 0)

    def __set__(self, rows: LMData, weights: torch.Tensor) -> None:
        rows.__dict__["_weights"] = weights


Stored = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]
"""What rows keep (`LMData.stored`): ids, the weights as stored, the secret mask, record indices and labels."""

BLOCK_ROWS = 65_536
"""Rows a whole-row statistic reads at a time (`LMData.blocks`): its temporaries a few MB whatever the data's size."""

T = TypeVar("T")


@dataclass(frozen=True)
class LMData:
    input_ids: torch.Tensor  # [N, T] integer: uint16 where the vocabulary fits (as encoded); a batch's are int64
    weights: torch.Tensor  # [N, T] loss weight of predicting token t: bool while all are 0 or 1; a batch's are
    # float; with a `weighting`, that weighting of the weights stored (`_Weights`, set on the class below)
    sensitive: torch.Tensor  # [N, T] bool: token overlaps a sensitive span (policy or gold, as built)
    record_index: torch.Tensor  # [N] integer: which source record each row is (int32 as encoded: 4 bytes a row)
    labels: torch.Tensor | None = None  # [N] long: class of each row (classification data); None for LM data
    weighting: TokenWeighting | None = None  # a mechanism's weights, computed for a batch's rows (`TokenWeighting`)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def records(self) -> int:
        """How many records these rows hold (a record longer than a row is several rows)."""
        groups = self.groups
        return int(groups.max()) + 1 if len(groups) else 0

    @property
    def groups(self) -> torch.Tensor:
        """[N] int32: each row's record numbered 0 .. R−1 (`record_groups`), what a private phase samples; a
        statistic of the rows (`record_numbers`), so a sweep's trials read it from the object store, not a copy."""
        return _tensor(self.statistic(record_numbers), torch.int32)

    @property
    def task(self) -> str:
        """`lm` or `classification`: what a model trained on these rows predicts."""
        return "lm" if self.labels is None else "classification"

    def statistic(self, compute: Callable[..., T], *args: Hashable) -> T:
        """`compute(self, *args)`, a statistic of every row (a count, a plan's layout, the rows of a seeded subset),
        computed once per `args` and kept with the rows: pickled with them, so a sweep's trials read what its
        preparation computed when it planned every mechanism (`sweep.prepare.prepare_shared`) instead of reading
        every row again. `compute` is a module-level function of the rows' ids, secret mask, record indices and the
        positions a loss reads (`valid`), never of the weights' values (a weighting keeps the statistics,
        `with_weighting`); the rows are never changed in place (module docstring)."""
        return memoised(self.__dict__.setdefault("_statistics", {}), compute, self, *args)

    def blocks(self) -> Iterator[LMData]:
        """These rows `BLOCK_ROWS` at a time, each block a view of them (no copy): what reads every row reads them
        so."""
        rows = BLOCK_ROWS
        for start in range(0, len(self), rows):
            end = start + rows
            yield LMData(self.input_ids[start:end], self.__dict__["_weights"][start:end], self.sensitive[start:end],
                         self.record_index[start:end], None if self.labels is None else self.labels[start:end],
                         self.weighting)

    def subset(self, rows: torch.Tensor | list[int] | range, piece_rows: int | None = None,
               after_piece: Callable[[], object] | None = None) -> "LMData":
        """These rows; LM rows are cut after the last column any of them predicts (padding the longest row in the
        whole data needs): a causal model's losses on the columns kept are the same, and each step costs less.
        With `piece_rows`, the rows are copied out that many at a time and `after_piece()` is called after each (a
        trial unmaps the object store's pages each piece mapped, `train.shared_pages`): the same batch."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        ids, stored, sensitive, record_index, labels = self._copied(rows, piece_rows, after_piece)
        weights = stored if self.weighting is None else self.weighting(ids, sensitive, stored > 0)
        if labels is not None:  # a classifier reads the whole row
            return LMData(ids.long(), weights.float(), sensitive, record_index, labels)
        used = (weights > 0).any(0).nonzero()
        end = int(used[-1]) + 1 if len(used) else weights.shape[1]
        return LMData(ids[:, :end].long(), weights[:, :end].float(), sensitive[:, :end].contiguous(), record_index)

    def _copied(self, rows: torch.Tensor, piece_rows: int | None, after_piece: Callable[[], object] | None
                ) -> Stored:
        """The stored tensors' `rows` (`stored`), copied `piece_rows` at a time (all at once: None), `after_piece()`
        after each piece."""
        ids, weights, sensitive, record_index, labels = self.stored()
        parts: list[Stored] = []
        for piece in rows.split(piece_rows) if piece_rows else (rows,):
            parts.append((ids[piece], weights[piece], sensitive[piece], record_index[piece],
                          None if labels is None else labels[piece]))
            if after_piece is not None:
                after_piece()
        if len(parts) == 1:
            return parts[0]
        ids_, weights_, sensitive_, index_, labels_ = zip(*parts)
        return (torch.cat(ids_), torch.cat(weights_), torch.cat(sensitive_), torch.cat(index_),
                None if labels_[0] is None else torch.cat(labels_))

    def to(self, device: torch.device | str) -> "LMData":
        """The same rows on `device` (the model's: a batch moves, the dataset stays in host memory), as a batch has
        them: int64 ids, float weights."""
        rest = (self.sensitive, self.record_index, self.labels)
        return LMData(self.input_ids.to(device, torch.long), self.weights.to(device, torch.float32),
                      *(t.to(device) if t is not None else None for t in rest))

    def with_weights(self, weights: torch.Tensor) -> "LMData":
        return replace(self, weights=weights, weighting=None)

    def with_weighting(self, weighting: TokenWeighting) -> "LMData":
        """These rows with a mechanism's weights, computed for each batch's rows (`TokenWeighting`)."""
        assert self.weighting is None, "one weighting at a time"
        weighted = replace(self, weighting=weighting)
        weighted.__dict__["_statistics"] = self.__dict__.setdefault("_statistics", {})  # the same positions read
        return weighted

    @property
    def valid(self) -> torch.Tensor:
        """Positions a loss may use at all (ignores padding, `<mask>` and the leading `<eos>`; a weighting keeps
        them). Weights stored as bool are their own mask (and `> 0` would widen every element first)."""
        weights = self.__dict__["_weights"]
        return weights if weights.dtype == torch.bool else weights > 0

    def stored(self) -> Stored:
        """The tensors these rows keep: ids, the weights as stored (not a weighting's), the secret mask, record
        indices and labels (None for LM rows): what is pickled, and, in a sweep's trial, the object store's memory."""
        return self.input_ids, self.__dict__["_weights"], self.sensitive, self.record_index, self.labels

    def __reduce__(self) -> tuple:
        """Pickled as compact arrays (see the module docstring), unpickled as these tensors, with the weighting and
        the statistics computed so far (`statistic`)."""
        tensors = self.stored()
        return _unpack, (tuple(pack(t) if t is not None else None for t in tensors),
                         tuple(str(t.dtype).removeprefix("torch.") if t is not None else None for t in tensors),
                         self.weighting, self.__dict__.get("_statistics", {}))


def memoised(kept: dict[str, Any], compute: Callable[..., T], target: object, *args: object) -> T:
    """`compute(target, *args)`, kept in `kept` under the function's qualified name and the arguments' repr (what
    `LMData.statistic` and `TrialData.derived` keep, and pickle, with what they are computed from)."""
    name = f"{compute.__module__}.{compute.__qualname__}"
    key = f"{name}{args!r}" if args else name
    if key not in kept:
        kept[key] = compute(target, *args)
    return kept[key]


# The field's reads and writes go through `_Weights` (a data descriptor set once the dataclass is made, so that its
# __init__, `replace` and every reader see an ordinary field).
LMData.weights = _Weights()


def record_numbers(rows: LMData) -> np.ndarray:
    """`record_groups` of the rows' record indices as an int32 array (`LMData.groups`): 4 bytes a row, kept zero-copy
    in the object store as every array of the rows is."""
    assert len(rows) < 2**31, "row numbers fit int32"
    return record_groups(rows.record_index).numpy().astype(np.int32)


@dataclass(frozen=True)
class RowCounts:
    """What every row of some rows adds up to (`row_counts`)."""

    valid: int  # positions a loss reads (`LMData.valid`)
    flagged: int  # of them, flagged (`LMData.sensitive`)
    flagged_runs: int  # maximal runs of flagged positions within a row


def run_starts(marked: torch.Tensor) -> torch.Tensor:
    """[N, T] bool: where each maximal run of marked positions of a row begins."""
    starts = marked.clone()
    starts[:, 1:] &= ~marked[:, :-1]
    return starts


def row_counts(rows: LMData) -> RowCounts:
    """The positions a loss reads, how many of them are flagged and in how many runs, block by block."""
    valid = flagged = runs = 0
    count = torch.count_nonzero  # not `sum`: a bool tensor's sum makes a wider copy of it first
    for block in rows.blocks():
        read = block.valid
        marked = block.sensitive & read
        valid, flagged, runs = valid + int(count(read)), flagged + int(count(marked)), runs + int(count(run_starts(marked)))
    return RowCounts(valid, flagged, runs)


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


def _unpack(arrays: tuple[np.ndarray | None, ...], dtypes: tuple[str | None, ...],
            weighting: TokenWeighting | None = None, statistics: dict | None = None) -> LMData:
    """`LMData.__reduce__`'s inverse: tensors of the original dtypes, over the arrays' own memory wherever the
    array already has that dtype (the dataset's compact rows: in Ray, the object store's shared memory), else
    converted (a copy: a batch's widened ids and weights)."""
    ids, weights, sensitive, index, labels = (_tensor(a, getattr(torch, d)) if a is not None and d is not None
                                              else None for a, d in zip(arrays, dtypes))
    assert ids is not None and weights is not None and sensitive is not None and index is not None
    rows = LMData(ids, weights, sensitive, index, labels, weighting)
    if statistics:
        rows.__dict__["_statistics"] = dict(statistics)
    return rows


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
