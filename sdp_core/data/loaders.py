"""Corpus loaders: JSONL, Parquet, plain text, and HF `datasets` names (for machines that reach the hub).

Every loader returns `list[Record]`; bad data (empty, binary, invalid UTF-8, non-text records, spans outside
the text or overlapping) is a one-line `DataError` naming the file and the problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from sdp_core.data.records import Record, Span
from sdp_core.errors import DataError, UserError

MAX_RECORD_CHARS = 1_000_000  # a single record this long is a broken file, not a dialog


def _spans(raw: Any, text: str, where: str) -> tuple[Span, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)):
        raise DataError("`spans` must be a list", where)
    spans = []
    for s in raw:
        if not isinstance(s, dict) or not {"start", "end"} <= set(s):
            raise DataError("each span needs `start` and `end`", where)
        start, end = s["start"], s["end"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise DataError("span `start`/`end` must be integers", where)
        if not 0 <= start < end <= len(text):
            raise DataError(f"span [{start}, {end}) is outside the text (length {len(text)})", where)
        spans.append(Span(start, end, str(s.get("label", "SECRET"))))
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        if b.start < a.end:
            raise DataError(f"spans [{a.start}, {a.end}) and [{b.start}, {b.end}) overlap", where)
    return tuple(spans)


def record_from_mapping(obj: Any, where: str) -> Record:
    """Validate one `{"text": str, "spans": [...]?, "label": int?}` mapping."""
    if not isinstance(obj, dict):
        raise DataError(f"a record must be an object with `text`, got {type(obj).__name__}", where)
    text = obj.get("text")
    if not isinstance(text, str):
        raise DataError(f"`text` must be a string, got {type(text).__name__}", where)
    if len(text) > MAX_RECORD_CHARS:
        raise DataError(f"a record of {len(text):,} characters is longer than {MAX_RECORD_CHARS:,}", where)
    label = obj.get("label")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool)):
        raise DataError("`label` must be an integer class id", where)
    return Record(text=text, spans=_spans(obj.get("spans"), text, where), label=label)


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\x00" in data[:65536]:
        raise DataError("binary data, not text", str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"invalid UTF-8 at byte {e.start}", str(path)) from None


def load_jsonl(path: Path) -> list[Record]:
    records = []
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"line {i}: invalid JSON ({e.msg})", str(path)) from None
        records.append(record_from_mapping(obj, f"{path}: line {i}"))
    return records


def load_parquet(path: Path) -> list[Record]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise DataError(f"not a readable Parquet file ({type(e).__name__})", str(path)) from None
    if "text" not in table.column_names:
        raise DataError("Parquet file has no `text` column", str(path))
    return [record_from_mapping(row, f"{path}: row {i}") for i, row in enumerate(table.to_pylist())]


def load_text(path: Path) -> list[Record]:
    """One record per blank-line-separated block if the file has blank lines, else one per line."""
    text = _read_text(path).replace("\r\n", "\n")
    blocks = [b.strip("\n") for b in text.split("\n\n")] if "\n\n" in text.strip("\n") else text.split("\n")
    return [record_from_mapping({"text": b}, str(path)) for b in blocks if b.strip()]


LOADERS: dict[str, Callable[[Path], list[Record]]] = {
    ".jsonl": load_jsonl,
    ".json": load_jsonl,
    ".parquet": load_parquet,
    ".txt": load_text,
    ".text": load_text,
}


def load_records(path: str | Path) -> list[Record]:
    """Load a data file by its extension (unknown extensions are read as plain text)."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", str(path))
    if not path.is_file():
        raise DataError("not a file", str(path))
    records = LOADERS.get(path.suffix.lower(), load_text)(path)
    if not records:
        raise DataError("no records (empty data)", str(path))
    if not any(r.text.strip() for r in records):
        raise DataError("every record is empty", str(path))
    return records


def save_jsonl(records: list[Record], path: str | Path) -> Path:
    from sdp_core.io import atomic_write_text

    return atomic_write_text(path, "".join(json.dumps(r.to_dict()) + "\n" for r in records))


def save_parquet(records: list[Record], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sdp_core.io import atomic_write_bytes

    rows = [r.to_dict() for r in records]
    table = pa.Table.from_pylist([{"text": r["text"], "spans": r.get("spans"), "label": r.get("label")} for r in rows])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return atomic_write_bytes(path, sink.getvalue().to_pybytes())


HF_TEXT_FIELDS = {"wikitext": ("text",), "glue/sst2": ("sentence",), "glue/qnli": ("question", "sentence"),
                  "glue/mnli": ("premise", "hypothesis"), "glue/qqp": ("question1", "question2")}


def load_hf(name: str, split: str) -> list[Record]:
    """A HF `datasets` corpus by name (`wikitext-2-raw-v1`, `glue/sst2`, ...). Needs the hub."""
    try:
        import datasets
    except ImportError:
        raise UserError("HF datasets need the `datasets` package (pip install datasets)") from None
    if name.startswith("wikitext"):
        ds, fields = datasets.load_dataset("wikitext", name, split=split), HF_TEXT_FIELDS["wikitext"]
    elif name.startswith("glue/"):
        hf_split = "validation_matched" if name == "glue/mnli" and split == "validation" else split
        ds, fields = datasets.load_dataset("glue", name.split("/", 1)[1], split=hf_split), HF_TEXT_FIELDS[name]
    else:
        raise UserError(f"unknown HF dataset {name!r} (known: wikitext-2-raw-v1, glue/sst2, glue/qnli, glue/mnli, glue/qqp)")
    records = []
    for row in ds:
        text = " </s> ".join(row[f] for f in fields).strip()
        if text:
            records.append(Record(text=text, label=row.get("label")))
    return records
