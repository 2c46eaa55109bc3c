"""A sweep's rows encoded on the cluster: blocks of records tokenized by a pool of Ray actors, one a CPU, the rows
joined in record order.

    the preparation's records (`preparation.prepare_trial_data`, a mechanism's plan: every `encode_windows` inside
    `ray_encoding`)
      -> blocks of `BLOCK_RECORDS` records, their texts and spans (as arrays, `data.records.span_columns`)
      -> a pool of one-CPU actors, one a CPU of the cluster (`BlockEncoder`: each imports torch and holds the
         tokenizer once, and encodes block after block), killed once done; the rows stay in the object store until
         joined
      -> one copy of every block's rows, in order, into the split's arrays: the joining process maps one block at a
         time (`train.shared_pages`), so it holds the rows once, not twice.

Encoding a record depends on its text, its spans and the layout alone (`text.encode.RowLayout`), and a block's
records are numbered from its first, so the rows are those of one process, row for row (`tests/test_pipeline.py`):
where encoding runs changes its time, never its output. Records at most one block are encoded in the process that
asks (an actor's start costs seconds: a process importing torch and the tokenizer).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from sdp_core.data.records import Span, SpanColumns, span_columns
from sdp_core.errors import UserError
from sdp_core.progress import count_progress
from sdp_core.text.encode import EncodedRows, RowLayout, encode_rows, encoding_runner
from sdp_core.train.shared_pages import in_shared_memory, unmap_pages

BLOCK_RECORDS = 10_000
"""Records an actor encodes at a time: about 20 s of one core for clinic notes (2 ms a note over the tokenizer and
the windows), so that a call's overhead is a small share, and a block's texts and rows (about 10 MB) stay small."""


class BlockEncoder:
    """An actor of the encoding pool (`encode_on_ray`): holds the layout (the tokenizer), encodes block after block."""

    def __init__(self, layout: RowLayout):
        self.layout = layout

    def encode(self, texts: list[str], spans: SpanColumns, first: int) -> EncodedRows:
        """One block's rows, its records numbered from `first`."""
        return encode_rows(texts, [s or () for s in spans.lists()], self.layout, first)


def encode_on_ray(texts: Sequence[str], spans: Sequence[Sequence[Span]], layout: RowLayout) -> EncodedRows:
    """`encode_rows` of `texts` by blocks of `BLOCK_RECORDS` on a pool of one-CPU actors, as many as the cluster's
    CPUs (the runner of `ray_encoding`), with a progress bar of the records encoded. The actors are killed once the
    rows are in: their processes, and what encoding left in them, are gone before the trials start (a task's
    worker would stay, and could be handed a trial)."""
    import ray
    from ray.exceptions import RayTaskError
    from ray.util import ActorPool

    if len(texts) <= BLOCK_RECORDS:
        return encode_rows(texts, spans, layout)
    starts = range(0, len(texts), BLOCK_RECORDS)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    layout_ref = ray.put(layout)
    actors = [ray.remote(num_cpus=1)(BlockEncoder).remote(layout_ref) for _ in range(min(cpus, len(starts)))]
    pool = ActorPool(actors)
    blocks: list[EncodedRows] = []  # in record order; views of the object store until joined
    try:
        with count_progress("encode rows", len(texts)) as advance:

            def take_block() -> None:  # the next block in record order, once it is done
                blocks.append(pool.get_next())
                advance(min(BLOCK_RECORDS, len(texts) - (len(blocks) - 1) * BLOCK_RECORDS))

            for first in starts:
                while not pool.has_free():  # a block is made as an actor frees up: its texts are not all made at once
                    take_block()
                end = min(first + BLOCK_RECORDS, len(texts))
                pool.submit(lambda actor, block: actor.encode.remote(*block),
                            ([texts[r] for r in range(first, end)], span_columns(spans[first:end]), first))
            while pool.has_next():
                take_block()
        return _joined(blocks, layout)
    except RayTaskError as e:  # a record refused (`data.on_long_records: refuse`): its line, not a traceback
        if isinstance(e.cause, UserError):
            raise e.cause from None
        raise
    finally:
        for actor in actors:
            ray.kill(actor)


def _joined(blocks: list[EncodedRows], layout: RowLayout) -> EncodedRows:
    """The blocks' rows, in order, in arrays of this process: each block, a view of the object store (whose pages
    are mapped only as they are read), copied and unmapped before the next."""
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
