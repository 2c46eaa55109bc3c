"""Non-private vs DP step time and peak memory (Opacus hooks, Opacus ghost clipping, book-keeping, LoRA + bk), per
model shape and precision, as ratios to the non-private step of the same shape and precision.

Each variant runs in its own fresh process so its peak memory is its own; after warm-up each step is timed and a
run reports its median step. With `--rounds` > 1 the variants run round-robin that many times and each keeps its
fastest round (a shared machine's load then inflates no variant more than the others). On a machine with a GPU the
model trains there and memory is CUDA's peak allocation; otherwise CPU and peak RSS. Shapes are GPT-2 architectures
built from their config (no download) at the batch × length of Bu et al. 2023's GPT-2 runs; `--batch`/`--length`
override them (a CPU cannot hold hooks' per-sample copies at those sizes). `--windows` makes the batch's rows
windows of longer records, clipped record by record (e.g. `4`: every record four rows; `1,1,2,8`: records of
those row counts in turn), to compare with the same rows as one-row records (`--windows 1`, the default).
Usage: python -m benchmarks.train_step --precision fp32,bf16 --shape gpt2-tiny,gpt2-small,gpt2-medium,gpt2-large
       python -m benchmarks.train_step --shape gpt2-tiny --steps 5 --warmup 1           # CPU
       python -m benchmarks.train_step --shape gpt2-tiny --variants "non-private,DP bk" --windows 1 4 1,1,2,8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import time
from pathlib import Path
from queue import Empty

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
    "DP ghost": (True, "ghost", False, False, "non-private"),
    "DP bk": (True, "bk", False, False, "non-private"),
    "LoRA non-private": (False, "bk", True, False, "non-private"),
    "LoRA DP bk": (True, "bk", True, False, "LoRA non-private"),
    "non-private compiled": (False, "bk", False, True, "non-private"),
    "DP bk compiled": (True, "bk", False, True, "non-private"),
}
DEFAULT_VARIANTS = [name for name, variant in VARIANTS.items() if not variant[3]]  # compiling takes minutes
LORA_RANK = 8


def record_index(rows: int, windows: list[int]) -> list[int]:
    """Each row's record when records take `windows[k]` rows in turn: [1, 2] -> 0, 1, 1, 2, 3, 3, ..."""
    out: list[int] = []
    record = 0
    while len(out) < rows:
        out += [record] * windows[record % len(windows)]
        record += 1
    return out[:rows]


def measure(variant: str, precision: str, preset: str, batch: int, length: int, vocab: int, steps: int,
            warmup: int, windows: list[int]) -> dict:
    import torch

    from sdp_core.config.model import ModelConfig
    from sdp_core.models import build_model
    from sdp_core.tensors import LMData
    from sdp_core.train.loop import Phase, StepContext, make_optimizer
    from sdp_core.train.precision import resolve_precision, use_tf32

    private, mode, lora, compiled, _ = VARIANTS[variant]
    torch.manual_seed(0)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    use_tf32(device, True)
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

    base = peak_mb()
    # The training loop's own steps: `PublicStep` for a public phase, `DPStep` for a private one.
    phase = Phase("bench", data, private, 1, batch, sigmas=(1.0,), max_grad_norm=1.0)
    ctx = StepContext(model, optimizer, mode, torch.Generator(device=device).manual_seed(0),
                      precision=resolve_precision(precision, device))
    step = phase.batch_step(ctx)
    fixed = data.subset(torch.arange(batch))  # a fixed batch: compare the step itself, not Poisson size noise
    for _ in range(warmup):
        step(fixed, 1.0)
    times = []
    for _ in range(steps):
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step(fixed, 1.0)
        if gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = peak_mb()
    return {"step_s": statistics.median(times), "peak_mb": peak, "step_extra_mb": peak - base, "device": str(device)}


def _child(queue, *args) -> None:
    try:
        queue.put(measure(*args))
    except Exception as e:  # noqa: BLE001 -- an out-of-memory variant is a table cell, not the end of the run
        queue.put({"error": f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"})


def run(variant: str, *args) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, variant, *args))
    proc.start()
    while True:  # read before joining: a child blocks on exit until its queued result is taken
        try:
            result = queue.get(timeout=5)
            break
        except Empty:
            if not proc.is_alive():
                result = {"error": f"process died (exit {proc.exitcode})"}
                break
    proc.join()
    return result


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
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    variants = args.variants.split(",")
    results: dict[tuple[str, str, str, str], dict] = {}
    for _ in range(args.rounds):
        for shape in args.shape.split(","):
            batch, length, vocab = SHAPES[shape]
            batch, length = args.batch or batch, args.length or length
            for precision in args.precision.split(","):
                for windows in args.windows:
                    for variant in variants:
                        r = run(variant, precision, shape, batch, length, vocab, args.steps, args.warmup,
                                [int(w) for w in windows.split(",")])
                        r.update(batch=batch, length=length, vocab=vocab)
                        key = (shape, precision, windows, variant)
                        if r.get("step_s", float("inf")) < results.get(key, {}).get("step_s", float("inf")):
                            results[key] = r

    import torch
    from rich.console import Console
    from rich.table import Table

    device = f"GPU: {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "CPU"
    table = Table(title=f"{args.steps} timed steps (median) after {args.warmup} warm-up, fastest of {args.rounds} "
                        f"round(s), {device}; ratios to the non-private step of the same shape and precision "
                        "(LoRA DP bk: to LoRA non-private)")
    for col in ("shape", "batch x length", "precision", "rows per record", "variant", "step (s)", "time ratio",
                "peak memory (MB)", "peak ratio", "step memory (MB)", "step memory ratio"):
        table.add_column(col, justify="right")
    for (shape, precision, windows, variant), r in results.items():
        shape_cells = [shape, f"{r['batch']} x {r['length']}", precision, windows, variant]
        reference = results.get((shape, precision, windows, VARIANTS[variant][4]), {})
        if "error" in r:
            table.add_row(*shape_cells, r["error"], *[""] * 5)
            continue
        ratio = (lambda key: f"{r[key] / reference[key]:.2f}x" if reference.get(key) else "")
        table.add_row(*shape_cells, f"{r['step_s']:.3f}", ratio("step_s"), f"{r['peak_mb']:.0f}", ratio("peak_mb"),
                      f"{r['step_extra_mb']:.0f}", ratio("step_extra_mb"))
    Console(width=220).print(table)
    if args.json:
        rows = [{"shape": k[0], "precision": k[1], "windows": k[2], "variant": k[3], **r} for k, r in results.items()]
        Path(args.json).write_text(json.dumps({"device": device, "steps": args.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
