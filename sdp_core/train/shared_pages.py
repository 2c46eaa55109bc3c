"""The pages of shared rows that a training step has read, unmapped from the process after the step.

A sweep's trials read their rows as views of Ray's object store (`tensors`: shared memory, stored once per node).
Each step copies its batch's rows out of them (`LMData.subset`), and the kernel maps into the process the pages it
read and, around each, up to 64 KiB more (fault-around): a Poisson batch scatters its rows over all of them, so a
trial's resident memory grew step by step towards the whole rows' size (measured: a trial at 3 M records peaked at
1.5-2.0 GB, 0.7 GB of it its own; `docs/performance.md`). Unmapping those pages once the process has mapped
more than `training.shared_rows_mb` keeps what a trial holds to its own memory, that bound and one batch's pages,
whatever the data's size; the data stays where it is, in the shared memory, and a later read maps it in again
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


STATUS = Path("/proc/self/status")


def mapped_shared_mb() -> float:
    """The shared memory this process has mapped and resident (`RssShmem`: Ray's object store is a file in
    /dev/shm), in MB; 0 where `/proc` does not say."""
    if not STATUS.exists():
        return 0.0
    for line in STATUS.read_text().splitlines():
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _address_range(t: torch.Tensor) -> tuple[int, int]:
    """[start, end) of a contiguous tensor's bytes in this process's memory."""
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def in_shared_memory(tensors: Iterable[torch.Tensor | None]) -> list[torch.Tensor]:
    """Those of `tensors` (on the CPU, contiguous, not empty) that lie inside one shared mapping of this process,
    from one reading of `/proc/self/maps`: what `unmap_pages` may be given for as long as they live."""
    shared = shared_mappings()
    found = []
    for t in tensors:
        if t is None or t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
            continue
        start, end = _address_range(t)
        if any(low <= start and end <= high for low, high in shared):
            found.append(t)
    return found


def unmap_pages(shared: Iterable[torch.Tensor]) -> int:
    """Unmap from this process the whole pages of each tensor, which must lie in shared memory (`in_shared_memory`:
    on this process's own memory the call would zero them), leaving their contents there. The bytes given back."""
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
