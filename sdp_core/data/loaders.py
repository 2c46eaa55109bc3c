"""Corpus loaders: JSONL, tables (CSV, TSV, Parquet), plain text, and HF `datasets` datasets (a hub name, or a
local `save_to_disk` folder or Parquet / Arrow / JSON(L) files, which need no hub).

A table's text is its `text` column, or the columns `data.text_fields` names (joined by a newline), or else its
one column of text; a table with several text columns and none named is refused. JSONL is read the same way, its
keys as columns, when `data.text_fields` is set or its objects have no `text` key. Plain text is one record per
blank-line-separated block when the file has a blank line, else one record per line (`load_text`).

Every loader returns a sequence of records (JSONL, read a line at a time: arrays, `RecordColumns`; a HF dataset: per
split, `hf_records`); bad data (missing, empty, binary,
invalid UTF-8, non-text records, a missing column, spans outside the text or overlapping) is a one-line
`DataError` naming the file and the problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sdp_core.data.records import Record, Span, record_columns
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
    if label is not None and (not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < 2**63):
        raise DataError("`label` must be a non-negative integer class id (below 2**63, a 64-bit integer)", where)
    return Record(text=text, spans=_spans(obj.get("spans"), text, where), label=label)


BINARY_CHECK_BYTES = 65536  # a NUL byte in a file's first 64 KiB: binary data, not text


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\x00" in data[:BINARY_CHECK_BYTES]:
        raise DataError("binary data, not text", str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"invalid UTF-8 at byte {e.start}", str(path)) from None


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """A file's lines (numbered from 1, newline kept), each decoded as it is read: what `_read_text` checks, for a
    file that need not fit in memory."""
    with path.open("rb") as f:
        if b"\x00" in f.read(BINARY_CHECK_BYTES):
            raise DataError("binary data, not text", str(path))
        f.seek(0)
        at = 0  # the line's first byte in the file
        for i, raw in enumerate(f, 1):
            try:
                yield i, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"invalid UTF-8 at byte {at + e.start}", str(path)) from None
            at += len(raw)


JSON_LINES = ("; a .json/.jsonl file is read as JSON Lines, one object per line, not a JSON array (convert it: "
              "jq -c '.[]' FILE > FILE.jsonl)")


class _NotRecords(Exception):
    """A JSONL file whose first object has no `text` key: a table of keys (`table_records`), not records."""


def _json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """The objects of a JSON Lines file, a line at a time, with their line numbers; a line that is not one JSON
    object is a `DataError` naming it (a JSON array's first line says the file is not JSON Lines)."""
    array = None  # whether the file opens as a JSON array, known at its first character
    for i, line in _text_lines(path):
        if not line.strip():
            continue
        if array is None:
            array = JSON_LINES if line.lstrip().startswith("[") else ""
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"line {i}: invalid JSON ({e.msg}){array}", str(path)) from None
        if array and isinstance(obj, list):
            raise DataError(f"line {i}: a JSON array{array}", str(path))
        if not isinstance(obj, dict):
            raise DataError(f"line {i}: a record must be an object with `text`, got {type(obj).__name__}", str(path))
        yield i, obj


def _jsonl_records(path: Path) -> Iterator[Record]:
    """Each line's record, validated as it is read; `_NotRecords` when the first object has no `text` key."""
    first = True
    for i, obj in _json_objects(path):
        if "text" not in obj:
            if first:
                raise _NotRecords
            raise DataError(f"line {i}: no `text` key (keys: {', '.join(map(str, obj)) or 'none'})", str(path))
        first = False
        yield record_from_mapping(obj, f"{path}: line {i}")


def load_jsonl(path: Path, text_fields: list[str] | None = None, label_field: str = "label") -> Sequence[Record]:
    """One record per line: `{"text", "spans"?, "label"?}`, read a line at a time into arrays (`RecordColumns`);
    with `text_fields` set, or when the objects have no `text` key, the objects are rows of a table whose columns
    are their keys (`table_records`)."""
    if text_fields is None and label_field == "label":
        try:
            return record_columns(_jsonl_records(path))
        except _NotRecords:
            pass
    lines = list(_json_objects(path))
    with_text = sum("text" in obj for _, obj in lines)
    if text_fields is None and 0 < with_text < len(lines):  # some objects have the key: the others are broken
        i, obj = next((i, obj) for i, obj in lines if "text" not in obj)
        raise DataError(f"line {i}: no `text` key (keys: {', '.join(map(str, obj)) or 'none'})", str(path))
    keys = list(dict.fromkeys(key for _, obj in lines for key in obj))
    return table_records([obj for _, obj in lines], keys, str(path), text_fields, label_field,
                         [f"line {i}" for i, _ in lines], column="key")


def _text_columns(rows: list[dict], columns: list[str], text_fields: list[str] | None, where: str,
                  column: str = "column") -> list[str]:
    """The columns a table's text is in: `text_fields`, else `text`, else its one column holding text. `column` is
    what the messages call a column (a JSONL object's "key")."""
    if text_fields:
        missing = next((f for f in text_fields if f not in columns), None)
        if missing is not None:
            raise DataError(f"no {column} {missing!r} ({column}s: {', '.join(columns)}); name the text {column}(s) "
                            "with --set data.text_fields=[NAME]", where)
        return list(text_fields)
    if "text" in columns:
        return ["text"]
    texts = [c for c in columns if c not in ("label", "spans")
             and any(isinstance(r.get(c), str) and r[c].strip() for r in rows)
             and not all(_is_number(r.get(c)) for r in rows if r.get(c) not in (None, ""))]
    if len(texts) != 1:
        found = (f"{column}s {', '.join(texts)} hold text" if texts
                 else f"no {column} holds text ({column}s: {', '.join(columns) or 'none'})")
        raise DataError(f"{found} and none is named `text`: name the text {column}(s) with "
                        "--set data.text_fields=[NAME]", where)
    return texts


def _is_number(value: Any) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    try:
        float(str(value))
        return True
    except ValueError:
        return False


def table_records(rows: list[dict], columns: list[str], where: str, text_fields: list[str] | None = None,
                  label_field: str = "label", row_names: list[str] | None = None, column: str = "column"
                  ) -> list[Record]:
    """One record per row whose text is not blank: the text columns (`_text_columns`) joined by a newline, the
    `label_field` column as an integer class label, and `spans` (when the text is the one `text` column). Messages
    name a row by `row_names` (default `row <i>`) and a column as `column`."""
    fields = _text_columns(rows, columns, text_fields, where, column)
    names = row_names or [f"row {i}" for i in range(len(rows))]
    records = []
    for name, row in zip(names, rows):
        parts = [row.get(f) for f in fields]
        bad = next((f for f, v in zip(fields, parts) if v is not None and not isinstance(v, str)), None)
        if bad is not None:
            raise DataError(f"{name}: {column} {bad!r} holds {type(row[bad]).__name__}, not text", where)
        text = "\n".join(p for p in parts if p)
        if not text.strip():
            continue
        label = row.get(label_field)
        if isinstance(label, str):  # CSV cells are strings
            label = int(label) if label.strip().lstrip("-").isdigit() else (None if not label.strip() else label)
        spans = row.get("spans") if fields == ["text"] else None
        records.append(record_from_mapping({"text": text, "spans": spans, "label": label}, f"{where}: {name}"))
    return records


def load_parquet(path: Path, text_fields: list[str] | None = None, label_field: str = "label") -> list[Record]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise DataError(f"not a readable Parquet file ({type(e).__name__})", str(path)) from None
    return table_records(table.to_pylist(), table.column_names, str(path), text_fields, label_field)


def load_csv(path: Path, text_fields: list[str] | None = None, label_field: str = "label") -> list[Record]:
    """A CSV (`.csv`) or TSV (`.tsv`, `.tab`) table with a header row; quoted cells may span lines."""
    import csv
    import io

    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""), delimiter=delimiter)
    try:
        rows = list(reader)
    except csv.Error as e:
        raise DataError(f"line {reader.line_num}: not a valid {'CSV' if delimiter == ',' else 'TSV'} table ({e})",
                        str(path)) from None
    columns = [c for c in reader.fieldnames or [] if c is not None]
    if not columns:
        raise DataError("no header row", str(path))
    if any(None in row for row in rows):  # more cells than the header names
        line = next(i for i, row in enumerate(rows, 2) if None in row)
        raise DataError(f"row {line - 1} has more cells than the header's {len(columns)} columns", str(path))
    return table_records(rows, columns, str(path), text_fields, label_field)


def load_text(path: Path) -> list[Record]:
    """Plain text: one record per blank-line-separated block when the file has a blank line (dialogs, notes),
    else one record per line; surrounding blank lines are dropped."""
    text = _read_text(path).replace("\r\n", "\n")
    blocks = [b.strip("\n") for b in text.split("\n\n")] if "\n\n" in text.strip("\n") else text.split("\n")
    return [record_from_mapping({"text": b}, str(path)) for b in blocks if b.strip()]


LOADERS: dict[str, Callable[..., Sequence[Record]]] = {
    ".jsonl": load_jsonl,
    ".json": load_jsonl,
    ".parquet": load_parquet,
    ".csv": load_csv,
    ".tsv": load_csv,
    ".tab": load_csv,
    ".txt": lambda path, *_: load_text(path),
    ".text": lambda path, *_: load_text(path),
}


def load_records(path: str | Path, text_fields: list[str] | None = None, label_field: str = "label"
                 ) -> Sequence[Record]:
    """Load a data file by its extension (unknown extensions are read as plain text); a table's text columns are
    `text_fields` (default: `text`, else its one text column)."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", str(path))
    if path.is_dir():
        raise DataError("a folder, not a file: --data takes one file (JSONL, CSV, TSV, Parquet or text); a folder of "
                        "Parquet, Arrow or JSON(L) shards is read with data.source=hf, data.hf_name=FOLDER", str(path))
    if not path.is_file():
        raise DataError("not a file", str(path))
    records = LOADERS.get(path.suffix.lower(), LOADERS[".txt"])(path, text_fields, label_field)
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
DATA_FILE_BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".json": "json", ".jsonl": "json"}


def hf_local_path(name: str) -> Path | None:
    """The local dataset that `data.hf_name` names (an existing path, or one written as a path: absolute, `./`,
    `../`, `~`), or None for a hub name such as `glue/sst2`."""
    path = Path(name).expanduser()
    return path if path.exists() or path.is_absolute() or name.startswith((".", "~")) else None


def hf_text_fields(name: str) -> tuple[str, ...]:
    """The columns a dataset's text is in when `data.text_fields` is not set: the known hub datasets' own, else
    `text`."""
    return HF_TEXT_FIELDS.get("wikitext" if name.startswith("wikitext") else name, ("text",))


def _load_local(path: Path) -> Any:
    """A `save_to_disk` folder (a DatasetDict, or a Dataset as its one split `train`), or Parquet / Arrow / JSON(L)
    data files: one file (split `train`) or a folder of shards whose names give the splits (`train-*.parquet`,
    `validation/...`; one split `train` when they do not)."""
    import datasets

    if not path.exists():
        raise DataError("dataset folder or file not found", str(path))
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = datasets.load_from_disk(str(path))
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    if path.is_dir():
        return datasets.load_dataset(str(path))
    builder = DATA_FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise DataError(f"not a dataset: expected a save_to_disk folder or a file ending in "
                        f"{', '.join(DATA_FILE_BUILDERS)}", str(path))
    return datasets.load_dataset(builder, data_files=str(path))


def _load_hub(name: str) -> Any:
    """A hub dataset by name: `wikitext-*` and `glue/<task>` by their canonical names, any other as a repo id."""
    import datasets

    if name.startswith("wikitext"):
        return datasets.load_dataset("wikitext", name)
    if name.startswith("glue/"):
        return datasets.load_dataset("glue", name.split("/", 1)[1])
    return datasets.load_dataset(name)


def load_hf(name: str) -> dict[str, Any]:
    """Every split of a HF `datasets` dataset, by split name: a hub name (`wikitext-2-raw-v1`, `glue/sst2`, ...;
    needs the hub) or a local path (`hf_local_path`). Read its records with `hf_records`."""
    try:
        import datasets
    except ImportError:
        raise UserError("HF datasets need the `datasets` package (pip install datasets)") from None
    datasets.disable_progress_bars()  # a trial shows its own progress
    local = hf_local_path(name)
    try:
        return dict(_load_local(local) if local is not None else _load_hub(name))
    # Unreadable or empty files and folders raise many types (an empty saved split: IndexError); one meaning.
    except (OSError, ValueError, LookupError, datasets.exceptions.DatasetsError) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        raise DataError(f"cannot load the dataset: {message[:300]}", name) from None


def hf_records(split: Any, text_fields: list[str] | tuple[str, ...], label_field: str, where: str) -> list[Record]:
    """One split's records: the `text_fields` columns joined by a newline (rows whose text is blank are skipped,
    as wikitext's empty lines), with the `label_field` column as the class label when the split has one."""
    columns = list(split.column_names)
    missing = next((f for f in text_fields if f not in columns), None)
    if missing is not None:
        raise DataError(f"no text column {missing!r} (columns: {', '.join(columns)}); set data.text_fields", where)
    has_label = label_field in columns
    rows = split.select_columns([*text_fields, *([label_field] if has_label else [])]).to_dict()
    records = []
    for i in range(len(split)):
        parts = [rows[f][i] for f in text_fields]
        bad = next((f for f, v in zip(text_fields, parts) if not isinstance(v, str)), None)
        if bad is not None:
            raise DataError(f"row {i}: column {bad!r} holds {type(rows[bad][i]).__name__}, not text", where)
        text = "\n".join(parts).strip()
        if text:
            label = rows[label_field][i] if has_label else None
            records.append(record_from_mapping({"text": text, "label": label}, f"{where}: row {i}"))
    if not records:
        raise DataError("no records (the split is empty or every text is blank)", where)
    return records
