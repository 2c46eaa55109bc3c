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

Rows encoded block by block on a cluster (`sweep.encoding`) stay those blocks, joined without a copy
(`LMData.joined`): each block is an object of the store of its own, written and read one at a time, so that no
process (the preparation, a trial) need ever hold, map or write every row at once.

Nor does a trial compute anything over every row: a mechanism's own weights are a function (`TokenWeighting`,
`with_weighting`) that each batch applies to its rows, and what a plan counts over every row (the records, the
tokens a loss reads, S-DPSGD's segments) is a `statistic` of the rows, computed once, block by block (`blocks`),
and pickled with them: a sweep plans every mechanism on its data before it goes to the object store, so its trials
read those counts instead of the rows.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, Protocol, Sequence, TypeVar

import numpy as np
import torch

from sdp_core.scoped import set_within


class TokenWeighting(Protocol):
    """A mechanism's loss weights of some rows, from their ids, their secret mask and the positions a loss reads
    (`valid`): positive exactly where `valid` is, so that applying it to its own output gives it back. Rows that
    carry one (`LMData.weighting`) compute it for the rows a batch takes (`LMData.subset`), never for all of them."""

    def __call__(self, input_ids: torch.Tensor, sensitive: torch.Tensor, valid: torch.Tensor) -> torch.Tensor: ...


Stored = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]
"""What a block of rows keeps (`LMData.stored`): ids, the weights as stored, the secret mask, record indices and
labels."""

BLOCK_ROWS = 65_536
"""Rows a whole-row statistic reads at a time (`LMData.blocks`): its temporaries a few MB whatever the data's size."""

T = TypeVar("T")

_AFTER_BLOCK: ContextVar[Callable[[], object] | None] = ContextVar("after_block", default=None)


def after_each_block(call: Callable[[], object]) -> AbstractContextManager[None]:
    """Inside this block, `call()` runs once each block of joined rows is read, by `LMData.blocks` or a batch's
    gather (`subset`): a sweep's preparation gives back the object store's pages that reading a block mapped into
    it (`train.shared_pages`), so that it holds one block's pages, not every row's."""
    return set_within(_AFTER_BLOCK, call)


def _block_read() -> None:
    call = _AFTER_BLOCK.get()
    if call is not None:
        call()


class LMData:
    """Rows of token ids, their loss weights and secret mask, and the record each is (module docstring).

    Either one block of rows, its tensors its own, or rows joined from blocks (`joined`: the encoding of a sweep's
    data, block by block on the cluster), which are never copied into one: each block stays where it is (in Ray,
    an object of the store of its own), and what reads every row reads them a block at a time (`blocks`, `subset`,
    `statistic`). A joined data's `input_ids`, `weights`, `sensitive`, `labels` concatenate its blocks, a copy:
    what only batches and small data read.

    - `input_ids` [N, T] integer: uint16 where the vocabulary fits (as encoded); a batch's are int64
    - `weights` [N, T] loss weight of predicting token t: bool while all are 0 or 1; a batch's are float; with a
      `weighting`, that weighting of the weights stored
    - `sensitive` [N, T] bool: token overlaps a sensitive span (policy or gold, as built)
    - `record_index` [N] integer: which source record each row is (int32 as encoded: 4 bytes a row)
    - `labels` [N] long: class of each row (classification data); None for LM data
    - `weighting`: a mechanism's weights, computed for a batch's rows (`TokenWeighting`)
    """

    def __init__(self, input_ids: torch.Tensor, weights: torch.Tensor, sensitive: torch.Tensor,
                 record_index: torch.Tensor, labels: torch.Tensor | None = None,
                 weighting: TokenWeighting | None = None):
        self._set((input_ids, weights, sensitive, record_index, labels), (), weighting, {})

    def _set(self, stored: Stored | None, parts: tuple[LMData, ...], weighting: TokenWeighting | None,
             statistics: dict[str, Any]) -> None:
        self._stored = stored  # a block's tensors; None: joined rows
        self._parts = parts  # the blocks of joined rows
        self.weighting = weighting
        self._statistics = statistics
        self._ends = torch.tensor([len(part.stored()[3]) for part in self.parts]).cumsum(0)  # each block's end row

    @classmethod
    def joined(cls, blocks: Sequence[LMData]) -> LMData:
        """The rows of `blocks` one after the other, each block kept as it is (no copy). One block is itself."""
        assert blocks and all(b._stored is not None and b.weighting is None for b in blocks), "blocks, unweighted"
        if len(blocks) == 1:
            return blocks[0]
        rows = cls.__new__(cls)
        rows._set(None, tuple(blocks), None, {})
        return rows

    @property
    def parts(self) -> tuple[LMData, ...]:
        """The blocks these rows are joined from (`joined`); a block's is itself."""
        return self._parts or (self,)

    def _whole(self, field: int) -> Any:
        """Field `field` of `stored`, every block's concatenated when the rows are joined (a copy)."""
        if self._stored is not None:
            return self._stored[field]
        tensors = [part.stored()[field] for part in self._parts]
        return None if tensors[0] is None else torch.cat(tensors)

    @property
    def input_ids(self) -> torch.Tensor:
        return self._whole(0)

    @property
    def weights(self) -> torch.Tensor:
        """The weights as stored, or, for rows with a `weighting`, that weighting of them, computed on each read (a
        batch computes it for its own rows only, `subset`)."""
        stored = self._whole(1)
        return stored if self.weighting is None else self.weighting(self.input_ids, self.sensitive, stored > 0)

    @property
    def sensitive(self) -> torch.Tensor:
        return self._whole(2)

    @property
    def record_index(self) -> torch.Tensor:
        return self._whole(3)

    @property
    def labels(self) -> torch.Tensor | None:
        return self._whole(4)

    def __len__(self) -> int:
        return int(self._ends[-1])

    @property
    def records(self) -> int:
        """How many records these rows hold (a record longer than a row is several rows)."""
        groups = self.groups
        return int(groups.max()) + 1 if len(groups) else 0

    @property
    def groups(self) -> torch.Tensor:
        """[N] int32: each row's record numbered 0 .. R−1 (`record_groups`), what a private phase samples; a
        statistic of the rows (`record_numbers`), so a sweep's trials read it from the object store, not a copy."""
        return array_tensor(self.statistic(record_numbers), torch.int32)

    @property
    def task(self) -> str:
        """`lm` or `classification`: what a model trained on these rows predicts."""
        return "lm" if self.parts[0].stored()[4] is None else "classification"

    def statistic(self, compute: Callable[..., T], *args: Hashable) -> T:
        """`compute(self, *args)`, a statistic of every row (a count, a plan's layout, the rows of a seeded subset),
        computed once per `args` and kept with the rows: pickled with them, so a sweep's trials read what its
        preparation computed when it planned every mechanism (`sweep.prepare.prepare_shared`) instead of reading
        every row again. `compute` is a module-level function of the rows' ids, secret mask, record indices and the
        positions a loss reads (`valid`), never of the weights' values (a weighting keeps the statistics,
        `with_weighting`); the rows are never changed in place (module docstring)."""
        return memoised(self._statistics, compute, self, *args)

    def blocks(self) -> Iterator[LMData]:
        """These rows `BLOCK_ROWS` at a time, each block a view of them (no copy), a joined data's block by block
        (`after_each_block` after each): what reads every row reads them so."""
        for part in self.parts:
            ids, weights, sensitive, record_index, labels = part.stored()
            for start in range(0, len(record_index), BLOCK_ROWS):
                end = start + BLOCK_ROWS
                yield LMData(ids[start:end], weights[start:end], sensitive[start:end], record_index[start:end],
                             None if labels is None else labels[start:end], self.weighting)
            if self._parts:
                _block_read()

    def subset(self, rows: torch.Tensor | list[int] | range, piece_rows: int | None = None,
               after_piece: Callable[[], object] | None = None) -> LMData:
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
        parts: list[Stored] = []
        for piece in rows.split(piece_rows) if piece_rows else (rows,):
            parts.append(self._gathered(piece))
            if after_piece is not None:
                after_piece()
        if len(parts) == 1:
            return parts[0]
        ids_, weights_, sensitive_, index_, labels_ = zip(*parts)
        return (torch.cat(ids_), torch.cat(weights_), torch.cat(sensitive_), torch.cat(index_),
                None if labels_[0] is None else torch.cat(labels_))

    def _gathered(self, rows: torch.Tensor) -> Stored:
        """The stored tensors' `rows`, in their order, gathered block by block from joined rows (each block's rows
        taken by indexing, then put back in order: uint16 ids have no `index_put`)."""
        if self._stored is not None or not len(rows):
            return tuple(None if t is None else t[rows] for t in self.parts[0].stored())  # type: ignore[return-value]
        ends = self._ends
        starts = torch.cat([torch.zeros(1, dtype=ends.dtype), ends[:-1]])
        block = torch.searchsorted(ends, rows, right=True)
        positions: list[torch.Tensor] = []
        taken: list[tuple[torch.Tensor | None, ...]] = []
        for b in block.unique().tolist():
            here = (block == b).nonzero().flatten()
            local = rows[here] - starts[b]
            positions.append(here)
            taken.append(tuple(None if t is None else t[local] for t in self._parts[b].stored()))
            _block_read()
        order = torch.argsort(torch.cat(positions))
        return tuple(None if ts[0] is None else torch.cat(ts)[order] for ts in zip(*taken))  # type: ignore

    def to(self, device: torch.device | str) -> LMData:
        """The same rows on `device` (the model's: a batch moves, the dataset stays in host memory), as a batch has
        them: int64 ids, float weights."""
        rest = (self.sensitive, self.record_index, self.labels)
        return LMData(self.input_ids.to(device, torch.long), self.weights.to(device, torch.float32),
                      *(t.to(device) if t is not None else None for t in rest))

    def with_weights(self, weights: torch.Tensor) -> LMData:
        """These rows with `weights` stored instead, as one block (joined rows' blocks concatenated: small data)."""
        ids, _, sensitive, record_index, labels = self.stored()
        return LMData(ids, weights, sensitive, record_index, labels)

    def with_weighting(self, weighting: TokenWeighting) -> LMData:
        """These rows with a mechanism's weights, computed for each batch's rows (`TokenWeighting`)."""
        assert self.weighting is None, "one weighting at a time"
        weighted = LMData.__new__(LMData)
        weighted._set(self._stored, self._parts, weighting, self._statistics)  # the same positions read
        return weighted

    @property
    def valid(self) -> torch.Tensor:
        """Positions a loss may use at all (ignores padding, `<mask>` and the leading `<eos>`; a weighting keeps
        them). Weights stored as bool are their own mask (and `> 0` would widen every element first)."""
        weights = self._whole(1)
        return weights if weights.dtype == torch.bool else weights > 0

    def stored(self) -> Stored:
        """The tensors these rows keep: ids, the weights as stored (not a weighting's), the secret mask, record
        indices and labels (None for LM rows): what is pickled, and, in a sweep's trial, the object store's memory.
        Joined rows' are their blocks' concatenated (a copy)."""
        return self._stored if self._stored is not None else tuple(self._whole(f) for f in range(5))

    def __reduce__(self) -> tuple:
        """Pickled as compact arrays (see the module docstring), unpickled as these tensors, with the weighting and
        the statistics computed so far (`statistic`); joined rows as their blocks, each pickled on its own (a sweep
        puts each into the object store as an object of its own, `sweep.prepare`)."""
        if self._parts:
            return _rejoined, (self._parts, self.weighting, self._statistics)
        tensors = self.stored()
        return _unpack, (tuple(pack(t) if t is not None else None for t in tensors),
                         tuple(str(t.dtype).removeprefix("torch.") if t is not None else None for t in tensors),
                         self.weighting, self._statistics)


def memoised(kept: dict[str, Any], compute: Callable[..., T], target: object, *args: object) -> T:
    """`compute(target, *args)`, kept in `kept` under the function's qualified name and the arguments' repr (what
    `LMData.statistic` and `TrialData.derived` keep, and pickle, with what they are computed from)."""
    name = f"{compute.__module__}.{compute.__qualname__}"
    key = f"{name}{args!r}" if args else name
    if key not in kept:
        kept[key] = compute(target, *args)
    return kept[key]


def record_numbers(rows: LMData) -> np.ndarray:
    """`record_groups` of the rows' record indices as an int32 array (`LMData.groups`): 4 bytes a row, kept zero-copy
    in the object store as every array of the rows is (a block's with it; joined rows', an object of its own,
    `sweep.prepare`)."""
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
    ids, weights, sensitive, index, labels = (array_tensor(a, getattr(torch, d)) if a is not None and d is not None
                                              else None for a, d in zip(arrays, dtypes))
    assert ids is not None and weights is not None and sensitive is not None and index is not None
    rows = LMData(ids, weights, sensitive, index, labels, weighting)
    if statistics:
        rows._statistics = dict(statistics)
    return rows


def _rejoined(blocks: tuple[LMData, ...], weighting: TokenWeighting | None, statistics: dict) -> LMData:
    """`LMData.__reduce__`'s inverse for joined rows: the blocks joined again, the weighting and statistics kept."""
    rows = LMData.joined(blocks)
    if weighting is not None:
        rows = rows.with_weighting(weighting)
    rows._statistics = dict(statistics)
    return rows


def array_tensor(a: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`a` as a tensor of `dtype` (by default its own): a view of `a`'s memory when it has that dtype, else a
    converted copy."""
    with warnings.catch_warnings():
        # Ray hands out its arrays read-only, and torch warns that a tensor over them could be written. Safe: no
        # code writes a dataset's tensors in place (tests/test_tensors.py checks a trial leaves them unchanged),
        # and a copy would put every row in each trial's own memory.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        t = torch.from_numpy(a)
    return t if dtype is None or t.dtype == dtype else t.to(dtype)


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
