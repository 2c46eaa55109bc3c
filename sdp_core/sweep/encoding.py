"""A sweep's rows encoded on the cluster: blocks of records tokenized by a pool of Ray actors, one a CPU, each block's
rows kept in the object store and joined in record order without a copy (`LMData.joined`).

    the preparation's records (`preparation.prepare_trial_data`, a mechanism's plan: every `encode_windows` inside
    `ray_encoding`)
      -> blocks of `BLOCK_RECORDS` records, their texts and spans (as arrays, `data.records.span_columns`)
      -> a pool of one-CPU actors, one a CPU of the cluster (`EncoderPool`: each imports torch and the tokenizer
         once, and encodes block after block, for every split and mechanism the preparation encodes), killed at its
         end
      -> the blocks' rows, in record order, left in the object store: the process that asked holds views of them,
         and reads them a block at a time (`LMData.blocks`), so it need never hold every row.

Encoding a record depends on its text, its spans and the layout alone (`text.encode.RowLayout`), and a block's
records are numbered from its first, so the rows are those of one process, row for row (`tests/test_pipeline.py`):
where encoding runs changes its time, never its output. Records at most one block are encoded in the process that
asks (an actor's start costs seconds: a process importing torch and the tokenizer).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Sequence

from sdp_core.data.records import Span, SpanColumns, span_columns
from sdp_core.errors import UserError
from sdp_core.progress import count_progress
from sdp_core.text.encode import EncodedRows, RowLayout, encode_rows, encoding_runner
from sdp_core.train.host_memory import give_back_freed_host_memory
from sdp_core.train.shared_pages import unmap_shared_mappings

if TYPE_CHECKING:
    import ray

BLOCK_RECORDS = 10_000
"""Records an actor encodes at a time: about 20 s of one core for clinic notes (2 ms a note over the tokenizer and
the windows), so that a call's overhead is a small share, and a block's texts and rows (about 10 MB) stay small."""


class BlockEncoder:
    """An actor of the encoding pool (`EncoderPool`): encodes block after block."""

    def __init__(self) -> None:
        self.layout: tuple[str, RowLayout] | None = None  # the last layout read, by its reference's id

    def encode(self, texts: list[str], spans: SpanColumns, layout: list[ray.ObjectRef], first: int) -> EncodedRows:
        """One block's rows, its records numbered from `first`, laid out by `layout` (a list of one reference to
        it). First, what the earlier blocks left in this process goes back: the object store's pages their rows
        were written through (mapped here, and kept mapped, by each return) and the heap the tokenizer freed, so
        that an actor holds one block's, not every block's.

        The layout is read once, not at each block: Ray would resolve a bare reference, deserializing the tokenizer
        again, at every call, and each tokenizer so made and used left about 3.6 MB in the process however its heap
        was trimmed (2,000 clinic notes a call; 0.5 GB an actor over a million notes)."""
        unmap_shared_mappings()
        give_back_freed_host_memory()
        (ref,) = layout
        if self.layout is None or self.layout[0] != ref.hex():
            import ray

            self.layout = (ref.hex(), ray.get(ref))
        return encode_rows(texts, spans, self.layout[1], first)


class EncoderPool:
    """The encoding actors of one `ray_encoding` block: one-CPU actors, as many as the cluster's CPUs (or the
    blocks) at most, started when the first records past one block are encoded and kept for the block's other
    encodings (each actor's start is a process importing torch and the tokenizer: seconds); killed at its end, so
    that their processes, and what encoding left in them, are gone before the trials start (a task's worker would
    stay, and could be handed a trial)."""

    def __init__(self) -> None:
        self.actors: list = []  # handles of `BlockEncoder` actors

    def encode(self, texts: Sequence[str], spans: Sequence[Sequence[Span]], layout: RowLayout) -> list[EncodedRows]:
        """`encode_rows` of `texts` by blocks of `BLOCK_RECORDS` on the actors (`ray_encoding`'s runner), with a
        progress bar of the records encoded: each block's rows, in record order, views of the object store."""
        import ray
        from ray.exceptions import RayTaskError
        from ray.util import ActorPool

        if len(texts) <= BLOCK_RECORDS:
            return [encode_rows(texts, spans, layout)]
        starts = range(0, len(texts), BLOCK_RECORDS)
        wanted = min(max(1, int(ray.cluster_resources().get("CPU", 1))), len(starts))
        self.actors += [ray.remote(num_cpus=1)(BlockEncoder).remote() for _ in range(wanted - len(self.actors))]
        pool = ActorPool(self.actors)
        layout_ref = ray.put(layout)
        blocks: list[EncodedRows] = []  # in record order; views of the object store
        try:
            with count_progress("encode rows", len(texts)) as advance:

                def take_block() -> None:  # the next block in record order, once it is done
                    blocks.append(pool.get_next())
                    advance(min(BLOCK_RECORDS, len(texts) - (len(blocks) - 1) * BLOCK_RECORDS))

                for first in starts:
                    while not pool.has_free():  # a block is sent as an actor frees up: not all texts at once
                        take_block()
                    end = min(first + BLOCK_RECORDS, len(texts))
                    pool.submit(lambda actor, block: actor.encode.remote(*block),
                                ([texts[r] for r in range(first, end)], span_columns(spans[first:end]), [layout_ref],
                                 first))
                while pool.has_next():
                    take_block()
        except RayTaskError as e:  # a record refused (`data.on_long_records: refuse`): its line, not a traceback
            if isinstance(e.cause, UserError):
                raise e.cause from None
            raise
        return blocks

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


@contextmanager
def ray_encoding() -> Iterator[None]:
    """Inside this block every `encode_windows` of more than `BLOCK_RECORDS` records runs on the cluster, on one
    pool of actors (`EncoderPool`) killed at the block's end."""
    pool = EncoderPool()
    try:
        with encoding_runner(pool.encode):
            yield
    finally:
        pool.close()
