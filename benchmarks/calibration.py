"""Calibration and ε-evaluation time of every accountant on a 10,000-step heterogeneous schedule.

The schedule is 100 segments of 100 DP-SGD steps at q = 256/60000, each with its own σ multiplier in
[0.7, 1.5] (ATDP-like), calibrated to ε = 3 at δ = 1e-5. Every accountant starts cold (no cached RDP curve).
Wall and CPU time are both shown: on a shared machine CPU time is the stable one.
Run: `python -m benchmarks.calibration [--accountants rdp,pld,prv] [--segments 100]`.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from typing import Callable, Iterator
from unittest import mock

import numpy as np
from rich.console import Console
from rich.table import Table

from sdp_core.privacy import ACCOUNTANTS, calibrate_noise, get_accountant, schedule_events
from sdp_core.privacy.accountants.rdp import sampled_gaussian_rdp

TARGET, DELTA, STEPS = 3.0, 1e-5, 10_000


@contextmanager
def counted_evaluations(name: str) -> Iterator[Callable[[], int]]:
    """Count the ε evaluations of accountant `name` inside the block."""
    cls, calls = ACCOUNTANTS[name], [0]
    original = cls.epsilon

    def epsilon(self, events, delta):
        calls[0] += 1
        return original(self, events, delta)

    with mock.patch.object(cls, "epsilon", epsilon):
        yield lambda: calls[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accountants", default=",".join(sorted(ACCOUNTANTS)))
    parser.add_argument("--segments", type=int, default=100, help="distinct σ multipliers (steps are split evenly)")
    args = parser.parse_args()
    multipliers = np.random.default_rng(0).uniform(0.7, 1.5, args.segments)
    shape = [(256 / 60000, STEPS // args.segments, float(m)) for m in multipliers]
    get_accountant("prv").epsilon(schedule_events(shape[:1], 1.0), DELTA)  # pay Opacus' (torch) import up front

    table = Table(title=f"{STEPS:,} steps in {args.segments} segments of distinct σ; target ε = {TARGET} at δ = {DELTA}")
    columns = ("accountant", "ε evaluation (s)", "calibration (s)", "calibration CPU (s)", "ε evaluations", "σ scale", "ε spent")
    for column in columns:
        table.add_column(column, justify="right")
    for name in args.accountants.split(","):
        accountant = get_accountant(name)
        sampled_gaussian_rdp.cache_clear()
        start = time.perf_counter()
        accountant.epsilon(schedule_events(shape, 1.0), DELTA)
        evaluation = time.perf_counter() - start

        sampled_gaussian_rdp.cache_clear()
        with counted_evaluations(name) as evaluations:
            start, cpu = time.perf_counter(), time.process_time()
            scale = calibrate_noise(shape, TARGET, DELTA, name)
            calibration, cpu = time.perf_counter() - start, time.process_time() - cpu
            count = evaluations()
        spent = accountant.epsilon(schedule_events(shape, scale), DELTA)
        table.add_row(name, f"{evaluation:.3f}", f"{calibration:.3f}", f"{cpu:.3f}", str(count), f"{scale:.5f}", f"{spent:.5f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
