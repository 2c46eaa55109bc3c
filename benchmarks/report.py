"""Report generation time for a synthetic sweep of 500 trials (target: under 10 s).

Writes a synthetic sweep folder (every trial state, ledgers, canaries, detector statistics) into a temporary
folder, then times `build_report` on it, in-process after imports (imports are timed apart). Wall and CPU time
are both shown: on a shared machine CPU time is the stable one.
Run: `python -m benchmarks.report [--trials 500] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

start_wall, start_cpu = time.perf_counter(), time.process_time()
from sdp_core.report import build_report  # noqa: E402  (timed: plotly, matplotlib, pandas, the privacy layer)
from tests.synthetic_sweep import write_synthetic_sweep  # noqa: E402

IMPORT_WALL, IMPORT_CPU = time.perf_counter() - start_wall, time.process_time() - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = write_synthetic_sweep(Path(tmp) / "sweep", args.trials)
        times = []
        for _ in range(args.repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            out = build_report(sweep)
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    best_wall, best_cpu = min(times)
    print(f"report of {args.trials} trials: {best_wall:.2f} s wall, {best_cpu:.2f} s CPU (best of {args.repeat}); "
          f"imports {IMPORT_WALL:.2f} s wall, {IMPORT_CPU:.2f} s CPU; {size / 1e6:.1f} MB written")


if __name__ == "__main__":
    main()
