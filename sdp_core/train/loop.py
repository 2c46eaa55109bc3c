"""The one training loop: `train_phase` walks a phase's sampled batches and hands each to the phase's step.

    for each epoch e, for each batch the sampler draws:
        private phase: charge the ledger one event of epoch e  (before the batch touches the model)
        step(batch, σ_e)                                    (public step, DP step, or a mechanism's own step)
        on_step(stats)                                      (progress, the sweep's reports)

- The sampler: a private phase Poisson-samples each *record* independently with probability q = B/N per batch,
  N its records (the sampling the accountant assumes); a record longer than a row comes with all its rows (its
  windows, `text.encode`), so the record, not the row, is the privacy unit. A public phase takes fixed-size
  batches of rows over reshuffled epochs. Under data parallelism each rank holds whole records (`shard`) and
  samples them at the same q, so the ranks' union is one Poisson sample of records.
- The step: `Phase.batch_step` builds it. A public phase takes a plain optimizer step (`PublicStep`); a private
  one clips each record's gradient (the sum of its rows') to C and adds N(0, σ²C²) once (`DPStep`, Abadi et al.
  2016, Algorithm 1); a mechanism with its own per-batch walk (Selective-DPSGD's segments) subclasses `Phase` and
  returns its step.
- The ledger is charged once per sampled batch, with that batch's composed event: a mechanism whose step makes
  several releases on one sample (S-DPSGD) plans one event that composes them. The ledger refuses a batch
  beyond the calibrated plan.
- Privacy randomness (Poisson sampling and noise) comes from `randomness.PrivacyRandomness`: by default AES-256-CTR
  keystreams (a GPU's noise: its Philox generator) keyed from the operating system's entropy and never written
  anywhere, so a published trial seed does not regenerate it. The trial seed fixes initialisation and public
  batches only.
- Nothing computed from a private batch leaves the loop: private phases keep no loss and count expected
  (not sampled) records.
- Precision (`precision.Precision`): every step's forward runs under its autocast; weights, the optimizer, and a
  private step's norms, clipping, clipped sum and noise stay fp32.
- The trial's settings of its steps (clipping mode, precision, noise source, secure mode) reach the loop as one
  `StepSettings`, the same for every phase and every rank.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import torch
from torch import nn
from torch.profiler import record_function

from sdp_core.config.training import PrivacyConfig, TrainingConfig
from sdp_core.tensors import LMData, model_device, record_groups, record_losses
from sdp_core.train.host_memory import keep_freed_host_memory
from sdp_core.train.precision import FP32, Precision, resolve_precision, use_tf32
from sdp_core.train.randomness import RANK_SEED_STRIDE, Keystream, NoiseSource, PrivacyRandomness
from sdp_core.train.shared_pages import PIECE_ROWS, in_shared_memory, mapped_files_mb, unmap_pages


def ledger_key(phase: str, epoch: int) -> str:
    """The ledger's name for one epoch of a private phase (each epoch may have its own σ)."""
    return f"{phase}/epoch{epoch}"


class StepRecorder(Protocol):
    """What the loop needs of a privacy ledger: count each private batch of a phase, refusing overspending."""

    def record_steps(self, phase: str, steps: int) -> None: ...


# -------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class StepSettings:
    """How a trial's steps run, the same in every phase and on every rank: built once per trial (`from_config`).

    `precision` is the setting (`auto` included): each rank resolves it on its model's device
    (`precision.resolve_precision`). `tf32` and `keep_host_memory` are process-wide switches, which each training
    process (the trial's, each Ray Train worker's) sets once (`set_process_switches`). The defaults are the loop's
    own, for a caller without a config (a test, a benchmark): per-sample hooks, fp32, secret noise.
    """

    grad_sample_mode: str = "hooks"  # how a private step clips (`clipping.CLIPPING`)
    precision: str = "fp32"  # `training.precision`
    loss_scale: float = 1024.0  # fp16: a private step's fixed loss scale
    tf32: bool = True
    keep_host_memory: bool = True  # `host_memory.keep_freed_host_memory`
    shared_rows_mb: int | None = 128  # `training.shared_rows_mb`: MB of the store a phase maps before it unmaps rows
    reproducible_noise: bool = False  # debugging only: privacy randomness from the trial seed (`PrivacyRandomness`)
    secure_mode: bool = False  # Opacus' noise that resists floating-point attacks (`privacy.secure_mode`)

    @classmethod
    def from_config(cls, training: TrainingConfig, privacy: PrivacyConfig) -> StepSettings:
        return cls(grad_sample_mode=training.grad_sample_mode, precision=training.precision,
                   loss_scale=training.loss_scale, tf32=training.tf32, keep_host_memory=training.keep_host_memory,
                   shared_rows_mb=training.shared_rows_mb, reproducible_noise=privacy.reproducible_noise,
                   secure_mode=privacy.secure_mode)

    def set_process_switches(self, device: torch.device) -> None:
        """This process's switches for training on `device`: TF32 (`precision.use_tf32`) and, for a CPU's steps,
        freed host memory kept for the next step (`host_memory.keep_freed_host_memory`; a GPU's steps allocate on
        the GPU, through torch's own caching allocator)."""
        use_tf32(device, self.tf32)
        if self.keep_host_memory and device.type == "cpu":
            keep_freed_host_memory()


# --------------------------------------------------------------------------------------------- phases


@dataclass(frozen=True)
class StepContext:
    """What a phase's step is built from: the model and optimizer it trains, and where its randomness lives."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    grad_sample_mode: str
    noise: NoiseSource
    world_size: int = 1  # > 1: one of several data-parallel ranks (Opacus' distributed DP optimizer)
    precision: Precision = FP32
    secure_mode: bool = False  # Opacus' noise that resists floating-point attacks (`privacy.secure_mode`)


class BatchStep(Protocol):
    """Trains the model on one sampled batch; returns the batch's loss for a public step, None for a private one."""

    def __call__(self, batch: LMData, sigma: float) -> float | None: ...

    def close(self) -> nn.Module: ...


@dataclass(frozen=True)
class Phase:
    """One pass of the loop over one dataset: public (plain SGD/Adam) or private (DP-SGD)."""

    name: str
    data: LMData
    private: bool
    epochs: int
    batch_size: int
    sigmas: tuple[float, ...] = ()  # private: noise multiplier of each epoch (of each batch's composed event)
    max_grad_norm: float = 1.0
    max_steps: int | None = None

    @property
    def units(self) -> int:
        """N, what a batch draws `batch_size` of: records in a private phase (the privacy unit: a record longer than
        a row is sampled and clipped with all its rows), rows in a public one."""
        return self.data.records if self.private else len(self.data)

    @property
    def sample_rate(self) -> float:
        return min(1.0, self.batch_size / self.units)

    @property
    def expected_batch_size(self) -> float:
        """q·N: what a DP step divides by (a constant, unlike the sampled batch's size)."""
        return self.sample_rate * self.units

    @property
    def steps_per_epoch(self) -> int:
        return max(1, round(self.units / self.batch_size))

    @property
    def total_steps(self) -> int:
        steps = self.epochs * self.steps_per_epoch
        return min(steps, self.max_steps) if self.max_steps else steps

    def epoch_steps(self) -> list[int]:
        """Batches in each epoch after the `max_steps` cap (trailing epochs may get 0)."""
        left, out = self.total_steps, []
        for _ in range(self.epochs):
            out.append(min(left, self.steps_per_epoch))
            left -= out[-1]
        return out

    def batch_step(self, ctx: StepContext) -> BatchStep:
        """The per-batch step: a DP step for a private phase, a plain one for a public phase."""
        return DPStep(ctx, self) if self.private else PublicStep(ctx)


@dataclass
class PhaseStats:
    """What a phase reports: steps, records, seconds, σ per epoch; losses of public steps only."""

    name: str
    private: bool
    steps: int = 0
    records_seen: float = 0.0  # `Phase.units`; a private phase counts expected records q·N a batch, not sampled
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)

    def add(self, records: float, loss: float | None) -> None:
        """Count one batch; a missing or NaN loss (a private step, an empty batch) is not kept."""
        self.steps += 1
        self.records_seen += records
        if loss is not None and not math.isnan(loss):
            self.losses.append(loss)

    def to_dict(self) -> dict:
        return {"name": self.name, "private": self.private, "steps": self.steps,
                "records_seen": round(self.records_seen, 3), "seconds": round(self.seconds, 3),
                "final_loss": self.losses[-1] if self.losses else None, "sigmas": self.sigmas}


# ---------------------------------------------------------------------------------------------- steps


def make_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """torch's AdamW or SGD over what trains (a frozen base, LoRA's, gets neither noise nor optimizer state), in
    torch's fused form (as Hugging Face's Trainer does by default): one multi-tensor operation updates all of them,
    where a CPU's default form runs about nine operations per parameter (gpt2-tiny's step on one thread: 1.3 against
    3.1 ms). The same update rule, for a private and a non-private step alike."""
    optimizers: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    trained = [p for p in model.parameters() if p.requires_grad]
    return optimizers[name](trained, lr=lr, weight_decay=weight_decay, fused=True)


class PublicStep:
    """A plain optimizer step on the batch's mean record loss, in the context's precision (fp16: torch's dynamic
    loss scaling, which skips a step whose gradients overflow; a public step carries no privacy claim)."""

    def __init__(self, ctx: StepContext):
        self.model, self.optimizer, self.precision = ctx.model, ctx.optimizer, ctx.precision
        self.device = model_device(ctx.model)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=ctx.precision.name == "fp16")

    def __call__(self, batch: LMData, sigma: float) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        with record_function("step.forward"), self.precision.autocast(self.device):
            losses = record_losses(self.model(batch.input_ids), batch.input_ids, batch.weights, batch.labels)
        with record_function("step.backward"):
            self.scaler.scale(losses.mean()).backward()
        with record_function("step.optimizer"):
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return losses.mean().item()

    def close(self) -> nn.Module:
        return self.model


class DPStep:
    """One private phase's per-record clipping and Opacus DP optimizer.

    `grad_sample_mode` picks how the clipped sum of per-record gradients is computed (`clipping.CLIPPING`):
    `hooks` (per-sample gradients materialised) or `bk` (book-keeping: one backward, no per-sample gradients;
    Bu et al. 2023). Noise, division by B and the step are Opacus' DP optimizer's in every mode, its noise and
    division launched for all parameters at once (`noise.MultiTensorNoise`). With `world_size` > 1 the optimizer
    is Opacus' distributed one: it adds the noise once (rank 0) and all-reduces; every rank divides by B/world, so
    the all-reduced update is (Σ clipped + noise)/B, as on one worker. The forward runs under the precision's
    autocast; the backward, the clipping and the optimizer outside it, so the clipped sum and the noise are fp32
    on the fp32 weights.
    """

    def __init__(self, ctx: StepContext, phase: Phase):
        # Opacus (and the torch dynamo it imports, 2 CPU-s) only where a private step is taken: a sweep's driver
        # plans phases with this module and never steps.
        from sdp_core.train.clipping import CLIPPING
        from sdp_core.train.noise import dp_optimizer_class

        self.precision, self.device = ctx.precision, model_device(ctx.model)
        self.clipping = CLIPPING[ctx.grad_sample_mode](ctx.model, phase.max_grad_norm, ctx.precision.loss_scale)
        self.module = self.clipping.module
        optimizer_class = dp_optimizer_class(self.clipping.optimizer_mode, distributed=ctx.world_size > 1)
        self.optimizer = optimizer_class(
            ctx.optimizer,
            noise_multiplier=phase.sigmas[0],
            max_grad_norm=phase.max_grad_norm,
            expected_batch_size=max(1, round(phase.expected_batch_size)),
            # The module sees the *sum* of per-record losses (exact per-sample gradients); the optimizer's "mean"
            # divides clipped sum + noise by the expected batch size B, so the noise on the step is σC/B.
            loss_reduction="mean",
            generator=ctx.noise,
            secure_mode=ctx.secure_mode,
        )
        self.optimizer.expected_batch_size /= ctx.world_size

    def __call__(self, batch: LMData, sigma: float) -> None:
        self.optimizer.noise_multiplier = sigma
        self.optimizer.zero_grad(set_to_none=True)
        if len(batch) == 0:
            self.empty_batch()
        else:
            with record_function("step.forward"), self.precision.autocast(self.device):
                losses = record_losses(self.module(batch.input_ids), batch.input_ids, batch.weights, batch.labels)
            with record_function("step.clipping"):
                self.clipping.backward(losses, self.optimizer, record_groups(batch.record_index))
        with record_function("step.noise_and_optimizer"):
            self.optimizer.step()

    def empty_batch(self) -> None:
        """A Poisson batch can be empty; the step still happens (and is accounted): noise only."""
        self.clipping.empty_batch(self.optimizer)

    def close(self) -> nn.Module:
        """Remove the clipping's hooks and give back the plain model for the next phase."""
        return self.clipping.close()


# ----------------------------------------------------------------------------------------------- loop


def poisson_batches(records: torch.Tensor, q: float, steps: int, stream: Keystream) -> Iterator[torch.Tensor]:
    """Row indices of each step: every record included independently with probability q (at most q: see
    `Keystream.bernoulli`), with all its rows. `records` numbers each row's record 0 .. R−1 (`LMData.groups`)."""
    n = int(records.max()) + 1 if len(records) else 0
    for _ in range(steps):
        yield torch.nonzero(stream.bernoulli(n, q)[records]).flatten()


def shard(data: LMData, rank: int, world_size: int) -> LMData:
    """Rank `rank`'s share of a data-parallel phase: every `world_size`-th record, each with all its rows, so a
    record is sampled and clipped whole on one rank."""
    return data.subset(torch.nonzero(data.groups % world_size == rank).flatten())


def shuffled_batches(n: int, batch_size: int, steps: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Fixed-size batches over reshuffled epochs (public phases only: no privacy claim rests on them)."""
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch_size:
            order = torch.cat([order, torch.randperm(n, generator=generator)])
        yield order[:batch_size]
        order = order[batch_size:]


def train_phase(model: nn.Module, optimizer: torch.optim.Optimizer, phase: Phase, ledger: StepRecorder | None,
                seed: int, *, settings: StepSettings = StepSettings(), rank: int = 0, world_size: int = 1,
                on_step: Callable[[PhaseStats], None] | None = None) -> PhaseStats:
    """Train `model` in place for one phase; a private phase charges `ledger` once per batch before taking it.

    With `world_size` > 1 this is rank `rank` of a data-parallel phase: it trains on its shard (records r, r+W, ...)
    at the phase's global sampling rate, and the phase's step all-reduces. `seed` fixes public batches (and,
    with `settings.reproducible_noise`, the privacy randomness; see `PrivacyRandomness`).
    """
    start = time.perf_counter()
    stats = PhaseStats(phase.name, phase.private)
    device = model_device(model)
    rng = PrivacyRandomness.for_phase(seed, device, phase.private, settings.reproducible_noise, rank)
    public_order = torch.Generator().manual_seed(seed + rank * RANK_SEED_STRIDE)
    data = shard(phase.data, rank, world_size) if world_size > 1 else phase.data
    precision = resolve_precision(settings.precision, device, settings.loss_scale)
    model.train()
    step = phase.batch_step(StepContext(model, optimizer, settings.grad_sample_mode, rng.noise, world_size, precision,
                                        settings.secure_mode))
    # The object store's rows (`shared_pages`): a batch reads them a piece at a time, and the pages each piece maps
    # in are unmapped once the process maps more than `shared_rows_mb` beyond what it mapped when the phase began.
    shared_limit = settings.shared_rows_mb
    shared_rows = in_shared_memory(t for part in data.parts for t in part.stored()) if shared_limit is not None else []
    mapped_at_start = mapped_files_mb() if shared_rows else 0.0

    def unmap_past_limit() -> None:
        if shared_limit is not None and mapped_files_mb() - mapped_at_start > shared_limit:
            unmap_pages(shared_rows)  # their data stays in the object store

    reading = (PIECE_ROWS, unmap_past_limit) if shared_rows else (None, None)
    try:
        for epoch, steps in enumerate(phase.epoch_steps()):
            if steps == 0:
                continue
            if phase.private:
                sigma = phase.sigmas[epoch]
                stats.sigmas.append(sigma)
                batches = poisson_batches(data.groups, phase.sample_rate, steps, rng.sampling)
            else:
                sigma = 0.0
                batches = shuffled_batches(len(data), min(phase.batch_size, len(data)), steps, public_order)
            for rows in batches:
                if phase.private:
                    assert ledger is not None, "a private phase is charged to its ledger"
                    ledger.record_steps(ledger_key(phase.name, epoch), 1)
                batch = data.subset(rows, *reading).to(device)
                loss = step(batch, sigma)
                stats.add(phase.expected_batch_size if phase.private else len(rows), loss)
                if on_step is not None:
                    on_step(stats)
    finally:
        step.close()
        if shared_rows:  # what this phase left mapped, so that the next phase's pages do not add to it
            unmap_pages(shared_rows)
    stats.seconds = time.perf_counter() - start
    return stats
