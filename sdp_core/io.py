"""Atomic file writes and YAML/JSON helpers: a crash never leaves a half-written file."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from sdp_core.errors import UserError

CACHE_ENV = "SDP_CACHE_DIR"


def cache_root() -> Path:
    """`$SDP_CACHE_DIR`, else `~/.cache/sdp-sweep`: an absolute, per-user place, so Ray trials (each in its own
    working directory) share what one of them computed (detections, tokenizers)."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).resolve() if root else Path.home() / ".cache" / "sdp-sweep"


def fingerprint(texts: Iterable[str]) -> str:
    """A digest of the texts in order (length-prefixed, so boundaries between texts count)."""
    h = hashlib.blake2b(digest_size=16)
    for t in texts:
        data = t.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def text_digest(text: str) -> bytes:
    """16 bytes that stand for a text (blake2b): how detection knows a text it has seen (`detectors.cache`, the
    file's shards of `sweep.pipeline`) without holding it."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` through a temp file in the same directory and a rename."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise write_error(e, path) from e
    return path


def write_error(e: OSError, path: str | os.PathLike) -> UserError:
    """A failed write as one line; a full disk says so (nothing half-written is left behind)."""
    reason = "no space left on device (disk full)" if e.errno == errno.ENOSPC else (e.strerror or str(e))
    return UserError(f"cannot write: {reason}", str(path))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Build a directory in a sibling temp folder; it appears at `path` complete or not at all."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError("exists and is not a directory", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except OSError:
                os.replace(old, path)  # the previous folder stays in place
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(e, path) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_yaml(path: str | os.PathLike) -> Any:
    """Load a YAML file; a missing file or a syntax error is a one-line UserError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", str(path)) from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as e:
        raise UserError(f"cannot read as UTF-8 text ({type(e).__name__})", str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        loc = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise UserError(f"{loc}YAML syntax error: {problem}", str(path)) from None
