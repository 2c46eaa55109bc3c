"""Host memory that a training process keeps for its next step (`training.keep_host_memory`).

glibc's malloc serves every allocation above its mmap threshold (128 KiB, raised dynamically up to 32 MiB) with an
`mmap` of its own, and `free` unmaps it; it also trims the heap's top back to the kernel past 128 KiB. A step on the
CPU allocates and frees the same large tensors every time (activations, logits and their log-softmax, a layer's
per-record gradients), so each step faults every page of them in again, zero-filled by the kernel: measured on
gpt2-tiny 32 × 128, 65,000-120,000 page faults a step, a quarter to a third of its CPU time in the kernel
(`docs/performance.md`). Keeping freed memory in the heap for reuse is what the allocators recommended for CPU
training (jemalloc, tcmalloc) do; glibc does it when both thresholds are at their maximum (`mallopt(3)`).

The opposite, for a process past its peak that hands what it made to another (a sweep's preparation task, before
it writes the prepared data to the object store): `give_back_freed_host_memory` returns the heap's free pages to
the kernel (`malloc_trim(3)`), so that what the process holds while it writes is what it still uses.

A process-wide switch, like TF32 (`precision.use_tf32`): each training process (the trial's, each Ray Train
worker's) sets it once. What it costs is that the process's resident memory stays at its peak between steps
instead of falling back; the peak itself moves little (fragmentation only). Off glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
LARGEST = 2**31 - 1  # mallopt's value is an int


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None


def keep_freed_host_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse: no allocation under 2 GiB gets an `mmap` of its own, and
    the heap is never trimmed (`mallopt(M_MMAP_THRESHOLD)`, `mallopt(M_TRIM_THRESHOLD)`). Whether it applied."""
    libc = _glibc()
    if libc is None:
        return False
    return all(libc.mallopt(option, ctypes.c_int(LARGEST)) == 1 for option in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD))


def give_back_freed_host_memory() -> bool:
    """Return the free pages of glibc's heap to the kernel (`malloc_trim(0)`: the top and, since glibc 2.8, whole
    free pages inside it). Whether any were returned; nothing off glibc."""
    libc = _glibc()
    return libc is not None and libc.malloc_trim(0) == 1
