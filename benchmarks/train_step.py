"""Non-private vs DP step time and peak memory (Opacus hooks, Opacus ghost clipping, book-keeping), as ratios.

Each variant runs in its own fresh process so its peak memory is its own; after warm-up each step is timed and a
run reports its median step. With `--rounds` > 1 the variants run round-robin that many times and each keeps its
fastest round (a shared machine's load then inflates no variant more than the others). On a machine with a GPU the
model trains there and memory is CUDA's peak allocation; otherwise CPU and peak RSS.
Usage: python -m benchmarks.train_step [--steps 20] [--batch 32] [--length 128] [--preset gpt2-tiny] [--vocab 4000]
       python -m benchmarks.train_step --preset gpt2-small --vocab 50257 --batch 8 --length 128 --steps 3 --warmup 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time

VARIANTS = [("non-private", False, "hooks"), ("DP hooks", True, "hooks"), ("DP ghost", True, "ghost"),
            ("DP bk", True, "bk")]


def measure(private: bool, mode: str, steps: int, warmup: int, batch: int, length: int, preset: str,
            vocab: int) -> dict:
    import torch

    from sdp_core.models.gpt2 import build_gpt2
    from sdp_core.tensors import LMData
    from sdp_core.train.loop import Phase, StepContext, make_optimizer

    torch.manual_seed(0)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    n = batch * 4
    ids = torch.randint(5, vocab, (n, length), device=device)
    weights = torch.ones(n, length, device=device)
    weights[:, 0] = 0
    data = LMData(ids, weights, torch.zeros(n, length, dtype=torch.bool), torch.arange(n))
    model = build_gpt2(preset, None, vocab, length, 0.0).to(device)
    optimizer = make_optimizer(model, "adamw", 1e-3, 0.0)

    def peak_mb() -> float:
        if gpu:
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    base = peak_mb()
    # The training loop's own steps: `PublicStep` for a public phase, `DPStep` for a private one.
    phase = Phase("bench", data, private, 1, batch, sigmas=(1.0,), max_grad_norm=1.0)
    step = phase.batch_step(StepContext(model, optimizer, mode, torch.Generator(device=device).manual_seed(0)))
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


def _child(queue, *args):
    queue.put(measure(*args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--preset", default="gpt2-tiny")
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=1, help="round-robin repeats; each variant keeps its fastest")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    results: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, private, mode in VARIANTS:
            queue = ctx.Queue()
            proc = ctx.Process(target=_child, args=(queue, private, mode, args.steps, args.warmup, args.batch,
                                                     args.length, args.preset, args.vocab))
            proc.start()
            r = queue.get()
            proc.join()
            if name not in results or r["step_s"] < results[name]["step_s"]:
                results[name] = r

    from rich.console import Console
    from rich.table import Table

    base = results["non-private"]
    device = "GPU: " + __import__("torch").cuda.get_device_name() if base["device"] == "cuda" else "CPU"
    table = Table(title=f"{args.preset}, vocab {args.vocab}, batch {args.batch} x {args.length} tokens, {args.steps} "
                        f"timed steps (median), fastest of {args.rounds} round(s) ({device})")
    for col in ("variant", "step (s)", "steps/s", "time vs non-private", "peak memory (MB)", "step memory (MB)",
                "step memory vs non-private"):
        table.add_column(col, justify="right")
    for name, r in results.items():
        table.add_row(name, f"{r['step_s']:.3f}", f"{1 / r['step_s']:.2f}", f"{r['step_s'] / base['step_s']:.2f}x",
                      f"{r['peak_mb']:.0f}", f"{r['step_extra_mb']:.0f}", f"{r['step_extra_mb'] / base['step_extra_mb']:.2f}x")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
