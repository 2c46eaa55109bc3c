"""A sweep's rows encoded on the cluster: blocks of records tokenized by Ray tasks on every CPU, the rows joined in
record order.

    the preparation's records (`preparation.prepare_trial_data`, a mechanism's plan: every `encode_windows` inside
    `ray_encoding`)
      -> blocks of `BLOCK_RECORDS` records, their texts and spans (as arrays, `data.records.span_columns`)
      -> tasks of one CPU each, at most twice the cluster's CPUs in flight (a worker imports torch and the tokenizer
         once and encodes block after block); their rows stay in the object store until joined
      -> one copy of every block's rows, in order, into the split's arrays: the joining process maps one block at a
         time (`train.shared_pages`), so it holds the rows once, not twice.

Encoding a record depends on its text, its spans and the layout alone (`text.encode.RowLayout`), and a block's
records are numbered from its first, so the rows are those of one process, row for row (`tests/test_pipeline.py`):
where encoding runs changes its time, never its output. Records at most one block are encoded in the process that
asks (a worker's start costs seconds: a process importing torch and the tokenizer).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from sdp_core.data.records import Span, SpanColumns, span_columns
from sdp_core.errors import UserError
from sdp_core.progress import count_progress
from sdp_core.text.encode import EncodedRows, RowLayout, encode_rows, encoding_runner
from sdp_core.train.shared_pages import in_shared_memory, unmap_pages

if TYPE_CHECKING:
    from ray import ObjectRef

BLOCK_RECORDS = 10_000
"""Records a task encodes: about 20 s of one core for clinic notes (2 ms a note over the tokenizer and the windows),
so that a task's overhead is a small share, and a block's texts and rows (about 10 MB) stay small."""


def _encode_block(texts: list[str], spans: SpanColumns, layout: RowLayout, first: int) -> EncodedRows:
    """One block's rows, in a task (`encode_on_ray`): records numbered from `first`."""
    return encode_rows(texts, [s or () for s in spans.lists()], layout, first)


def encode_on_ray(texts: Sequence[str], spans: Sequence[Sequence[Span]], layout: RowLayout) -> EncodedRows:
    """`encode_rows` of `texts` by blocks of `BLOCK_RECORDS` in Ray tasks (the runner of `ray_encoding`), with a
    progress bar of the records encoded."""
    import ray

    if len(texts) <= BLOCK_RECORDS:
        return encode_rows(texts, spans, layout)
    task = ray.remote(num_cpus=1)(_encode_block)
    in_flight = 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))  # texts sent ahead: bounded, not all at once
    layout_ref = ray.put(layout)
    blocks: list[ObjectRef] = []  # in record order
    running: dict[ObjectRef, int] = {}  # each block not done yet, and its records
    with count_progress("encode rows", len(texts)) as advance:

        def wait_for(most_running: int) -> None:
            while len(running) > most_running:
                (ready,), _ = ray.wait(list(running), num_returns=1)
                advance(running.pop(ready))

        for first in range(0, len(texts), BLOCK_RECORDS):
            end = min(first + BLOCK_RECORDS, len(texts))
            wait_for(in_flight - 1)
            blocks.append(task.remote([texts[r] for r in range(first, end)], span_columns(spans[first:end]),
                                      layout_ref, first))
            running[blocks[-1]] = end - first
        wait_for(0)
    return _joined(blocks, layout)


def _joined(refs: list[ObjectRef], layout: RowLayout) -> EncodedRows:
    """The blocks' rows, in the order of `refs`, in arrays of this process: each block read from the object store,
    copied and unmapped before the next (`ray.get` maps an array's pages only as they are read)."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        blocks: list[EncodedRows] = ray.get(refs)
    except RayTaskError as e:  # a record refused (`data.on_long_records: refuse`): its line, not a traceback
        if isinstance(e.cause, UserError):
            raise e.cause from None
        raise
    rows = sum(len(b.record_index) for b in blocks)
    ids = np.empty((rows, layout.max_length), blocks[0].input_ids.dtype)
    sensitive = np.empty((rows, layout.max_length), np.bool_)
    record_index = np.empty(rows, np.int32)
    at = 0
    for block in blocks:
        n = len(block.record_index)
        ids[at : at + n], sensitive[at : at + n], record_index[at : at + n] = (block.input_ids, block.sensitive,
                                                                              block.record_index)
        unmap_pages(in_shared_memory([block.input_ids, block.sensitive, block.record_index]))
        at += n
    return EncodedRows(ids, sensitive, record_index, sum(b.tokens for b in blocks), sum(b.kept for b in blocks))


@contextmanager
def ray_encoding() -> Iterator[None]:
    """Inside this block every `encode_windows` of more than `BLOCK_RECORDS` records runs on the cluster."""
    with encoding_runner(encode_on_ray):
        yield
