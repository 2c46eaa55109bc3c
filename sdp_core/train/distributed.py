"""A private phase on N Ray Train workers (`TorchTrainer`): data-parallel DP-SGD with the same ε as one worker.

Each rank holds a disjoint shard of the phase's records (rows r, r+N, r+2N, ...) and Poisson-samples it with the
phase's global rate q and its own seed, so the union of the ranks' batches is exactly one Poisson sample of the
whole dataset at rate q: the event the accountant charges for, unchanged. Opacus' `DistributedDPOptimizer`
clips per record on every rank, adds the Gaussian noise N(0, σ²C²) **once** (on rank 0), all-reduces the sums,
and every rank divides by the same global expected batch size B; the update, its noise std σC/B and the
parameters after each step are those of one worker (parameters stay identical across ranks).

DDP here is that all-reduce. The model is placed with `ray.train.torch.prepare_model(..., parallel_strategy=None)`
(device only) and wrapped in Opacus' `DPDDP` (broadcasts rank 0's parameters) rather than torch's
`DistributedDataParallel`: torch's reducer would all-reduce the un-clipped gradients in backward, which is
wasted work, and hangs when one rank's Poisson batch is empty and it skips the backward the others wait in.

CPU workers use gloo; GPU workers (`use_gpu`) NCCL. Ray 2.60 cannot nest a `TorchTrainer` in a `Tuner`, so a
sweep trial calls `.fit()` from inside its Tune function trial; on small machines the workers ask for
`CPU_PER_WORKER` (fractional) CPUs so that they fit beside the trial that launched them.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from sdp_core.train.loop import Phase, PhaseStats, PrivateTrainer, StepRecorder, ledger_key, poisson_batches

CPU_PER_WORKER = 0.5
"""Fractional, so a 2-worker phase fits beside its Tune trial on a 2-core machine (STACK_NOTES)."""
RANK_SEED_STRIDE = 1_000_003
"""Rank r samples with seed `seed + r * stride`: a distinct stream per rank, rank 0's equal to one worker's."""


def _train_rank(config: dict) -> tuple[dict, dict] | None:
    """One rank's share of the phase; rank 0 returns (model state, phase stats) as the train loop's value."""
    import ray.train
    import ray.train.torch
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    phase: Phase = config["phase"]
    rank, world = ray.train.get_context().get_world_rank(), ray.train.get_context().get_world_size()
    device = ray.train.torch.get_device()
    model = DPDDP(ray.train.torch.prepare_model(config["model"], parallel_strategy=None))
    optimizer = config["optimizer_factory"](model)
    start = time.perf_counter()
    stats = PhaseStats(phase.name, private=True)
    shard = phase.data.subset(torch.arange(rank, len(phase.data), world))
    noise = torch.Generator(device=device).manual_seed(config["seed"] + 1)  # used by rank 0 only
    trainer = PrivateTrainer(model, optimizer, phase, config["grad_sample_mode"], noise, distributed=True)
    # Every rank divides by B/world (B: the global expected batch size), so the all-reduced update is
    # (Σ clipped + noise)/B: each record's sensitivity is C/B whatever rank holds it.
    trainer.optimizer.expected_batch_size = max(1, round(phase.sample_rate * len(phase.data))) / world
    sampling = torch.Generator().manual_seed(config["seed"] + rank * RANK_SEED_STRIDE)
    try:
        for epoch, steps in enumerate(phase.epoch_steps()):
            if steps == 0:
                continue
            sigma = phase.sigmas[epoch]
            stats.sigmas.append(sigma)
            for rows in poisson_batches(len(shard), phase.sample_rate, steps, sampling):
                batch = shard.subset(rows).to(device)
                loss = trainer.step(batch.input_ids, batch.weights, sigma, batch.labels)
                stats.add(1, len(rows), loss)
    finally:
        model = trainer.close()
    stats.seconds = time.perf_counter() - start
    if rank != 0:
        return None
    # numpy, not tensors: Ray Train refuses to return tensors from the train loop
    return {k: v.detach().cpu().numpy() for k, v in model.module.state_dict().items()}, asdict(stats)


def run_private_phase_distributed(
    model: nn.Module,
    optimizer_factory: Callable[[nn.Module], torch.optim.Optimizer],
    phase: Phase,
    ledger: StepRecorder,
    seed: int,
    grad_sample_mode: str,
    workers: int,
    *,
    use_gpu: bool | None = None,
    storage_path: str | Path | None = None,
) -> tuple[dict, PhaseStats]:
    """Train `model` for the private `phase` on `workers` Ray Train workers; returns (state dict, stats).

    The phase's steps are counted in `ledger` before any is taken (it refuses steps beyond the calibrated plan),
    as the one-worker loop does step by step. `optimizer_factory(model)` builds each rank's optimizer (fresh
    state). `seed` plays the role of `run_phase`'s: rank 0 samples and draws noise as one worker would.
    `records_seen` and the losses in the stats are rank 0's. Ray is started locally when it is not up yet.
    """
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if not phase.private:
        raise ValueError(f"phase {phase.name!r} is public: only private phases run distributed")
    if not ray.is_initialized():  # a trial outside a sweep: a private local Ray, never a stranger's cluster
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
    use_gpu = torch.cuda.is_available() if use_gpu is None else use_gpu
    for epoch, steps in enumerate(phase.epoch_steps()):
        if steps:
            ledger.record_steps(ledger_key(phase.name, epoch), steps)
    trainer = TorchTrainer(
        _train_rank,
        train_loop_config={"model": model, "optimizer_factory": optimizer_factory, "phase": phase, "seed": seed,
                           "grad_sample_mode": grad_sample_mode},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu,
                                     resources_per_worker={"GPU": 1} if use_gpu else {"CPU": CPU_PER_WORKER}),
        run_config=RunConfig(name=f"{phase.name}-{uuid.uuid4().hex[:8]}",
                             storage_path=str(storage_path or Path(tempfile.gettempdir()) / "sdp_sweep_train")),
    )
    state, stats = trainer.fit().return_value
    return {k: torch.tensor(v) for k, v in state.items()}, PhaseStats(**stats)
