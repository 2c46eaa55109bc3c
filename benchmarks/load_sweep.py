"""Load: a sweep of many trivial trials (gpt2-tiny, one step, 40 dialogs) on a local Ray, through the real driver
(Ray Tune + Optuna, rows, journal). Checks that no result is lost or duplicated and samples the memory of the whole
process tree (driver, Ray head, workers) every half second: peak, and at each quarter of the trials (bounded memory
does not grow with the number of trials done).
Usage: python -m benchmarks.load_sweep [--trials 200] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.proctree import descendants, rss_mb


def trivial_sweep(trials: int, concurrency: int):
    from sdp_core.config.sweep import SweepConfig

    return SweepConfig.model_validate({
        "name": "load", "base": {
            "data": {"n_train": 40, "n_validation": 10, "n_test": 10, "max_length": 64},
            "detector": {"policy": "phone,order_number"}, "tokenizer": {"vocab_size": 300},
            "training": {"batch_size": 8, "max_steps": 1}, "evaluation": {"exposure": False, "mia": False}},
        "mechanisms": ["dpsgd", "nodp"],
        "objectives": [{"metric": "val_perplexity", "mode": "min"}],
        "search_space": {"parameters": {"training.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}},
        "num_trials": trials, "concurrency": concurrency})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

    import ray
    from optuna.trial import TrialState
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from sdp_core.sweep.driver import open_studies, run_sweep
    from sdp_core.sweep.store import SweepStore

    cfg = trivial_sweep(args.trials, args.concurrency)
    store = SweepStore(Path(tempfile.mkdtemp(prefix="load-sweep-")))
    store.create(cfg)
    samples: list[tuple[int, float, float]] = []  # (rows done, tree MB, driver MB)
    done = threading.Event()

    def sample() -> None:
        with Progress() as progress:
            task = progress.add_task("trials", total=args.trials)
            while not done.is_set():
                rows = len(list(store.trials_dir.glob("*.json")))
                tree = [os.getpid(), *descendants(os.getpid())]
                samples.append((rows, sum(map(rss_mb, tree)), rss_mb(os.getpid())))
                progress.update(task, completed=rows)
                time.sleep(0.5)

    ray.init(address="local", num_cpus=args.concurrency, include_dashboard=False, log_to_driver=False)
    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    try:
        rows = run_sweep(cfg, cfg.search_space, store)
    finally:
        done.set()
        sampler.join()
        ray.shutdown()
    wall = time.perf_counter() - start

    states = [t.state for study in open_studies(cfg, store).values() for t in study.get_trials()]
    finished = sum(r["state"] == "finished" for r in rows.values())
    lost = args.trials - len(rows)
    table = Table(title=f"{args.trials} trivial trials, concurrency {args.concurrency}, local Ray")
    for col in ("quantity", "value"):
        table.add_column(col, justify="right")
    table.add_row("rows written / finished", f"{len(rows)} / {finished}")
    table.add_row("trials lost", str(lost))
    table.add_row("Optuna trials COMPLETE", f"{states.count(TrialState.COMPLETE)} of {len(states)}")
    table.add_row("wall", f"{wall:.0f} s ({wall / args.trials:.2f} s per trial)")
    table.add_row("peak memory, whole tree", f"{max(s[1] for s in samples):.0f} MB")
    table.add_row("peak memory, driver", f"{max(s[2] for s in samples):.0f} MB")
    for quarter in (1, 2, 3, 4):  # bounded: the peak of each quarter does not climb with the trials done
        window = [s for s in samples if (quarter - 1) * args.trials // 4 < s[0] <= quarter * args.trials // 4]
        if window:
            table.add_row(f"tree memory peak in quarter {quarter} of the trials", f"{max(s[1] for s in window):.0f} MB")
    Console(width=200).print(table)
    print(store.root)
    ids = [r.get("trial_id") for r in rows.values()]
    if lost or len(set(ids)) != len(ids) or states.count(TrialState.COMPLETE) != args.trials:
        raise SystemExit("trials were lost or counted twice")


if __name__ == "__main__":
    main()
