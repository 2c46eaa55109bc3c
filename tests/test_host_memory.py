"""A CPU training process keeps freed host memory for its next step (`training.keep_host_memory`, set with the
process's other switches, `StepSettings.set_process_switches`): a large tensor's memory stays the process's once it
is freed, for the next step's tensors to reuse, where glibc's defaults give it back to the kernel (and the next
step faults every page of it in again). Resident memory is the kernel's count (/proc/self/statm), not the code's."""

import inspect
import platform
import subprocess
import sys

import pytest
import torch

from sdp_core.train.loop import StepSettings


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_a_cpu_training_process_keeps_freed_memory_for_its_next_step():
    # glibc's defaults, in a fresh interpreter (the switch is process-wide): 64 MiB written is an mmap of its own,
    # which free gives back to the kernel
    system = subprocess.run([sys.executable, "-c", "import numpy as np\n" + inspect.getsource(resident_mib)
                             + "a = np.ones(16 << 20, np.float32); written = resident_mib(); del a\n"
                               "print(written - resident_mib())"],
                            capture_output=True, text=True, check=True)
    assert float(system.stdout) > 56
    # this process, switched as a CPU trial's process is: the freed tensor's pages stay (whatever earlier tests
    # left in the heap, a 64 MiB allocation is over glibc's largest dynamic threshold, so unswitched it is unmapped)
    StepSettings(keep_host_memory=True).set_process_switches(torch.device("cpu"))
    t = torch.empty(16 << 20)
    t.fill_(1.0)
    written = resident_mib()
    del t
    assert written - resident_mib() < 8


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_a_process_past_its_peak_gives_its_freed_heap_back():
    """`give_back_freed_host_memory` (a sweep's preparation task, before it writes what it prepared): 200 MB of small
    objects freed stay in glibc's heap, and come back to the kernel when it is asked, in a fresh interpreter."""
    code = ("from sdp_core.train.host_memory import give_back_freed_host_memory\n" + inspect.getsource(resident_mib)
            + "import gc\nkept = [bytes(1000) for _ in range(2000)]\n"  # a live object above the freed ones
              "held = [bytes(1000) for _ in range(200_000)]; kept.append(bytes(1000)); del held; gc.collect()\n"
              "freed = resident_mib(); print(give_back_freed_host_memory(), freed - resident_mib())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True" and float(out[1]) > 150
