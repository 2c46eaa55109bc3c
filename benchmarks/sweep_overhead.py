"""What Ray Tune + Optuna cost around the trials: the same N tiny trials serially in one process vs as a Ray sweep
with concurrency 1 and 2 (wall-time ratios), and Ray's cold start.

The N trials are identical in every mode (one mechanism, a one-value search space, seeds sweep seed + n), and one
untimed trial first warms the detection cache and this process's imports, so the serial time is pure training.
Usage: python -m benchmarks.sweep_overhead [--trials 4] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path


def tiny_sweep(trials: int, steps: int, concurrency: int):
    from sdp_core.config import parse_model
    from sdp_core.config.sweep import SweepConfig

    base = {"data": {"n_train": 200, "n_validation": 40, "n_test": 40, "max_length": 128},
            "detector": {"policy": "phone,order_number,tracking_number"}, "tokenizer": {"vocab_size": 600},
            "training": {"batch_size": 16, "max_steps": steps, "learning_rate": 2e-3},
            "evaluation": {"exposure": False, "mia": False}}
    return parse_model(SweepConfig, {
        "name": "overhead", "base": base, "mechanisms": ["dpsgd"], "num_trials": trials, "concurrency": concurrency,
        "objectives": [{"metric": "val_perplexity", "mode": "min"}],
        "search_space": {"parameters": {"training.learning_rate": {"type": "choice", "values": [2e-3]}}}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    os.environ["SDP_CACHE_DIR"] = str(work / "cache")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # keep Tune's own reporter out of the table

    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.sweep.space import trial_config_dict
    from sdp_core.trial import run_trial

    cfg = tiny_sweep(args.trials, args.steps, 1)
    params = {"training.learning_rate": 2e-3}
    run_trial(parse_model(TrialConfig, trial_config_dict(cfg, params, args.trials)))  # warm-up, untimed
    start = time.perf_counter()
    for n in range(args.trials):
        run_trial(parse_model(TrialConfig, trial_config_dict(cfg, params, n)))
    times = {"serial, one process": time.perf_counter() - start}

    import ray

    from sdp_core.sweep.driver import run_sweep
    from sdp_core.sweep.store import SweepStore

    start = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    cold_start = time.perf_counter() - start
    for concurrency in (1, 2):
        sweep = tiny_sweep(args.trials, args.steps, concurrency)
        store = SweepStore(work / f"ray-c{concurrency}")
        store.create(sweep)
        start = time.perf_counter()
        rows = run_sweep(sweep, sweep.search_space, store)
        times[f"Ray sweep, concurrency {concurrency}"] = time.perf_counter() - start
        assert len(rows) == args.trials and all(r["state"] == "finished" for r in rows.values())
    ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)

    serial = times["serial, one process"]
    print(f"\n{args.trials} trials of {args.steps} DP steps (gpt2-tiny, 200 dialogs), {os.cpu_count()} CPUs")
    print(f"{'mode':<26}{'wall s':>9}{'per trial s':>13}{'vs serial':>11}")
    for mode, seconds in times.items():
        print(f"{mode:<26}{seconds:>9.1f}{seconds / args.trials:>13.1f}{seconds / serial:>10.2f}x")
    print(f"{'Ray cold start (ray.init)':<26}{cold_start:>9.1f}")


if __name__ == "__main__":
    main()
