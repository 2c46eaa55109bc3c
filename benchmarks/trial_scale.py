"""How one trial grows with its data: its peak memory, its own pages, its start-up and its evaluation at N training
records, per mechanism, for N far past what this machine prepares in minutes.

The data of N records is a real setting's rows tiled: `prepare_trial_data` prepares generated clinic notes once at a
small size (`--base` training records, the regex policy `identifier,phone,email`, rows of 128 tokens), and each size
gets those rows repeated, each copy's record indices shifted past the previous copy's so that every record is a
distinct one, cut after N training records (and N / 10 each for validation and test). The tokenizer, the canaries
and the detector's summary are the small setting's. Records repeat, so this measures what a trial holds and how
long its code takes as the rows grow, not what it learns.

Each size's data goes into the object store of a Ray head started for the run as a sweep leaves it
(`sdp_core.sweep.prepare`): every mechanism's plan made once on it first (`prepare_shared`), then the part every
trial reads, the records and each rows object as objects of their own (`put_shared`, `SharedData`). Each trial
(`--mechanisms`, a few steps each: `--steps`) runs alone in a Ray task of its own (`SharedData.get`, then
`run_trial`, as a sweep's trial does), which samples its own /proc status every 0.05 s: the kernel's high-water mark
of its resident memory (VmHWM, which counts the object store's pages it touched) and the largest of its own pages
sampled (RssAnon, which does not); its start-up is the time from the task's start to the end of its first step (the
data read, the plan, the model and the untrained model's validation loss), "plan" the part until the mechanism's
plan is made, and its evaluation is `run_trial`'s `timings["evaluate"]` (the trained model on
`evaluation.held_out_records` validation and test records). Beside each wall time, the trial process's CPU seconds
for it (start-up; evaluation's two scorings), which other jobs on the machine move far less.

With `--against DIR` the same runs on DIR's `sdp_core` (an earlier checkout) side by side, in a driver process per
side on the same head; the table gives each side's numbers and each side's ratio of its largest size to its smallest.

    python -m benchmarks.trial_scale [--sizes 100000 1000000] [--mechanisms dpsgd atdp sdpsgd jft] [--steps 3] \
        [--against /tmp/before] [--sides now before] [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POLICY = "identifier,phone,email"
SAMPLE_INTERVAL = 0.05


def trial_config(base: int, steps: int, mechanism: str) -> dict:
    """A trial of `mechanism` on `base` generated clinic notes (a tenth as many validation and test notes), an LSTM
    (S-DPSGD's model; every mechanism gets it, so that they compare), `steps` steps per phase, no attacks."""
    return {"data": {"source": "clinic", "n_train": base, "n_validation": base // 10, "n_test": base // 10,
                     "max_length": 128},
            "detector": {"policy": POLICY}, "model": {"arch": "lstm"}, "mechanism": {"name": mechanism},
            "training": {"max_steps": steps}, "evaluation": {"exposure": False, "mia": False}}


def tiled(rows, records: int):
    """The first `records` records of `rows` repeated, each copy's record indices past the previous copy's, with
    all their rows (an `LMData` of the checkout that runs this)."""
    import torch

    from sdp_core.tensors import LMData, record_groups

    span = int(rows.record_index.max()) + 1
    have = int(rows.record_index.unique().numel())
    copies = -(-records // have)
    index = torch.cat([rows.record_index + k * span for k in range(copies)])
    keep = record_groups(index) < records
    return LMData(*(t.repeat(copies, *[1] * (t.dim() - 1))[keep] for t in (rows.input_ids, rows.weights,
                                                                          rows.sensitive)), index[keep])


def _trial(trial: dict, shared: list) -> dict:
    """One trial on the shared data in this (fresh) worker: its memory and times (see the module docstring).
    `shared` holds the setting's `SharedData`, in a list so that it is read here, timed."""
    import sdp_core.trial
    from benchmarks.proctree import peak_rss_mb, private_mb, rss_mb
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.trial import run_trial

    # The CPU seconds of each scoring (the untrained model's, then the evaluation's two): what the load leaves alone.
    scoring: list[float] = []
    score = sdp_core.trial.utility_metrics

    def timed_score(*args: object) -> dict:
        before = time.process_time()
        out = score(*args)  # type: ignore[arg-type]
        scoring.append(time.process_time() - before)
        return out

    sdp_core.trial.utility_metrics = timed_score  # type: ignore[assignment]  # this worker runs this trial only
    me = os.getpid()
    own = {"peak": 0.0}
    at_peak: dict[str, float | str] = {"rss_mb": 0.0}  # the largest resident memory sampled, and what it held
    marks: dict[str, float] = {}
    stage = ["start"]  # the last mark passed
    done = threading.Event()
    start, cpu = time.perf_counter(), time.process_time()

    def sample() -> None:
        while not done.wait(SAMPLE_INTERVAL):
            own["peak"] = max(own["peak"], private_mb(me))
            rss = rss_mb(me)
            if rss > float(at_peak["rss_mb"]):
                status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
                at_peak.update(rss_mb=rss, own_mb=private_mb(me), shared_mb=int(status["RssShmem"].split()[0]) / 1024,
                               files_mb=int(status["RssFile"].split()[0]) / 1024, after=stage[0],
                               at_s=time.perf_counter() - start)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def mark(name: str) -> None:
        if name not in marks:
            stage[0] = name
            marks[name] = time.perf_counter() - start
            marks[f"{name}_cpu_s"] = time.process_time() - cpu
            marks[f"{name}_own_mb"] = private_mb(me)
            marks[f"{name}_rss_mb"] = rss_mb(me)

    data = shared[0].get()
    mark("read")
    row = run_trial(parse_model(TrialConfig, trial), prepared=data, on_plan=lambda _: mark("plan"),
                    on_step=lambda _: mark("first_step"))
    done.set()
    sampler.join()
    return {**marks, "evaluate_s": row.timings["evaluate"], "wall_s": time.perf_counter() - start,
            "evaluate_cpu_s": sum(scoring[1:]),
            "peak_mb": peak_rss_mb(me), "own_mb": max(own["peak"], private_mb(me)), "at_peak": at_peak,
            "timings": row.timings,
            "steps": row.metrics["steps"], "val_perplexity": row.metrics["val_perplexity"]}


def drive(address: str, sizes: list[int], mechanisms: list[str], base: int, steps: int) -> None:
    """In this process (started as `--drive`, on one checkout's `sdp_core`): the small setting prepared once, then per
    size its tiled data put into the object store as a sweep leaves it and one trial per mechanism; a JSON line per
    trial."""
    from dataclasses import replace
    from functools import partial

    import ray

    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.mechanisms import get_mechanism
    from sdp_core.metrics import evaluation_rows
    from sdp_core.preparation import prepare_trial_data
    from sdp_core.sweep.prepare import put_shared

    ray.init(address=address, log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    configs = {m: trial_config(base, steps, m) for m in mechanisms}
    small = prepare_trial_data(parse_model(TrialConfig, configs[mechanisms[0]]))
    task = ray.remote(num_cpus=1, max_calls=1)(_trial)
    for n in sizes:
        d = small.data
        data = replace(d, train=tiled(d.train, n), train_redacted=tiled(d.train_redacted, n),
                       validation=tiled(d.validation, n // 10), test=tiled(d.test, n // 10), train_records=n)
        prepared = replace(small, data=data)
        for cfg in map(partial(parse_model, TrialConfig), configs.values()):  # as `prepare_shared` does before
            get_mechanism(cfg.mechanism.name)(data, cfg)  # the data goes to the object store
            for rows in (data.validation, data.test):
                evaluation_rows(rows, cfg.evaluation.held_out_records, cfg.data.seed)
        shared = put_shared(prepared, 0)
        del data, prepared
        for m, cfg in configs.items():
            out = ray.get(task.remote(cfg, [shared]))
            print(json.dumps({"size": n, "mechanism": m, **out}), flush=True)
        del shared


def in_checkout(code: Path, address: str, args: argparse.Namespace) -> list[dict]:
    """`drive` in a new process on checkout `code`'s `sdp_core`; its rows."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, __file__, "--drive", "--address", address, "--sizes", *map(str, args.sizes),
           "--mechanisms", *args.mechanisms, "--base", str(args.base), "--steps", str(args.steps)]
    rows = []
    with subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(line.rstrip(), flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"the trials failed in {code}")
    return rows


def table(rows: list[dict]) -> None:
    """Per mechanism and size, each side's numbers; then each side's ratio of its largest size to its smallest."""
    cols = ("peak_mb", "own_mb", "plan", "first_step", "first_step_cpu_s", "evaluate_s", "evaluate_cpu_s")
    heads = ("peak MB", "own MB", "plan s", "start-up s", "start CPU s", "eval s", "eval CPU s")
    print(f"\n{'mechanism':>9} {'records':>9} {'side':>6} " + " ".join(f"{h:>10}" for h in heads))
    for r in sorted(rows, key=lambda r: (r["mechanism"], r["size"], r["side"] != "before")):
        print(f"{r['mechanism']:>9} {r['size']:>9,} {r['side']:>6} " + " ".join(
            f"{r[c]:>10.0f}" if c.endswith("mb") else f"{r.get(c, float('nan')):>10.2f}" for c in cols))
    print(f"\n{'mechanism':>9} {'side':>6} {'ratio':>13} " + " ".join(f"{h:>10}" for h in heads))
    for key in dict.fromkeys((r["mechanism"], r["side"]) for r in rows):
        mine = sorted((r for r in rows if (r["mechanism"], r["side"]) == key), key=lambda r: r["size"])
        if len(mine) > 1:
            ratio = f"{mine[-1]['size'] // 1000:,}k/{mine[0]['size'] // 1000:,}k"
            print(f"{key[0]:>9} {key[1]:>6} {ratio:>13} " + " ".join(
                f"{mine[-1].get(c, float('nan')) / mine[0].get(c, float('nan')):>9.2f}x" for c in cols))


def main() -> None:
    from benchmarks.prepare_scale import ray_node, stop, wait_for_cpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--mechanisms", nargs="+", default=["dpsgd", "atdp", "sdpsgd", "jft"])
    parser.add_argument("--base", type=int, default=2_000, help="training records of the setting prepared")
    parser.add_argument("--steps", type=int, default=3, help="steps of each phase")
    parser.add_argument("--against", type=Path, help="an earlier checkout to compare with")
    parser.add_argument("--sides", nargs="+", choices=["now", "before"], help="which sides to run (default: now, "
                        "and before with --against)")
    parser.add_argument("--object-store-gb", type=float, default=4.0, help="the head's object store")
    parser.add_argument("--json", type=Path, help="every trial's row to this file")
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args.address, args.sizes, args.mechanisms, args.base, args.steps)
        return
    work = Path(tempfile.mkdtemp(prefix="trial-scale-"))
    token = work / "auth_token"  # a token of this run's own for its head and drivers, none under ~/.ray
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    head = ray_node(2, None, work / "ray.log", object_store_mb=int(args.object_store_gb * 1024))
    rows: list[dict] = []
    try:
        address = head.address  # type: ignore[attr-defined]
        wait_for_cpus(address, 2)
        print(f"logs in {work}", flush=True)
        sides = {"now": REPO, **({"before": args.against} if args.against else {})}
        for side in args.sides or sides:
            rows += [{**r, "side": side} for r in in_checkout(sides[side], address, args)]
    finally:
        stop([head])
    table(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
