"""A CPU's privacy randomness, side by side: torch's generator (a Mersenne Twister, as the private step drew its noise
on a CPU before `randomness.Keystream`) against the AES-256-CTR keystream, for the Gaussian noise of a step and the
Poisson sampling of a batch.

Each row times one draw of `--sizes` entries (median of `--repeats`, after one untimed draw), with torch's intra-op
threads at each of `--threads`, and gives the ratio keystream / torch. gpt2-tiny has 0.9 M trainable parameters, a
CPU's noise block is 2²² entries (`noise.noise_block`); secure mode (`privacy.secure_mode`) sums four draws. The
process keeps freed host memory for reuse, as a trial's does (`training.keep_host_memory`).
Run: `python -m benchmarks.noise_draw [--sizes 65536,1048576] [--threads 1,2]`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
from rich.console import Console
from rich.table import Table

from sdp_core.train.host_memory import keep_freed_host_memory
from sdp_core.train.randomness import Keystream, TorchNoise


def median_ms(draw: Callable[[], object], repeats: int) -> float:
    draw()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        draw()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="65536,1048576,4194304,16777216", help="comma-separated entries per draw")
    parser.add_argument("--threads", default="1,2", help="comma-separated: torch's intra-op threads")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--rate", type=float, default=0.032, help="Poisson sampling rate q")
    args = parser.parse_args()

    keep_freed_host_memory()
    torch_source, keystream = TorchNoise(torch.Generator().manual_seed(0)), Keystream.from_entropy()
    table = Table(title="One draw on the CPU, median ms (ratio: keystream / torch's Mersenne Twister)")
    for column in ("draw", "entries", "threads", "torch", "keystream", "ratio"):
        table.add_column(column, justify="left" if column == "draw" else "right")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for size in (int(s) for s in args.sizes.split(",")):
            rows: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
                ("noise", lambda: torch_source.normal(size, 1.0), lambda: keystream.normal(size, 1.0)),
                ("noise, secure mode", lambda: torch_source.normal(size, 1.0, True),
                 lambda: keystream.normal(size, 1.0, True)),
                (f"Poisson sample, q = {args.rate}", lambda: torch.rand(size, generator=torch_source.generator)
                 < args.rate, lambda: keystream.bernoulli(size, args.rate)),
            ]
            for name, old, new in rows:
                before, after = median_ms(old, args.repeats), median_ms(new, args.repeats)
                table.add_row(name, f"{size:,}", str(threads), f"{before:.3f}", f"{after:.3f}",
                              f"{after / before:.2f}×")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
