"""Non-private vs DP step time and peak memory (Opacus hooks, book-keeping, LoRA + bk), per model shape and precision,
as ratios to the non-private step of the same shape, precision and code.

After warm-up each step is timed and a run reports its median step. On a CPU each variant runs in its own fresh
process, so its peak RSS is its own; on a GPU the variants of one shape and precision share a process (CUDA's peak
allocation is reset between them) and a process starts once per shape, precision and code. With `--rounds` > 1 the
runs repeat round-robin and each variant keeps its fastest round (a shared machine's load then inflates no variant
more than the others); each round's ratio is also taken within the round, where the variants ran one after the other,
and the table gives those ratios' median with a distribution-free 95 % confidence interval (the order statistics that
cover the median, `scipy.stats.quantile_test`; at least 6 rounds for a finite one): what a ratio on a busy machine
can and cannot tell. Shapes are GPT-2 architectures built from their config (no download) at the batch × length of Bu
et al. 2023's GPT-2 runs; `--batch`/`--length` override them (a CPU cannot hold hooks' per-sample copies at those
sizes). `--windows` makes the batch's rows windows of longer records, clipped record by record (e.g. `4`: every
record four rows; `1,1,2,8`: records of those row counts in turn), to compare with the same rows as one-row records
(`--windows 1`, the default).

`--before DIR` times the code of another checkout (DIR holds its `sdp_core`) beside this one, in the same run: the
side-by-side comparison a change to the private step is judged by. `--profile` also breaks each step down by part
(the `record_function` ranges of `sdp_core.train`: forward, output-gradient backward, ghost norms, instantiated
per-record gradients, embedding norms, LayerNorm and biases, clipped sums, noise and optimizer) from
`torch.profiler`: device time on a GPU, the host thread's time on a CPU (`--profile clock`: the run's clock around
each part instead, on a CPU, where the profiler's cost per operator would inflate the parts); and counts the
operators each part launches per step (kernel launches on a GPU, aten ops that move data on a CPU), in a table and as
`parts_ops` in each `--json` row, so that a private step's launches can be driven down on a CPU and checked on a GPU.
The profiler's times are the host thread's wall clock (on a GPU, the device's): on a shared CPU they include the time
the process waited for a core, which `--clock cpu` leaves out, so each profiled variant also shows its profiled
steps' time on the run's clock and on the wall; parts of variants profiled at different loads do not compare.

Each variant's process keeps freed host memory for its next step, as a trial's does (`training.keep_host_memory`);
`--host-memory keep,system` times glibc's defaults beside it (each step's page faults are in the table: the work the
kernel does for a step's fresh tensors, which the load of a shared machine does not change).

Usage: python -m benchmarks.train_step --precision fp32,bf16 --shape gpt2-small,gpt2-medium,gpt2-large
       python -m benchmarks.train_step --shape gpt2-tiny --steps 5 --warmup 1 --profile     # CPU
       python -m benchmarks.train_step --before /tmp/old-checkout --variants "non-private,DP bk"
       python -m benchmarks.train_step --shape gpt2-tiny --variants "non-private,DP bk" --windows 1 4 1,1,2,8
       python -m benchmarks.train_step --shape gpt2-tiny --variants "non-private,DP bk" --host-memory keep,system
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import math
import multiprocessing as mp
import resource
import statistics
import time
from pathlib import Path
from queue import Empty
from typing import Callable, Iterator

SHAPES = {  # preset: (batch, length, vocab)
    "gpt2-tiny": (32, 128, 4000),
    "gpt2-small": (32, 256, 50257),
    "gpt2-medium": (16, 512, 50257),
    "gpt2-large": (8, 512, 50257),
}
# name: (private, grad_sample_mode, LoRA, torch.compile, the variant its ratios are to)
VARIANTS = {
    "non-private": (False, "bk", False, False, "non-private"),
    "DP hooks": (True, "hooks", False, False, "non-private"),
    "DP bk": (True, "bk", False, False, "non-private"),
    "LoRA non-private": (False, "bk", True, False, "non-private"),
    "LoRA DP bk": (True, "bk", True, False, "LoRA non-private"),
    "non-private compiled": (False, "bk", False, True, "non-private"),
    "DP bk compiled": (True, "bk", False, True, "non-private"),
}
DEFAULT_VARIANTS = [name for name, variant in VARIANTS.items() if not variant[3]]  # compiling takes minutes
LORA_RANK = 8
PARTS = ("step.forward", "step.backward", "step.optimizer", "step.clipping", "bk.output_gradients", "bk.ghost_norms",
         "bk.instantiate", "bk.embedding_norms", "bk.small_layers", "bk.clipped_sums", "step.noise_and_optimizer")
"""The `record_function` ranges of the training steps; `step.clipping` encloses the `bk.*` ones."""


def record_index(rows: int, windows: list[int]) -> list[int]:
    """Each row's record when records take `windows[k]` rows in turn: [1, 2] -> 0, 1, 1, 2, 3, 3, ..."""
    out: list[int] = []
    record = 0
    while len(out) < rows:
        out += [record] * windows[record % len(windows)]
        record += 1
    return out[:rows]


NO_KERNEL = {"aten::empty", "aten::empty_strided", "aten::view", "aten::_reshape_alias", "aten::as_strided",
             "aten::alias", "aten::detach", "aten::lift_fresh", "aten::resize_", "aten::set_", "aten::t",
             "aten::transpose", "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select",
             "aten::slice", "aten::diagonal", "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::chunk",
             "aten::view_as_real", "aten::_unsafe_view", "aten::unflatten", "aten::flatten", "aten::reshape",
             "aten::as_strided_", "aten::to", "aten::resolve_conj", "aten::resolve_neg", "aten::result_type",
             "aten::narrow", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided", "aten::view_as",
             "aten::expand_as", "aten::reshape_as", "aten::squeeze_", "aten::unsqueeze_", "aten::numpy_T",
             "aten::unfold", "aten::contiguous"}
"""Leaf aten ops that move no data (allocations, views, metadata, and a `to` or `resolve_conj` that calls nothing:
it had nothing to do): `part_ops` leaves them out, so that on a CPU it counts the ops that would each be a kernel
on a GPU."""


def part_ranges(profiler) -> list[tuple[object, list]]:
    """Each `PARTS` range of the profiled steps with the top-level events that other threads started while it was
    open: on a GPU the backward runs in autograd's device thread while the step's thread waits inside its range."""
    events = [e for e in profiler.events() if e.device_type.name == "CPU"]
    ranges = [e for e in events if e.name in PARTS]
    own_threads = {r.thread for r in ranges}
    others = sorted((e for e in events if e.thread not in own_threads and e.cpu_parent is None),
                    key=lambda e: e.time_range.start)
    starts = [e.time_range.start for e in others]
    return [(r, others[bisect.bisect_left(starts, r.time_range.start):bisect.bisect_left(starts, r.time_range.end)])
            for r in ranges]


def part_seconds(profiler, gpu: bool) -> dict[str, float]:
    """Seconds in each of `PARTS` over the profiled steps: device time of the kernels launched inside each range on
    a GPU, the host thread's wall-clock time on a CPU (the profiler's "CPU time", waits for a core included). A range
    counts its children and also the ops other threads started while it was open (`part_ranges`). On a GPU each
    range's host time is also kept (`host.` + name): where it exceeds the device time, launching is the limit."""

    def spent(event) -> float:
        return event.device_time_total if gpu else event.cpu_time_total

    totals: dict[str, float] = {}
    for r, inside in part_ranges(profiler):
        totals[r.name] = totals.get(r.name, 0.0) + (spent(r) + sum(spent(e) for e in inside)) / 1e6
        if gpu:
            totals["host." + r.name] = totals.get("host." + r.name, 0.0) + r.time_range.elapsed_us() / 1e6
    return totals


def launches(event, gpu: bool) -> int:
    """Operators `event` and its children launch: kernel launches on a GPU (the CUDA runtime's launch calls); on a
    CPU, aten ops that move data and launch no such op themselves (an op counts once, where its work is done: a
    `to` that copies counts its `copy_`, an `mm` whose only child is a no-op `resolve_conj` counts itself), and a
    multi-tensor op (`_foreach_*`, and a fused optimizer's `_fused_*`) once, as the one kernel it is on a GPU for up
    to a few hundred tensors (a CPU runs it as a loop of per-tensor ops; its fused AdamW reads each parameter's step
    count with an `item`, which a GPU's kernel does not). A graph TorchInductor compiled counts the aten ops it calls
    and one for its own generated code, which the profiler does not see (on a GPU, one launch a fused kernel)."""
    if gpu:
        return sum(launches(child, gpu) for child in event.cpu_children) + ("LaunchKernel" in event.name)
    if event.name.startswith(("aten::_foreach_", "aten::_fused_")):
        return 1
    inner = sum(launches(child, gpu) for child in event.cpu_children)
    if event.name.startswith("## Call CompiledFxGraph"):
        return inner + 1
    return inner + (inner == 0 and event.name.startswith("aten::") and event.name not in NO_KERNEL)


def part_ops(profiler, gpu: bool) -> dict[str, int]:
    """Operators launched in each of `PARTS` over the profiled steps (`launches`), ranges enclosing their children
    and what other threads ran while they were open, as `part_seconds` counts time."""
    totals: dict[str, int] = {}
    for r, inside in part_ranges(profiler):
        totals[r.name] = totals.get(r.name, 0) + launches(r, gpu) + sum(launches(e, gpu) for e in inside)
    return totals


def measure_variant(variant: str, precision: str, preset: str, batch: int, length: int, vocab: int, steps: int,
                    warmup: int, windows: list[int], profile: str | None, threads: int | None, clock: str,
                    host_memory: str) -> dict:
    import torch

    from sdp_core.config.model import ModelConfig
    from sdp_core.models import build_model
    from sdp_core.tensors import LMData
    from sdp_core.train.loop import Phase, PrivacyRandomness, StepContext, make_optimizer  # both checkouts'
    from sdp_core.train.precision import resolve_precision, use_tf32

    private, mode, lora, compiled, _ = VARIANTS[variant]
    if host_memory == "keep":  # what a trial's training process sets (`training.keep_host_memory`)
        from sdp_core.train.host_memory import keep_freed_host_memory

        keep_freed_host_memory()
    if threads:
        torch.set_num_threads(threads)
    now = time.process_time if clock == "cpu" else time.perf_counter
    torch.manual_seed(0)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    use_tf32(device, True)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    n = batch * 4
    ids = torch.randint(5, vocab, (n, length), device=device)
    weights = torch.ones(n, length, device=device)
    weights[:, 0] = 0
    data = LMData(ids, weights, torch.zeros(n, length, dtype=torch.bool), torch.tensor(record_index(n, windows)))
    adapter = {"rank": LORA_RANK} if lora else None
    with device:  # initialised where it trains: a 774 M-parameter model built on the host takes most of a run
        model = build_model(ModelConfig(arch="gpt2", preset=preset, adapter=adapter), vocab, length)
    if compiled:
        model.compile()  # in place: bk's hooks on the layers stay where they are registered
    optimizer = make_optimizer(model, "adamw", 1e-3, 0.0)

    def peak_mb() -> float:
        if gpu:
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def synchronize() -> None:
        if gpu:
            torch.cuda.synchronize()

    base = peak_mb()
    # The training loop's own steps: `PublicStep` for a public phase, `DPStep` for a private one.
    phase = Phase("bench", data, private, 1, batch, sigmas=(1.0,), max_grad_norm=1.0)
    noise = PrivacyRandomness.for_phase(0, device, private, reproducible=False).noise  # what a trial draws from
    ctx = StepContext(model, optimizer, mode, noise, precision=resolve_precision(precision, device))
    step = phase.batch_step(ctx)
    fixed = data.subset(torch.arange(batch))  # a fixed batch: compare the step itself, not Poisson size noise
    for _ in range(warmup):
        step(fixed, 1.0)
    times, faults = [], []
    for _ in range(steps):
        synchronize()
        faulted = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = now()
        step(fixed, 1.0)
        synchronize()
        times.append(now() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faulted)
    result = {"step_s": statistics.median(times), "peak_mb": peak_mb(), "device": str(device),
              "page_faults": statistics.median(faults)}
    result["step_extra_mb"] = result["peak_mb"] - base
    if profile:
        timer = PartClock(now) if profile == "clock" else None
        if timer is not None:
            timer.install()
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
        start, wall = now(), time.perf_counter()
        with contextlib.nullcontext() if timer else torch.profiler.profile(activities=activities) as profiler:
            for _ in range(steps):
                step(fixed, 1.0)
            synchronize()
        result["profiled_s"] = {"clock": (now() - start) / steps, "wall": (time.perf_counter() - wall) / steps}
        seconds = timer.seconds if timer else part_seconds(profiler, gpu)
        result["parts_s"] = {name: s / steps for name, s in seconds.items() if s > 0}
        if timer is None:
            result["parts_ops"] = {name: round(n / steps) for name, n in part_ops(profiler, gpu).items() if n > 0}
    step.close()
    return result


class PartClock:
    """`--profile clock`: `record_function`'s stand-in in the training modules, which adds the run's clock around
    each range to its part's seconds. No profiler runs, so no operator pays its cost; a CPU only (a GPU's work runs
    after its range has closed)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.seconds: dict[str, float] = {}

    def install(self) -> None:
        """Time the `PARTS` ranges of this process's steps from now on (the modules that open them)."""
        from sdp_core.train import clipping, loop

        for module in (clipping, loop):
            module.record_function = self  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + self.now() - start


def paired_ratio(steps: list[float | None], reference: list[float | None]) -> tuple[float, float, float]:
    """The median of the rounds' ratios steps[k] / reference[k] (rounds where either failed left out) and its
    distribution-free 95 % confidence interval (nan where the rounds are too few for one; nan throughout without a
    round)."""
    from scipy.stats import quantile_test

    ratios = [s / r for s, r in zip(steps, reference) if s is not None and r]
    if not ratios:
        return math.nan, math.nan, math.nan
    median = statistics.median(ratios)
    interval = quantile_test(ratios, q=median, p=0.5).confidence_interval(0.95)
    return median, float(interval.low), float(interval.high)


def measure(code: str | None, variants: list[str], *args) -> list[dict]:
    """The variants one after another in this process, with `code`'s sdp_core (None: this checkout's)."""
    import gc
    import sys

    if code:
        sys.path.insert(0, code)
    results = []
    for variant in variants:
        try:
            results.append(measure_variant(variant, *args))
        except Exception as e:  # noqa: BLE001 -- an out-of-memory variant is a table cell, not the end of the run
            results.append({"error": f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"})
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results


def _child(queue, *args) -> None:
    queue.put(measure(*args))


def run(code: str | None, variants: list[str], *args) -> list[dict]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, code, variants, *args))
    proc.start()
    while True:  # read before joining: a child blocks on exit until its queued result is taken
        try:
            results = queue.get(timeout=5)
            break
        except Empty:
            if not proc.is_alive():
                results = [{"error": f"process died (exit {proc.exitcode})"}] * len(variants)
                break
    proc.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16, fp16")
    parser.add_argument("--shape", default="gpt2-tiny", help=f"comma-separated: {', '.join(SHAPES)}")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--batch", type=int, help="override every shape's batch size")
    parser.add_argument("--length", type=int, help="override every shape's sequence length")
    parser.add_argument("--windows", nargs="+", default=["1"],
                        help="rows per record, comma-separated counts taken in turn; several settings side by side")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=1, help="round-robin repeats; each variant keeps its fastest")
    parser.add_argument("--before", help="a checkout whose sdp_core is timed beside this one's, in the same run")
    parser.add_argument("--profile", nargs="?", const="profiler", choices=("profiler", "clock"),
                        help="also break each step down by part: torch.profiler's times and operator counts, or "
                             "(clock, a CPU) the run's clock around each part, without the profiler's cost")
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: torch's own choice)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time per step, which other work on a shared CPU inflates less "
                             "(with --threads 1, the step's own work)")
    parser.add_argument("--host-memory", default="keep",
                        help="comma-separated, side by side: keep (freed host memory kept for the next step, as a "
                             "trial's process sets it: training.keep_host_memory) or system (glibc's defaults)")
    parser.add_argument("--json", help="also write the rows to this file (after every process; `complete` at the end)")
    args = parser.parse_args()

    import torch

    gpu = torch.cuda.is_available()
    if gpu and args.profile == "clock":
        parser.error("--profile clock times a CPU's parts (a GPU's kernels run after their range closes): "
                     "use --profile on a GPU")
    variants = args.variants.split(",")
    codes = {"before": args.before, "after": None} if args.before else {"": None}
    host_memory = args.host_memory.split(",")
    codes_memory = [(f"{label} {memory}".strip() if len(host_memory) > 1 else label, code, memory)
                    for label, code in codes.items() for memory in host_memory]
    results: dict[tuple[str, str, str, str, str], dict] = {}
    rounds: dict[tuple[str, str, str, str, str], list[float | None]] = {}  # each round's step, in round order
    device = f"GPU: {torch.cuda.get_device_name()}" if gpu else "CPU"

    def write_json(complete: bool) -> None:
        """The rows so far (after every process: a run stopped early keeps what it measured)."""
        if args.json:
            rows = [{"shape": k[0], "precision": k[1], "code": k[2], "windows": k[3], "variant": k[4], **r}
                    for k, r in results.items()]
            partial = Path(args.json + ".partial")  # renamed over the file: a run killed mid-write leaves it whole
            partial.write_text(json.dumps({"device": device, "torch": torch.__version__, "steps": args.steps,
                                           "complete": complete, "rows": rows}, indent=1))
            partial.replace(args.json)

    for _ in range(args.rounds):
        for shape in args.shape.split(","):
            batch, length, vocab = SHAPES[shape]
            batch, length = args.batch or batch, args.length or length
            for precision in args.precision.split(","):
                for (label, code, memory), windows in itertools.product(codes_memory, args.windows):
                    groups = [variants] if gpu else [[v] for v in variants]  # a CPU's peak RSS is per process
                    for group in groups:
                        rows = run(code, group, precision, shape, batch, length, vocab, args.steps, args.warmup,
                                   [int(w) for w in windows.split(",")],
                                   args.profile,  # another checkout's code without the ranges leaves its parts blank
                                   args.threads, args.clock, memory)
                        for variant, r in zip(group, rows):
                            r.update(batch=batch, length=length, vocab=vocab)
                            key = (shape, precision, label, windows, variant)
                            rounds.setdefault(key, []).append(r.get("step_s"))
                            if r.get("step_s", float("inf")) < results.get(key, {}).get("step_s", float("inf")):
                                results[key] = r
                            results.setdefault(key, r)
                            results[key]["round_step_s"] = rounds[key]
                        print(f"{shape} {precision} {label} {windows}: " + ", ".join(
                            f"{v} {r['step_s']:.3f} s" if "step_s" in r else f"{v} {r.get('error')}"
                            for v, r in zip(group, rows)), flush=True)
                        write_json(complete=False)
    print_tables(results, args, device)
    write_json(complete=True)


def print_tables(results: dict[tuple[str, str, str, str, str], dict], args: argparse.Namespace, device: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    table = Table(title=f"{args.steps} timed steps (median, {args.clock} clock) after {args.warmup} warm-up, fastest "
                        f"of {args.rounds} round(s), {device}, {args.threads or 'default'} thread(s); ratios to the "
                        "non-private step of the same shape, precision and code (LoRA DP bk: to LoRA non-private)")
    for col in ("shape", "batch x length", "precision", "code", "rows per record", "variant", "step (s)", "time ratio",
                "ratio by round [95% CI]", "peak memory (MB)", "peak ratio", "step memory (MB)",
                "step memory ratio", "page faults a step"):
        table.add_column(col, justify="right")
    for (shape, precision, code, windows, variant), r in results.items():
        cells = [shape, f"{r['batch']} x {r['length']}", precision, code, windows, variant]
        reference = results.get((shape, precision, code, windows, VARIANTS[variant][4]), {})
        if "error" in r:
            table.add_row(*cells, r["error"], *[""] * 7)
            continue
        ratio = (lambda key: f"{r[key] / reference[key]:.2f}x" if reference.get(key) else "")  # noqa: E731
        median, low, high = paired_ratio(r["round_step_s"], reference.get("round_step_s", []))
        by_round = "" if math.isnan(median) else f"{median:.2f}x" + (
            f" [{low:.2f}, {high:.2f}]" if not math.isnan(low) else f" (n = {len(r['round_step_s'])}: no CI)")
        table.add_row(*cells, f"{r['step_s']:.3f}", ratio("step_s"), by_round, f"{r['peak_mb']:.0f}", ratio("peak_mb"),
                      f"{r['step_extra_mb']:.0f}", ratio("step_extra_mb"), f"{r['page_faults']:,.0f}")
    console.print(table)
    if not args.profile:
        return
    gpu = device != "CPU"
    source = (f"the {args.clock} clock around each part" if args.profile == "clock" else
              f"torch.profiler: {'device time / host time' if gpu else 'host thread, wall clock'}")
    parts = Table(title=f"Where a step's time goes (ms per step, {source}; step.clipping encloses the bk.* rows)")
    for col in ("shape", "precision", "code", "rows per record", "variant", *(p.split(".", 1)[1] for p in PARTS),
                f"profiled step: {args.clock} / wall"):
        parts.add_column(col, justify="right")

    def cell(seconds: dict[str, float], part: str) -> str:
        if part not in seconds:
            return ""
        return f"{1000 * seconds[part]:.1f}" + (f" / {1000 * seconds['host.' + part]:.1f}" if gpu else "")

    for (shape, precision, code, windows, variant), r in results.items():
        if "parts_s" in r:
            profiled = f"{1000 * r['profiled_s']['clock']:.1f} / {1000 * r['profiled_s']['wall']:.1f}"
            parts.add_row(shape, precision, code, windows, variant, *(cell(r["parts_s"], p) for p in PARTS), profiled)
    console.print(parts)
    if args.profile == "clock":  # no profiler: no operators counted
        return
    ops = Table(title=f"Operators each part launches per step ({'kernel launches' if gpu else 'aten ops that move data'}"
                      "); last column: a private step's clipping + noise and optimizer over the non-private step's "
                      "backward + optimizer, same shape, precision and code")
    for col in ("shape", "precision", "code", "rows per record", "variant", *(p.split(".", 1)[1] for p in PARTS),
                "vs non-private"):
        ops.add_column(col, justify="right")
    for (shape, precision, code, windows, variant), r in results.items():
        if "parts_ops" in r:
            counts = r["parts_ops"]
            reference = results.get((shape, precision, code, windows, VARIANTS[variant][4]), {}).get("parts_ops", {})
            private = counts.get("step.clipping", 0) + counts.get("step.noise_and_optimizer", 0)
            public = reference.get("step.backward", 0) + reference.get("step.optimizer", 0)
            ops.add_row(shape, precision, code, windows, variant, *(str(counts.get(p, "")) for p in PARTS),
                        f"{private / public:.2f}x" if private and public else "")
    console.print(ops)


if __name__ == "__main__":
    main()
