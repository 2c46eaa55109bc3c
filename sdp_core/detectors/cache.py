"""Detection cache: a policy runs once per (dataset fingerprint, policy name + version), stored as Parquet.

Location: `cache_dir` argument, else `$SDP_CACHE_DIR/detections`, else `~/.cache/sdp-sweep/detections`: an
absolute, per-user place, so Ray trials (each in its own working directory) share one entry per dataset.
One file per key with flat columns `record, start, end, label` (records without spans have no rows;
the record count is in the file's metadata). Files are written atomically (temp file + `os.replace`), so a
crashed or concurrent run never leaves a half-written entry; an unreadable entry is recomputed.

A miss is detected in this process, or, inside `detection_runner(run)`, by `run` (a sweep's preparation: a Ray
Data pipeline over an actor pool on every CPU of its cluster, `sweep.pipeline`). Either way each distinct text is
detected once.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import AbstractContextManager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from sdp_core.data.records import Record, RecordColumns, SpanColumns, TextsOnRead, span_columns
from sdp_core.detectors.base import Policy
from sdp_core.errors import DataError
from sdp_core.io import CACHE_ENV, cache_root, fingerprint, text_digest  # noqa: F401  (re-exported: the cache's key and root)
from sdp_core.scoped import set_within

CHUNK = 1000  # texts per detect call: bounds memory and drives the progress bar

Runner = Callable[[Policy, Sequence[str], bool], SpanColumns]
"""Detects distinct texts for `detect_records`: (policy, texts, progress) -> one span list per text, in order."""
_RUNNER: ContextVar[Runner | None] = ContextVar("detection_runner", default=None)


def detection_runner(run: Runner) -> AbstractContextManager[None]:
    """Inside this block, `detect_records` hands each miss to `run` instead of detecting it in this process."""
    return set_within(_RUNNER, run)


def default_cache_dir() -> Path:
    return cache_root() / "detections"


def texts_of(records: Sequence[Record | str]) -> Sequence[str]:
    """The texts of records (or plain strings); anything else is a DataError. Records held as arrays give their
    texts as they are read (`RecordColumns.texts`: text by construction), not copied whole."""
    if isinstance(records, RecordColumns):
        return records.texts()
    texts = []
    for i, r in enumerate(records):
        text = r.text if isinstance(r, Record) else r
        if not isinstance(text, str):
            raise DataError(f"record {i} is not text ({type(text).__name__})")
        texts.append(text)
    return texts


def cache_path(cache_dir: Path, texts_fingerprint: str, policy: Policy) -> Path:
    key = hashlib.blake2b(f"{texts_fingerprint}|{policy.key}".encode(), digest_size=10).hexdigest()
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "+", policy.name)[:80]
    return cache_dir / f"{readable}-{key}.parquet"


def _write(path: Path, detected: SpanColumns, policy: Policy) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sdp_core.io import atomic_write_bytes

    labels = pa.DictionaryArray.from_arrays(pa.array(detected.spans[:, 2], pa.int32()),
                                            pa.array(detected.labels, pa.string()))
    table = pa.table(
        {
            "record": pa.array(np.repeat(np.arange(len(detected), dtype=np.int32), np.maximum(detected.counts, 0))),
            "start": pa.array(detected.spans[:, 0], pa.int32()),
            "end": pa.array(detected.spans[:, 1], pa.int32()),
            "label": labels,
        }
    ).replace_schema_metadata({"records": str(len(detected)), "policy": policy.key})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


READ_ROWS = 65_536
"""Spans a cache entry is read at a time (`_read`): what reading holds beyond the spans themselves is one batch of
them and Arrow's reader, whatever the corpus's size (an 800,000-record entry read as one table peaked 452 MB above
the start for 78 MB of spans; read so, 246 MB)."""


def _read(path: Path, n_records: int) -> SpanColumns | None:
    import pyarrow.parquet as pq

    try:
        entry = pq.ParquetFile(path)
        if int((entry.schema_arrow.metadata or {}).get(b"records", -1)) != n_records:
            return None
        # arrays and the label dictionary, never a Span object: the warm path must stay well under 2 s
        codes: dict[str, int] = {}  # each batch has a dictionary of its own: one code per label across them
        record = np.empty(entry.metadata.num_rows, np.int32)
        spans = np.empty((entry.metadata.num_rows, 3), np.int32)
        at = 0
        for batch in entry.iter_batches(batch_size=READ_ROWS, use_threads=False):
            labels, end = batch.column("label"), at + batch.num_rows
            recoded = np.array([codes.setdefault(v, len(codes)) for v in labels.dictionary.to_pylist()] or [0], np.int32)
            record[at:end] = batch.column("record").to_numpy()
            spans[at:end, 0], spans[at:end, 1] = batch.column("start").to_numpy(), batch.column("end").to_numpy()
            spans[at:end, 2] = recoded[labels.indices.to_numpy(zero_copy_only=False)]
            at = end
    except Exception:  # a damaged entry is a cache miss, not an error
        return None
    if at != len(record) or len(record) and (record.min() < 0 or record.max() >= n_records or (np.diff(record) < 0).any()):
        return None  # not this module's layout (records in order): a miss
    counts = np.bincount(record, minlength=n_records).astype(np.int32)
    return SpanColumns(spans, counts, tuple(codes))


def detect_records(
    records: Sequence[Record | str],
    policy: Policy,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    progress: bool = False,
) -> SpanColumns:
    """The policy's spans for every record, read from the cache when this dataset × policy was seen before; as
    arrays (`SpanColumns`), never all of them as objects."""
    texts = texts_of(records)
    path = cache_path(Path(cache_dir) if cache_dir else default_cache_dir(), fingerprint(texts), policy)
    if use_cache and path.is_file():
        cached = _read(path, len(texts))
        if cached is not None:
            return cached
    # A policy's spans depend on the text alone: each distinct text is detected once (dialog data repeats lines),
    # known by its digest (16 bytes a text, in one array), so that no text is held for it.
    digests = np.frombuffer(b"".join(text_digest(t) for t in texts), dtype="V16")
    first, of_digest = np.unique(digests, return_index=True, return_inverse=True)[1:]  # in the digests' order
    order = np.argsort(first)  # the distinct texts in the order they first come
    at, rank = first[order], np.empty_like(order)
    rank[order] = np.arange(len(order))
    of_distinct = rank[of_digest]
    unique = len(at) == len(texts)
    distinct = texts if unique else TextsOnRead(len(at), lambda k: texts[int(at[k])])  # read as the runner reads
    found = (_RUNNER.get() or detect_here)(policy, distinct, progress)
    detected = found if unique else found.take(of_distinct)
    if use_cache:
        _write(path, detected, policy)
    return detected


def detect_here(policy: Policy, texts: Sequence[str], progress: bool) -> SpanColumns:
    """Detect `texts` in this process, `CHUNK` at a time (with a progress bar when `progress`)."""
    chunks = (list(texts[i : i + CHUNK]) for i in range(0, len(texts), CHUNK))
    if not progress or len(texts) <= CHUNK:
        return span_columns(spans for chunk in chunks for spans in policy.detect(chunk))
    from sdp_core.progress import count_progress

    with count_progress(f"detect {policy.name}", len(texts)) as advance:

        def detected() -> Iterator[list]:
            for chunk in chunks:
                yield from policy.detect(chunk)
                advance(len(chunk))

        return span_columns(detected())
