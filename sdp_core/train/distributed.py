"""A private phase on N Ray Train workers (`TorchTrainer`): data-parallel DP training with the same ε as one worker.

Every rank runs the one training loop (`train_phase`) on its shard of the phase's records (rows r, r+N, ...),
Poisson-sampling it at the phase's global rate q with its own secure randomness, so the union of the ranks'
batches is exactly one Poisson sample of the whole dataset at rate q: the event the accountant charges for,
unchanged. The phase's step all-reduces: Opacus' `DistributedDPOptimizer` clips per record on every rank, adds
the Gaussian noise N(0, σ²C²) **once** (on rank 0), all-reduces the sums, and every rank divides by the same
global expected batch size B; the update, its noise std σC/B and the parameters after each step are those of
one worker (parameters stay identical across ranks). A mechanism's own step (Selective-DPSGD) runs the same way.

DDP here is that all-reduce. The model is placed with `ray.train.torch.prepare_model(..., parallel_strategy=None)`
(device only) and wrapped in Opacus' `DPDDP` (broadcasts rank 0's parameters) rather than torch's
`DistributedDataParallel`: torch's reducer would all-reduce the un-clipped gradients in backward, which is
wasted work, and hangs when one rank's Poisson batch is empty and it skips the backward the others wait in.

CPU workers use gloo; GPU workers (`use_gpu`) NCCL. Ray 2.60 cannot nest a `TorchTrainer` in a `Tuner`, so a
sweep trial calls `.fit()` from inside its Tune function trial; CPU workers ask for `cpu_per_worker` CPUs
(fractional by default, so that they fit beside the trial that launched them on a small machine), taken from the
bundles the trial's placement group reserved for them (`worker_resources`).
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # imported where they run: Ray Train's controller imports this module for `_train_rank` alone
    import torch
    from torch import nn

    from sdp_core.privacy import PrivacyLedger
    from sdp_core.train.loop import Phase, PhaseStats, StepSettings

CPU_PER_WORKER = 0.5
"""Default CPUs a CPU worker asks for: fractional, so a 2-worker phase fits beside its Tune trial on 2 cores."""


def worker_resources(use_gpu: bool, cpu_per_worker: float) -> dict[str, float]:
    """What each Ray Train worker asks for: a GPU, or `cpu_per_worker` CPUs.

    Inside a sweep trial whose placement group also holds bundles for its CPU workers
    (`sweep.driver.trial_resources`), the CPUs are the group's own (`CPU_group_<id>`, the resource Ray gives each
    placement group): Ray Train V2 always makes a placement group of its own, which cannot be nested in the
    trial's, and asking for the group's resource places its bundles inside the trial's reservation.
    """
    import ray

    if use_gpu:
        return {"GPU": 1}
    group = ray.util.get_current_placement_group()
    if group is not None and len(group.bundle_specs) > 1:  # the trial's bundle, then its workers'
        return {f"CPU_group_{group.id.hex()}": cpu_per_worker}
    return {"CPU": cpu_per_worker}


def _train_rank(config: dict) -> tuple[dict, dict] | None:
    """One rank's share of the phase; rank 0 returns (model state, phase stats) as the train loop's value.
    `config["phase"]` is a reference to what `run_private_phase_distributed` put in Ray's object store (the model,
    the phase's rows, the settings): read here, on the ranks, never by Ray Train's controller, which passes the
    config on."""
    import ray
    import ray.train
    import ray.train.torch
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    from sdp_core.privacy import PrivacyLedger
    from sdp_core.tensors import model_device
    from sdp_core.train.loop import train_phase

    config = ray.get(config["phase"])
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    model = DPDDP(ray.train.torch.prepare_model(config["model"], parallel_strategy=None))
    phase: Phase = config["phase"]
    # The driver charged the whole phase before the ranks started; each rank still runs against the plan, so a
    # rank can never take a batch the plan does not hold.
    plan = PrivacyLedger.from_dict(config["ledger"])
    settings: StepSettings = config["settings"]
    settings.set_process_switches(model_device(model))
    stats = train_phase(model, config["optimizer_factory"](model), phase, plan, config["seed"], settings=settings,
                        rank=rank, world_size=world)
    if rank != 0:
        return None
    # numpy, not tensors: Ray Train refuses to return tensors from the train loop
    return {k: v.detach().cpu().numpy() for k, v in model.module.state_dict().items()}, asdict(stats)


def run_private_phase_distributed(
    model: nn.Module,
    optimizer_factory: Callable[[nn.Module], torch.optim.Optimizer],
    phase: Phase,
    ledger: PrivacyLedger,
    seed: int,
    settings: StepSettings,
    workers: int,
    *,
    cpu_per_worker: float = CPU_PER_WORKER,
    use_gpu: bool | None = None,
    storage_path: str | Path | None = None,
) -> tuple[dict, PhaseStats]:
    """Train `model` for the private `phase` on `workers` Ray Train workers; returns (state dict, stats).

    The whole phase is charged to `ledger` before any rank starts (it refuses a phase beyond the calibrated
    plan), so a phase that fails half-way is still counted in full. `optimizer_factory(model)` builds each
    rank's optimizer (fresh state); every rank runs with `settings`, its precision resolved on the rank's own
    device. The stats are rank 0's. Ray is started locally when it is not up yet.
    """
    import ray
    import torch
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from sdp_core.train.loop import PhaseStats, ledger_key

    if not phase.private:
        raise ValueError(f"phase {phase.name!r} is public: only private phases run distributed")
    if not ray.is_initialized():  # a trial outside a sweep: a private local Ray, never a stranger's cluster
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
    use_gpu = torch.cuda.is_available() if use_gpu is None else use_gpu
    before = ledger.to_dict()
    for epoch, steps in enumerate(phase.epoch_steps()):
        if steps:
            ledger.record_steps(ledger_key(phase.name, epoch), steps)
    trainer = TorchTrainer(
        _train_rank,
        train_loop_config={"phase": ray.put({"model": model, "optimizer_factory": optimizer_factory, "phase": phase,
                                             "seed": seed, "ledger": before, "settings": settings})},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu,
                                     resources_per_worker=worker_resources(use_gpu, cpu_per_worker)),
        run_config=RunConfig(name=f"{phase.name}-{uuid.uuid4().hex[:8]}",
                             storage_path=str(storage_path or Path(tempfile.gettempdir()) / "sdp_sweep_train")),
    )
    state, stats = trainer.fit().return_value
    return {k: torch.tensor(v) for k, v in state.items()}, PhaseStats(**stats)
