"""The pages of shared rows that a training step has read, unmapped from the process after the step.

A sweep's trials read their rows as views of Ray's object store (`tensors`: shared memory, stored once per node).
Each step copies its batch's rows out of them (`LMData.subset`), and the kernel maps into the process the pages it
read and, around each, up to 64 KiB more (fault-around): a Poisson batch scatters its rows over all of them, so a
trial's resident memory grew step by step towards the whole rows' size (measured: a trial at 3 M records peaked at
1.5-2.0 GB, 0.7 GB of it its own; `docs/performance.md`). Unmapping those pages after each step keeps what a
trial holds to its own memory and one batch's pages, whatever the data's size; the data stays where it is, in the
shared memory, and a later read maps it in again.

`madvise(MADV_DONTNEED)` does exactly that for a *shared* mapping (`madvise(2)`: later accesses "repopulate the
memory contents from the up-to-date contents of the underlying mapped file"); on a private anonymous mapping it
would zero the memory instead, so only ranges that `/proc/self/maps` shows inside a shared mapping are given back,
and nothing is done elsewhere (rows a trial prepared itself, in its own heap; a system without `/proc`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
from pathlib import Path
from typing import Iterable

import torch

MAPS = Path("/proc/self/maps")


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


def unmap_read_pages(tensors: Iterable[torch.Tensor | None]) -> int:
    """Unmap from this process the whole pages of each CPU tensor that lies in a shared mapping (`MADV_DONTNEED`),
    leaving their contents in the shared memory; tensors elsewhere are left alone. The bytes given back."""
    advise = _madvise()
    if advise is None:
        return 0
    shared = shared_mappings()  # read on each call: a freed mapping's addresses may be reused by a private one
    page, done = mmap.PAGESIZE, 0
    for t in tensors:
        if t is None or t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
            continue
        start = t.data_ptr()
        end = start + t.numel() * t.element_size()
        first, last = -(-start // page) * page, end // page * page  # whole pages inside the tensor only
        inside = any(low <= start and end <= high for low, high in shared)
        if last > first and inside and advise(first, last - first, mmap.MADV_DONTNEED) == 0:
            done += last - first
    return done
