"""This process's own process tree (its Ray head, raylet and workers), read from /proc: for memory sampling
(benchmarks/load_sweep.py) and for killing our own Ray workers in fault tests (tests/test_faults.py)."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below `pid`."""
    parents = {}
    for name in os.listdir("/proc"):
        try:
            parents[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # not a process, or one that just ended
    found, frontier = [], {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier}
        found += frontier
    return found


def _status_mb(pid: int, key: str) -> float:
    """A memory line (`VmRSS`, `VmHWM`, `RssAnon`) of one process's /proc status in MB (0 if it has ended)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mb(pid: int) -> float:
    """Resident memory of one process (0 if it has ended)."""
    return _status_mb(pid, "VmRSS")


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of one process so far (the kernel's high-water mark; 0 if it has ended)."""
    return _status_mb(pid, "VmHWM")


def private_mb(pid: int) -> float:
    """Resident memory of one process's own (anonymous) pages, without the shared memory it maps (Ray's object
    store) or its files (0 if it has ended)."""
    return _status_mb(pid, "RssAnon")
