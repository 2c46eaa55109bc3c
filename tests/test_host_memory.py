"""A training process keeps freed host memory for its next step (`train.host_memory`): a large tensor allocated
again after it was freed faults no pages in, where glibc's defaults unmap it and fault every page in again. Page
faults are the kernel's count (`getrusage`), not the code's; each side runs in a fresh interpreter, since the
switch is process-wide."""

import json
import platform
import subprocess
import sys

import pytest

# 64 MiB of fp32, allocated, written and freed six times; the faults of the last three allocations (the kept
# heap settles after two: the first grows it, the second's aligned request does not fit the first's freed chunk)
PROGRAM = """
import json, resource, sys
import torch
from sdp_core.train.host_memory import keep_freed_host_memory
applied = keep_freed_host_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(16 << 20)
    t.fill_(1.0)
    del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults[3:]}))
"""
PAGES = (64 << 20) // 4096  # what one 64 MiB allocation faults in, page by page


def _faults(setting: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROGRAM, setting], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_freed_host_memory_is_reused_without_faulting_its_pages_in_again():
    system, kept = _faults("system"), _faults("keep")
    assert kept["applied"] is True
    # glibc's defaults: every allocation of 64 MiB is an mmap of its own, each of its pages faulted in afresh
    assert min(system["faults"]) > PAGES / 2
    # kept: later allocations reuse the heap's pages
    assert max(kept["faults"]) < 64
