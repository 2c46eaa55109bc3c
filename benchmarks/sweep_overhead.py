"""What Ray Tune + Optuna cost around the trials: a sweep's trials run serially in one process vs as a Ray sweep
(concurrency 1 reporting progress after every step, concurrency 1 at the default report interval, concurrency 2),
as wall-time ratios, and Ray's cold start beside them.

The trials are the sweep file's own (default: the quickstart), one per mechanism with the base settings (the search
space is pinned to the base learning rate), identical in every mode: same configs, same seeds (sweep seed + n). The
data is prepared once first, untimed, as a sweep does before its trials, so every mode reads the same warm caches.
The serial run uses as many torch threads as a trial has CPUs (`resources.cpu`; Ray sets a trial's thread count
from it), so concurrency 1 compares the same compute.
Usage: python -m benchmarks.sweep_overhead [--sweep sweeps/quickstart.yaml] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

MODES = {  # label: (concurrency, report_interval; None = the sweep's default)
    "Ray sweep, concurrency 1, report every step": (1, 0.0),
    "Ray sweep, concurrency 1, default interval": (1, None),
    "Ray sweep, concurrency 2, default interval": (2, None),
}


def pinned_sweep(path: str, overrides: list[str]):
    """The sweep at `path` with one trial per mechanism (the sweep enqueues each mechanism first), every searched
    value pinned to the base's (a one-value space)."""
    from sdp_core.config import parse_model
    from sdp_core.config.sweep import SweepConfig
    from sdp_core.sweep.preflight import resolve_sweep

    cfg = resolve_sweep(path, ["keep_models=none", *overrides])
    lr = cfg.base.training.learning_rate
    data = cfg.model_dump(mode="json") | {"num_trials": len(cfg.mechanisms), "search_space": {
        "parameters": {"training.learning_rate": {"type": "choice", "values": [lr]}}}}
    return parse_model(SweepConfig, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="sweeps/quickstart.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    os.environ["SDP_CACHE_DIR"] = str(work / "cache")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # keep Tune's own reporter out of the table

    import torch

    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.sweep.space import MECHANISM_PARAM, trial_config_dict
    from sdp_core.preparation import data_key
    from sdp_core.sweep.prepare import prepare_shared
    from sdp_core.trial import run_trial

    base = pinned_sweep(args.sweep, args.overrides)
    lr = {"training.learning_rate": base.base.training.learning_rate}
    configs = [parse_model(TrialConfig, trial_config_dict(base, lr | {MECHANISM_PARAM: m}, n))
               for n, m in enumerate(base.mechanisms)]
    prepared = prepare_shared(configs)  # untimed: what a sweep does once before its trials
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(base.resources.cpu)))
    start = time.perf_counter()
    for cfg in configs:
        run_trial(cfg, prepared=prepared[data_key(cfg)])
    times = {"serial, one process": time.perf_counter() - start}
    torch.set_num_threads(threads)

    import ray

    from sdp_core.sweep.driver import run_sweep
    from sdp_core.sweep.store import SweepStore

    start = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    cold_start = time.perf_counter() - start
    for mode, (concurrency, interval) in MODES.items():
        update = {"concurrency": concurrency} | ({"report_interval": interval} if interval is not None else {})
        sweep = base.model_copy(update=update)
        store = SweepStore(work / f"ray-{len(times)}")
        store.create(sweep)
        start = time.perf_counter()
        rows = run_sweep(sweep, sweep.search_space, store)
        times[mode] = time.perf_counter() - start
        assert len(rows) == len(configs) and all(r["state"] == "finished" for r in rows.values()), rows
    ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)

    serial = times["serial, one process"]
    print(f"\n{len(configs)} trials of {args.sweep} ({', '.join(c.mechanism.name for c in configs)}), "
          f"{len(os.sched_getaffinity(0))} CPUs, {base.resources.cpu:g} per trial (serial: as many torch threads); "
          f"default report interval {base.report_interval:g} s")
    print(f"{'mode':<46}{'wall s':>9}{'per trial s':>13}{'vs serial':>11}")
    for mode, seconds in times.items():
        print(f"{mode:<46}{seconds:>9.1f}{seconds / len(configs):>13.1f}{seconds / serial:>10.2f}x")
    print(f"{'Ray cold start (ray.init, not in the ratios)':<46}{cold_start:>9.1f}")


if __name__ == "__main__":
    main()
