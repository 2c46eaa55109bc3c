"""The pages of shared rows that a training step reads, unmapped from the process as it reads them.

A sweep's trials read their rows as views of Ray's object store (`tensors`: shared memory, stored once per node).
Each step copies its batch's rows out of them (`LMData.subset`), and the kernel maps into the process the pages it
read and, around each, up to 64 KiB more (fault-around): a Poisson batch scatters its rows over all of them, so a
trial's resident memory grew step by step towards the whole rows' size (measured: a trial at 3 M records peaked at
1.5-2.0 GB, 0.7 GB of it its own; `docs/performance.md`). A batch is read a piece at a time (`PIECE_ROWS`), and
unmapping the pages after a piece once the process has mapped `training.shared_rows_mb` more than at its phase's
start (`mapped_files_mb`) keeps what a trial holds to its own memory, that bound and one piece's pages, whatever
the data's and the batch's size; the data stays where it is, in the object store, and a later read maps it in again
(a fault per 64 KiB read, which is why rows that fit under the bound stay mapped).

`madvise(MADV_DONTNEED)` does exactly that for a *shared* mapping (`madvise(2)`: later accesses "repopulate the
memory contents from the up-to-date contents of the underlying mapped file"); on a private anonymous mapping it
would zero the memory instead, so only tensors that `/proc/self/maps` shows inside a shared mapping are given back
(`in_shared_memory`, once a phase), and nothing is done elsewhere (rows a trial prepared itself, in its own heap; a
system without `/proc`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
from pathlib import Path
from typing import Iterable, TypeAlias

import numpy as np
import torch

MAPS = Path("/proc/self/maps")

PIECE_ROWS = 256
"""Rows of a batch copied out of shared rows between two checks of what the process has mapped (`LMData.subset`):
a row read maps up to 64 KiB of each array around it, so a piece maps at most 16 MiB of each, whatever the batch's
size (a Poisson batch of thousands of records scattered over millions of rows mapped about 1 GB at once)."""


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    advise = getattr(ctypes.CDLL(name, use_errno=True), "madvise", None) if name else None
    if advise is None or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    advise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return advise


def shared_mappings() -> list[tuple[int, int]]:
    """[start, end) of every shared mapping of this process (`s` in its permissions in `/proc/self/maps`)."""
    if not MAPS.exists():
        return []
    ranges = []
    for line in MAPS.read_text().splitlines():
        addresses, permissions = line.split()[:2]
        if permissions.endswith("s"):
            start, end = (int(a, 16) for a in addresses.split("-"))
            ranges.append((start, end))
    return ranges


STATUS = Path("/proc/self/status")


def mapped_files_mb() -> float:
    """The pages of files and shared memory this process has mapped and resident (`RssFile` + `RssShmem`), in MB;
    0 where `/proc` does not say. Ray's object store is a file in /dev/shm (shared memory) or, where that is short,
    on disk (file pages): a phase compares this with its value at its start (`train.loop.train_phase`), which holds
    the libraries' pages."""
    if not STATUS.exists():
        return 0.0
    fields = dict(line.split(":", 1) for line in STATUS.read_text().splitlines() if ":" in line)
    return sum(int(fields[k].split()[0]) for k in ("RssFile", "RssShmem") if k in fields) / 1024


Array: TypeAlias = "torch.Tensor | np.ndarray"


def _address_range(a: Array) -> tuple[int, int]:
    """[start, end) of a contiguous tensor's or array's bytes in this process's memory."""
    if isinstance(a, np.ndarray):
        start = a.__array_interface__["data"][0]
        return start, start + a.nbytes
    start = a.data_ptr()
    return start, start + a.numel() * a.element_size()


def _plain_bytes(a: Array | None) -> bool:
    """Whether `a` is contiguous, not empty, in host memory: bytes at one address range (`_address_range`)."""
    if isinstance(a, np.ndarray):
        return a.flags.c_contiguous and a.size > 0
    return a is not None and a.device.type == "cpu" and a.is_contiguous() and a.numel() > 0


def in_shared_memory(arrays: Iterable[Array | None]) -> list[Array]:
    """Those of `arrays` (tensors on the CPU or numpy arrays, contiguous, not empty) that lie inside one shared
    mapping of this process, from one reading of `/proc/self/maps`: what `unmap_pages` may be given for as long as
    they live."""
    shared = shared_mappings()
    found = []
    for a in arrays:
        if not _plain_bytes(a):
            continue
        start, end = _address_range(a)
        if any(low <= start and end <= high for low, high in shared):
            found.append(a)
    return found


def unmap_pages(shared: Iterable[Array]) -> int:
    """Unmap from this process the whole pages of each tensor or array, which must lie in shared memory
    (`in_shared_memory`: on this process's own memory the call would zero them), leaving their contents there. The
    bytes given back."""
    advise = _madvise()
    if advise is None:
        return 0
    page, done = mmap.PAGESIZE, 0
    for t in shared:
        start, end = _address_range(t)
        first, last = -(-start // page) * page, end // page * page
        if last > first and advise(first, last - first, mmap.MADV_DONTNEED) == 0:  # whole pages inside it only
            done += last - first
    return done


def unmap_shared_mappings() -> int:
    """Unmap the pages of every shared mapping of this process (`shared_mappings`: Ray's object store, where a
    process that wrote an object mapped every page of it), leaving their contents where they are. The bytes given
    back."""
    advise = _madvise()
    if advise is None:
        return 0
    return sum(end - start for start, end in shared_mappings() if advise(start, end - start, mmap.MADV_DONTNEED) == 0)
