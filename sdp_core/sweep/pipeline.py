"""Secret detection as a Ray Data pipeline on every CPU of the cluster (on a laptop, its local Ray: the same code).

    texts: the driver's (`detect_on_ray`), or a data file read as a Ray Dataset (`detect_file`)
      -> blocks of about `BLOCK_ROWS` records (so that every actor of the pool gets work from the start)
      -> `map_batches(PolicyDetector)` over a pool of one-CPU actors (at most `workers`; by default as many as the
         cluster's CPUs allow): each actor builds its policy once (spaCy loaded with the components the policy
         reads) and keeps it for every batch it is given
      -> the driver, in record order: spans only, never the texts, with a progress bar of records and records/s.

A sweep runs it before its trials start (`ray_detection` around its preparation, `sweep.prepare.prepare_once`): Tune
has asked for no CPU yet, so nothing competes with the actors, and they are gone before the first trial. A policy's
spans depend on the text alone (`detectors.base.Policy`), so the result is detection in one process, record for
record (`tests/test_pipeline.py`).

`detect_file` reads a data file (JSONL, CSV / TSV, Parquet, or a folder of Parquet / JSON(L) shards) as a Ray
Dataset, so the driver never holds its records, and writes each record's spans, with the digest of its text, as
Parquet shards in the detection cache, keyed by the file's digest, its reading settings and the policy's version
(`FileDetections`): a second run reads them back, and a sweep on that file looks its records' texts up there
(`ray_detection(sources=...)`) and detects only the texts it does not find (the records canaries went into). The
driver holds one batch of spans at a time, whatever the size of the file.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sdp_core.config import DataConfig
from sdp_core.data.records import SpanColumns, concatenated, span_columns
from sdp_core.detectors.base import Policy
from sdp_core.detectors.cache import default_cache_dir, detect_here, detection_runner
from sdp_core.errors import DataError
from sdp_core.io import atomic_directory, text_digest
from sdp_core.progress import count_progress

if TYPE_CHECKING:
    from ray.data import Dataset

IN_DRIVER_TEXTS = 1_000
"""A miss of at most this many texts is detected in the driver: starting an actor pool costs seconds (a process,
its imports, its spaCy), more than detecting them takes."""

BLOCK_ROWS = 256
"""Records per block and per actor call: small enough that a 2-CPU machine's two actors share 10 k records evenly,
large enough that spaCy's `nlp.pipe` batches and Ray's per-task overhead (~ms) stay a small share."""

BLOCK_BYTES = 128 << 10
"""The blocks a file is read in: about `BLOCK_ROWS` dialogs or notes (Ray Data cuts blocks by size)."""

FILE_MIN_BYTES = 1 << 20
"""A data file smaller than this (about 2,000 records of a dialog or note) is not read by a pipeline of its own: the
preparation's misses detect it (`ray_detection`)."""

SHARD_ROWS = 100_000
"""Records per Parquet shard that `detect_file` writes (one shard is what the driver holds while writing it)."""

READ_CPUS = 0
"""CPUs a read or text-extraction task asks for: none, so that reading goes on beside actors holding every CPU
(it is a small share of the work: parsing, next to detecting)."""

SPAN_COLUMNS = {"start": pa.list_(pa.int32()), "end": pa.list_(pa.int32()), "label": pa.list_(pa.string())}


class PolicyDetector:
    """An actor of the detection pool: builds its policy's pipelines once, then detects batch after batch.

    In: a batch with `text` (and whatever else, passed through but for `text`). Out: the batch's other columns,
    the spans as list columns `start`, `end`, `label`, the texts' `digest`, the `node` that detected them and
    `cpu_s`, this process's CPU time per record of the batch (what a core costs, whatever else runs beside it)."""

    def __init__(self, policy: Policy):
        import ray

        self.policy = policy
        self.node = ray.get_runtime_context().get_node_id()
        policy.detect(["Warm-up: Jane Smith, 12 High Street."])  # spaCy and the lexicons load here, once

    def __call__(self, batch: pa.Table) -> pa.Table:
        start = time.process_time()
        texts = batch.column("text").to_pylist()
        distinct = list(dict.fromkeys(texts))  # dialog data repeats lines
        found = dict(zip(distinct, self.policy.detect(distinct)))
        spans = [found[t] for t in texts]
        columns = {name: batch.column(name) for name in batch.column_names if name != "text"}
        columns["digest"] = pa.array([text_digest(t) for t in texts], pa.binary(16))
        columns["start"] = pa.array([[s.start for s in row] for row in spans], SPAN_COLUMNS["start"])
        columns["end"] = pa.array([[s.end for s in row] for row in spans], SPAN_COLUMNS["end"])
        columns["label"] = pa.array([[s.label for s in row] for row in spans], SPAN_COLUMNS["label"])
        columns["node"] = pa.array([self.node] * len(texts), pa.string()).dictionary_encode()
        columns["cpu_s"] = pa.array([(time.process_time() - start) / max(1, len(texts))] * len(texts), pa.float32())
        return pa.table(columns)


def detect_dataset(ds: Dataset, policy: Policy, workers: int | None = None, records: int | None = None) -> Dataset:
    """`ds` (a column `text`, in blocks of about `BLOCK_ROWS` records: `pipeline_context`) with each record's spans
    (`PolicyDetector`'s columns), from a pool of one-CPU actors: at most `workers` (None: as many as the cluster's CPUs allow, autoscaling
    included); as many as the cluster's CPUs now (or `records` need) start at once, so that every node gets some."""
    import ray
    import ray.data

    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    start = min(workers or cpus, cpus, -(-records // BLOCK_ROWS) if records else cpus)
    return ds.map_batches(
        PolicyDetector, fn_constructor_args=(policy,), batch_format="pyarrow", batch_size=BLOCK_ROWS, num_cpus=1,
        compute=ray.data.ActorPoolStrategy(min_size=start, max_size=workers))


@contextmanager
def pipeline_context() -> Iterator[None]:
    """Ray Data as the pipeline runs it: blocks of about `BLOCK_ROWS` records (`BLOCK_BYTES`), so that every actor
    gets work from the first records on; no progress bars or execution logs of its own (the driver shows records
    and records/s; a failure still raises). A dataset takes the context current when it is made: make it here."""
    import logging

    from ray.data import DataContext

    ctx, log = DataContext.get_current(), logging.getLogger("ray.data")
    before = ctx.enable_progress_bars, ctx.print_on_execution_start, ctx.target_max_block_size, log.level
    ctx.enable_progress_bars, ctx.print_on_execution_start, ctx.target_max_block_size = False, False, BLOCK_BYTES
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        ctx.enable_progress_bars, ctx.print_on_execution_start, ctx.target_max_block_size, _ = before
        log.setLevel(before[3])


def spans_of(table: pa.Table) -> SpanColumns:
    """The span lists of a table with `PolicyDetector`'s list columns, one per row, as arrays (no Span object)."""
    start, end, label = (table.column(c).combine_chunks() for c in ("start", "end", "label"))
    labels = pc.list_flatten(label).dictionary_encode()
    spans = np.stack([pc.list_flatten(start).to_numpy(), pc.list_flatten(end).to_numpy(),
                      labels.indices.to_numpy(zero_copy_only=False)], axis=1)
    return SpanColumns(spans.astype(np.int32).reshape(-1, 3),
                       pc.list_value_length(start).to_numpy(zero_copy_only=False).astype(np.int32),
                       tuple(labels.dictionary.to_pylist()))


def policy_label(policy: Policy) -> str:
    """A policy as a progress line names it: its name, or for one expanded into its parts (`general` is 18 of
    them, `address,email,...`) how many, which a line has room for."""
    parts = policy.name.split(",")
    return policy.name if len(parts) == 1 else f"with {len(parts)} detectors ({parts[0]}, … {parts[-1]})"


def _progress(description: str, total: int | None, enabled: bool) -> ContextManager[Callable[[int], None]]:
    """Records done and records/s (`progress.count_progress`), or nothing when not `enabled`."""
    return count_progress(description, total, "records") if enabled else nullcontext(lambda n: None)


def detect_on_ray(policy: Policy, texts: list[str], progress: bool = True, workers: int | None = None
                  ) -> SpanColumns:
    """The spans of the driver's `texts` (`detect_records`' runner inside `ray_detection`)."""
    import ray.data

    if not texts:
        return span_columns([])
    records, parts = [], []  # as the batches come, then put in the texts' order
    with pipeline_context(), _progress(f"detect {policy_label(policy)}", len(texts), progress) as advance:
        table = pa.table({"record": pa.array(range(len(texts)), pa.int64()), "text": texts})
        ds = ray.data.from_arrow([table.slice(i, BLOCK_ROWS) for i in range(0, len(texts), BLOCK_ROWS)])
        for batch in detect_dataset(ds, policy, workers, len(texts)).iter_batches(batch_format="pyarrow", batch_size=None):
            records.append(batch.column("record").to_numpy())
            parts.append(spans_of(batch))
            advance(batch.num_rows)
    return concatenated(parts).take(np.argsort(np.concatenate(records), kind="stable"))


# ------------------------------------------------------------------------------------------------ files


@dataclass(frozen=True)
class FileSource:
    """A data file (or a folder of shards) and how its text is read: the `text_fields` columns (or keys) joined
    by a newline; None: the `text` column, else the table's one column of text."""

    path: Path
    text_fields: tuple[str, ...] | None = None

    def files(self) -> list[Path]:
        """The files it reads, in order: the file, or a folder's Parquet and JSON(L) files."""
        if self.path.is_file():
            return [self.path]
        if not self.path.is_dir():
            raise DataError("file or folder not found", str(self.path))
        found = sorted(p for p in self.path.rglob("*") if p.suffix.lower() in FOLDER_FORMATS and p.is_file())
        if not found:
            raise DataError(f"no {', '.join(FOLDER_FORMATS)} files in the folder", str(self.path))
        return found

    def fingerprint(self) -> str:
        """A digest of the files' bytes (read in 1 MiB pieces: the driver holds no more) and the reading settings."""
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps(self.text_fields).encode())
        for path in self.files():
            h.update(path.name.encode())
            with open(path, "rb") as f:
                while piece := f.read(1 << 20):
                    h.update(piece)
        return h.hexdigest()


FOLDER_FORMATS = (".parquet", ".jsonl", ".json")
FILE_FORMATS = (*FOLDER_FORMATS, ".csv", ".tsv", ".tab")


def read_source(source: FileSource) -> Dataset:
    """The source's records as a Ray Dataset with one column, `text`: JSONL objects, CSV / TSV rows or Parquet
    rows. Tables drop rows whose text is blank (as `data.loaders` does); JSONL with a `text` key keeps every
    object. Every task of it asks for no CPU (`READ_CPUS`); Parquet is read by row batches in tasks of ours, as
    Ray's Parquet reader lists its files in a task of one CPU, which actors holding every CPU would starve."""
    import pyarrow.csv as pcsv
    import ray.data

    files = [str(p) for p in source.files()]
    kinds = {Path(p).suffix.lower() for p in files}
    if kinds <= {".jsonl", ".json"}:
        ds, table = ray.data.read_json(files, lines=True, num_cpus=READ_CPUS), False
    elif kinds == {".parquet"}:
        ds, table = ray.data.from_items([{"path": p} for p in files]), True
        schema = pq.read_schema(files[0])
        fields = _text_fields(source, list(schema.names), schema, str(source.path))
        ds = ds.map_batches(_parquet_rows, fn_args=(fields, BLOCK_ROWS), batch_size=1, batch_format="pyarrow",
                            num_cpus=READ_CPUS)
    elif len(files) == 1 and kinds <= {".csv", ".tsv", ".tab"}:
        delimiter = "," if kinds == {".csv"} else "\t"
        ds, table = ray.data.read_csv(files, num_cpus=READ_CPUS,
                                      parse_options=pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
                                      ), True
    else:
        raise DataError(f"a Ray Dataset reads JSONL, CSV / TSV or Parquet, or a folder of {', '.join(FOLDER_FORMATS)} "
                        f"files (found {', '.join(sorted(kinds))})", str(source.path))
    if kinds != {".parquet"}:  # the first JSON object's, or Ray's reading of the CSV's first block
        schema = _first_object_schema(files[0]) if table is False else ds.schema()
        fields = _text_fields(source, list(schema.names) if schema is not None else [], schema, str(source.path))
    skip_blank = table or source.text_fields is not None
    return ds.map_batches(_texts, fn_args=(fields, skip_blank), batch_format="pyarrow", num_cpus=READ_CPUS)


def _first_object_schema(path: str) -> pa.Schema:
    """The columns of the first object of a JSONL file (read in the driver: a line, not a Ray execution)."""
    with open(path, encoding="utf-8") as f:
        line = next((line for line in f if line.strip()), "{}")
    try:
        first = json.loads(line)
    except ValueError:
        raise DataError("line 1: invalid JSON", path) from None
    return pa.Table.from_pylist([first if isinstance(first, dict) else {}]).schema


def _parquet_rows(paths: pa.Table, fields: list[str], rows: int) -> Iterator[pa.Table]:
    """The `fields` columns of each Parquet file named in `paths`, `rows` rows at a time."""
    for path in paths.column("path").to_pylist():
        for batch in pq.ParquetFile(path).iter_batches(batch_size=rows, columns=fields):
            yield pa.Table.from_batches([batch])


def _text_fields(source: FileSource, columns: list[str], schema, where: str) -> list[str]:
    """The columns holding the text: as named, else `text`, else the one string column (not `label`/`spans`)."""
    if source.text_fields:
        missing = [f for f in source.text_fields if f not in columns]
        if missing:
            raise DataError(f"no column {missing[0]!r} (columns: {', '.join(columns)}); set data.text_fields", where)
        return list(source.text_fields)
    if "text" in columns:
        return ["text"]
    strings = [n for n, t in zip(schema.names, schema.types) if n not in ("label", "spans")
               and (t == pa.string() or t == pa.large_string())]
    if len(strings) != 1:
        raise DataError(f"{len(strings)} columns hold text and none is named `text`: name the text column(s) with "
                        "--set data.text_fields=[NAME]", where)
    return strings


def _texts(batch: pa.Table, fields: list[str], skip_blank: bool) -> pa.Table:
    """One `text` per row: the `fields` that are not empty, joined by a newline; rows of blank text dropped when
    `skip_blank` (rows whose text is not a string, always)."""
    parts = [batch.column(f).to_pylist() for f in fields]
    texts = ["\n".join(p for p in row if p) if all(p is None or isinstance(p, str) for p in row) else None
             for row in zip(*parts)]
    return pa.table({"text": pa.array([t for t in texts if t is not None and (t.strip() or not skip_blank)],
                                      pa.string())})


class FileDetections:
    """The shards `detect_file` wrote for one source and policy: `<cache>/<policy>-<key>.shards/part-*.parquet` with
    columns `record`, `digest`, `start`, `end`, `label` (a record's spans as lists), and `manifest.json` (records,
    how many each node detected, the actors' CPU seconds, the source's fingerprint, the policy's key). The folder
    appears complete or not at all (`io.atomic_directory`)."""

    def __init__(self, source: FileSource, policy: Policy, cache_dir: Path | None = None,
                 fingerprint: str | None = None):
        self.source, self.policy = source, policy
        fingerprint = fingerprint or source.fingerprint()
        key = hashlib.blake2b(f"{fingerprint}|{policy.key}".encode(), digest_size=10).hexdigest()
        readable = re.sub(r"[^A-Za-z0-9_.-]+", "+", policy.name)[:80]
        self.fingerprint = fingerprint
        self.path = (cache_dir or default_cache_dir()) / f"{readable}-{key}.shards"

    @property
    def manifest(self) -> dict | None:
        """The manifest, or None: no shards, or shards that do not hold its records (an earlier version numbered a
        last, partial shard as the full one before it, and wrote it over that one: such a file is detected again)."""
        try:
            manifest = json.loads((self.path / "manifest.json").read_text())
            held = sum(pq.ParquetFile(p).metadata.num_rows for p in self._shards())
        except (OSError, ValueError, pa.ArrowException):
            return None
        return manifest if isinstance(manifest, dict) and manifest.get("records") == held else None

    def _shards(self) -> list[Path]:
        return sorted(self.path.glob("part-*.parquet"))

    def spans(self) -> SpanColumns:
        """Every record's spans, in the file's order, read a shard at a time."""
        return concatenated([spans_of(pq.read_table(p, columns=list(SPAN_COLUMNS))) for p in self._shards()])

    def lookup(self, texts: Iterable[str]) -> tuple[np.ndarray, SpanColumns]:
        """Which texts are among the file's records (a bool mask), and the spans of those that are, in order. The
        shards are read one at a time: what this holds beyond the texts' digests and their spans is one shard."""
        wanted = pa.array((text_digest(t) for t in texts), pa.binary(16))
        row = np.full(len(wanted), -1, np.int64)  # each text's place among the spans found so far; −1: not yet
        found: list[SpanColumns] = []
        for shard in self._shards():
            table = pq.read_table(shard, columns=["digest", *SPAN_COLUMNS])
            in_shard = pc.index_in(wanted, value_set=table.column("digest")).fill_null(-1).to_numpy()
            new = (in_shard >= 0) & (row < 0)
            row[new] = sum(map(len, found)) + np.arange(int(new.sum()))
            found.append(spans_of(table.take(pa.array(in_shard[new]))))
        hit = row >= 0
        return hit, concatenated(found).take(row[hit])


def detect_file(source: FileSource, policy: Policy, workers: int | None = None, cache_dir: Path | None = None,
                progress: bool = True) -> FileDetections:
    """Detect every record of `source` on the cluster and write the spans as shards (`FileDetections`), unless a
    run before wrote them. The driver streams the results into `SHARD_ROWS`-record shards in record order."""
    out = FileDetections(source, policy, cache_dir)
    if out.manifest is not None:
        return out
    nodes: Counter[str] = Counter()
    done, pending, cpu = 0, list[pa.Table](), 0.0
    with (pipeline_context(), atomic_directory(out.path) as tmp,
          _progress(f"detect {policy_label(policy)} in {source.path.name}", None, progress) as advance):
        ds = detect_dataset(read_source(source), policy, workers)
        ds.context.execution_options.preserve_order = True  # records are numbered in the file's order as they come

        def flush() -> None:  # a shard is numbered by the records it holds: its last record's // SHARD_ROWS
            if pending:
                pq.write_table(pa.concat_tables(pending), tmp / f"part-{(done - 1) // SHARD_ROWS:05d}.parquet")
                pending.clear()

        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for count in pc.value_counts(batch.column("node").cast(pa.string())).to_pylist():
                nodes[count["values"]] += count["counts"]
            cpu += pc.sum(batch.column("cpu_s")).as_py() or 0.0
            rows = batch.select(["digest", *SPAN_COLUMNS])
            start = done
            while rows.num_rows:  # a shard ends at a multiple of SHARD_ROWS
                take = min(rows.num_rows, SHARD_ROWS - done % SHARD_ROWS)
                piece = rows.slice(0, take)
                pending.append(piece.add_column(0, "record", pa.array(range(done, done + take), pa.int64())))
                done += take
                rows = rows.slice(take)
                if done % SHARD_ROWS == 0:
                    flush()
            advance(done - start)
        flush()
        if done == 0:
            raise DataError("no records (empty data)", str(source.path))
        (tmp / "manifest.json").write_text(json.dumps(
            {"records": done, "nodes": dict(nodes), "detect_cpu_s": round(cpu, 3), "source": str(source.path),
             "fingerprint": out.fingerprint, "policy": policy.key}, indent=2) + "\n")
    return out


@contextmanager
def ray_detection(workers: int | None = None, files: Sequence[FileDetections] = (), progress: bool = True
                  ) -> Iterator[None]:
    """Inside this block every detection cache miss runs on the cluster: texts found among the records of `files`
    (`detect_file`'s shards of the same policy) are read from there, the others go through `detect_on_ray` (or,
    at most `IN_DRIVER_TEXTS` of them, the driver); with `progress`, records done and records/s."""
    def run(policy: Policy, texts: Sequence[str], _progress_asked: bool) -> SpanColumns:
        parts: list[SpanColumns] = []  # what each source found, one after another
        where = np.full(len(texts), -1, np.int64)  # each text's list in `parts`, concatenated; −1: not found yet
        for shards in (f for f in files if f.policy.key == policy.key):
            missing = np.flatnonzero(where < 0)
            hit, spans = shards.lookup(texts[i] for i in missing.tolist())  # each text read as it is hashed
            where[missing[hit]] = sum(map(len, parts)) + np.arange(len(spans))
            parts.append(spans)
        left = np.flatnonzero(where < 0)
        rest = [texts[i] for i in left.tolist()]
        where[left] = sum(map(len, parts)) + np.arange(len(rest))
        parts.append(detect_on_ray(policy, rest, progress, workers) if len(rest) > IN_DRIVER_TEXTS
                     else detect_here(policy, rest, progress))
        return concatenated(parts).take(where)

    with detection_runner(run):
        yield


def file_source(data: DataConfig) -> FileSource | None:
    """The file a data setting reads its records from, when `read_source` reads its format (not plain text) and it
    is large enough (`FILE_MIN_BYTES`) for a pipeline of its own."""
    path = Path(data.location) if data.source == "file" else None
    if path is None or path.suffix.lower() not in FILE_FORMATS or not path.is_file() or path.stat().st_size < FILE_MIN_BYTES:
        return None
    return FileSource(Path(data.location), tuple(data.text_fields) if data.text_fields else None)
