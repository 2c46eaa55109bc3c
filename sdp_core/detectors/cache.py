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
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator, Sequence

from sdp_core.data.records import Record, Span
from sdp_core.detectors.base import Policy
from sdp_core.errors import DataError
from sdp_core.io import CACHE_ENV, cache_root, fingerprint  # noqa: F401  (re-exported: the cache's key and root)

CHUNK = 1000  # texts per detect call: bounds memory and drives the progress bar

Runner = Callable[[Policy, list[str], bool], list[list[Span]]]
"""Detects distinct texts for `detect_records`: (policy, texts, progress) -> one span list per text, in order."""
_RUNNER: ContextVar[Runner | None] = ContextVar("detection_runner", default=None)


@contextmanager
def detection_runner(run: Runner) -> Iterator[None]:
    """Inside this block, `detect_records` hands each miss to `run` instead of detecting it in this process."""
    token = _RUNNER.set(run)
    try:
        yield
    finally:
        _RUNNER.reset(token)


def default_cache_dir() -> Path:
    return cache_root() / "detections"


def texts_of(records: Sequence[Record | str]) -> list[str]:
    """The texts of records (or plain strings); anything else is a DataError."""
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


def _write(path: Path, detected: list[list[Span]], policy: Policy) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sdp_core.io import atomic_write_bytes

    rows = [(i, s.start, s.end, s.label) for i, spans in enumerate(detected) for s in spans]
    columns = list(zip(*rows)) if rows else [(), (), (), ()]
    table = pa.table(
        {
            "record": pa.array(columns[0], pa.int32()),
            "start": pa.array(columns[1], pa.int32()),
            "end": pa.array(columns[2], pa.int32()),
            "label": pa.array(columns[3], pa.string()).dictionary_encode(),
        }
    ).replace_schema_metadata({"records": str(len(detected)), "policy": policy.key})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def _read(path: Path, n_records: int) -> list[list[Span]] | None:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception:  # a damaged entry is a cache miss, not an error
        return None
    if int((table.schema.metadata or {}).get(b"records", -1)) != n_records:
        return None
    out: list[list[Span]] = [[] for _ in range(n_records)]
    if table.num_rows == 0:
        return out
    # numpy and the label dictionary, not to_pylist: ~50x faster, and the warm path must stay well under 2 s
    record, start, end = (table.column(c).to_numpy().tolist() for c in ("record", "start", "end"))
    labels = table.column("label").combine_chunks()
    names = labels.dictionary.to_pylist()
    for i, s, e, k in zip(record, start, end, labels.indices.to_numpy(zero_copy_only=False).tolist()):
        out[i].append(Span(s, e, names[k]))
    return out


def detect_records(
    records: Sequence[Record | str],
    policy: Policy,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    progress: bool = False,
) -> list[list[Span]]:
    """The policy's spans for every record, read from the cache when this dataset × policy was seen before."""
    texts = texts_of(records)
    path = cache_path(Path(cache_dir) if cache_dir else default_cache_dir(), fingerprint(texts), policy)
    if use_cache and path.is_file():
        cached = _read(path, len(texts))
        if cached is not None:
            return cached
    # A policy's spans depend on the text alone: each distinct text is detected once (dialog data repeats lines).
    distinct = list(dict.fromkeys(texts))
    found = dict(zip(distinct, (_RUNNER.get() or detect_here)(policy, distinct, progress)))
    detected = [list(found[t]) for t in texts]
    if use_cache:
        _write(path, detected, policy)
    return detected


def detect_here(policy: Policy, texts: list[str], progress: bool) -> list[list[Span]]:
    """Detect `texts` in this process, `CHUNK` at a time (with a progress bar when `progress`)."""
    chunks = [texts[i : i + CHUNK] for i in range(0, len(texts), CHUNK)]
    if not progress or len(chunks) < 2:
        return [spans for chunk in chunks for spans in policy.detect(chunk)]
    from sdp_core.progress import count_progress

    out: list[list[Span]] = []
    with count_progress(f"detect {policy.name}", len(texts)) as advance:
        for chunk in chunks:
            out += policy.detect(chunk)
            advance(len(chunk))
    return out
