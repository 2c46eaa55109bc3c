"""The one training loop: public steps (plain optimizer) and private steps (Opacus DP-SGD) over `LMData`.

The loss is the data's task's (`record_losses`): next-token LM loss, or classification loss on labelled rows.

A private phase samples each record independently with probability q = B/N per step (Poisson sampling, the
sampling the accountant assumes), clips each record's gradient to C and adds N(0, σ²C²) once per step
(Abadi et al. 2016, Algorithm 1). σ may change per epoch (ATDP's schedule); every step is recorded in the
ledger, which refuses steps beyond the calibrated plan.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch
from opacus.grad_sample.utils import wrap_model
from opacus.optimizers import get_optimizer_class
from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping
from torch import nn

from sdp_core.train.data import LMData, record_losses

# Opacus' hooks on the embedding see no input gradient (token ids are integers); torch warns on every step.
warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)


def ledger_key(phase: str, epoch: int) -> str:
    """The ledger's name for one epoch of a private phase (each epoch may have its own σ)."""
    return f"{phase}/epoch{epoch}"


class StepRecorder(Protocol):
    """What the loop needs of a privacy ledger: count each private step of a phase, refusing overspending."""

    def record_steps(self, phase: str, steps: int) -> None: ...


@dataclass(frozen=True)
class Phase:
    """One pass of the loop over one dataset: public (plain SGD/Adam) or private (DP-SGD)."""

    name: str
    data: LMData
    private: bool
    epochs: int
    batch_size: int
    sigmas: tuple[float, ...] = ()  # private: noise multiplier of each epoch
    max_grad_norm: float = 1.0
    max_steps: int | None = None
    runner: Callable[..., "PhaseStats"] | None = None  # a mechanism's own phase runner (S-DPSGD's segments)

    @property
    def sample_rate(self) -> float:
        return min(1.0, self.batch_size / len(self.data))

    @property
    def steps_per_epoch(self) -> int:
        return max(1, round(len(self.data) / self.batch_size))

    @property
    def total_steps(self) -> int:
        steps = self.epochs * self.steps_per_epoch
        return min(steps, self.max_steps) if self.max_steps else steps

    def epoch_steps(self) -> list[int]:
        """Steps in each epoch after the `max_steps` cap (trailing epochs may get 0)."""
        left, out = self.total_steps, []
        for _ in range(self.epochs):
            out.append(min(left, self.steps_per_epoch))
            left -= out[-1]
        return out


@dataclass
class PhaseStats:
    name: str
    private: bool
    steps: int = 0
    records_seen: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)

    def add(self, steps: int, records: int, loss: float) -> None:
        """Count `steps` optimizer steps over `records` records; a NaN loss (an empty batch) is not kept."""
        self.steps += steps
        self.records_seen += records
        if not math.isnan(loss):
            self.losses.append(loss)

    def to_dict(self) -> dict:
        return {"name": self.name, "private": self.private, "steps": self.steps, "records_seen": self.records_seen,
                "seconds": round(self.seconds, 3), "final_loss": self.losses[-1] if self.losses else None,
                "sigmas": self.sigmas}


def model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters are: every batch goes there."""
    return next(model.parameters()).device


def make_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    optimizers: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    return optimizers[name](model.parameters(), lr=lr, weight_decay=weight_decay)


def poisson_batches(n: int, q: float, steps: int, generator: torch.Generator):
    """Row indices of each step: every row included independently with probability q."""
    for _ in range(steps):
        yield torch.nonzero(torch.rand(n, generator=generator) < q).flatten()


def shuffled_batches(n: int, batch_size: int, steps: int, generator: torch.Generator):
    """Fixed-size batches over reshuffled epochs (public phases only: no privacy claim rests on them)."""
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch_size:
            order = torch.cat([order, torch.randperm(n, generator=generator)])
        yield order[:batch_size]
        order = order[batch_size:]


class PrivateTrainer:
    """Opacus pieces for one private phase: the per-sample-gradient wrapper and the DP optimizer.

    `grad_sample_mode` is `hooks` (per-sample gradients materialised) or `ghost` (ghost clipping: two backward
    passes, no per-sample gradients; Li et al. 2022, Bu et al. 2023).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, phase: Phase, grad_sample_mode: str,
                 noise_generator: torch.Generator, distributed: bool = False):
        self.mode = grad_sample_mode
        kwargs = {"max_grad_norm": phase.max_grad_norm} if grad_sample_mode == "ghost" else {}
        self.module = wrap_model(model, grad_sample_mode, batch_first=True, loss_reduction="sum", **kwargs)
        optimizer_class = get_optimizer_class(clipping="flat", distributed=distributed, grad_sample_mode=grad_sample_mode)
        self.optimizer = optimizer_class(
            optimizer,
            noise_multiplier=phase.sigmas[0],
            max_grad_norm=phase.max_grad_norm,
            expected_batch_size=max(1, round(phase.sample_rate * len(phase.data))),
            # The module sees the *sum* of per-record losses (exact per-sample gradients); the optimizer's "mean"
            # divides clipped sum + noise by the expected batch size B, so the noise on the step is σC/B.
            loss_reduction="mean",
            generator=noise_generator,
        )

    def step(self, input_ids: torch.Tensor, weights: torch.Tensor, sigma: float,
             labels: torch.Tensor | None = None) -> float:
        self.optimizer.noise_multiplier = sigma
        self.optimizer.zero_grad(set_to_none=True)
        if len(input_ids) == 0:
            self._empty_batch()
            self.optimizer.step()
            return float("nan")
        losses = record_losses(self.module(input_ids), input_ids, weights, labels)
        if self.mode == "ghost":
            DPTensorFastGradientClipping(self.module, self.optimizer, losses, "sum").backward()
        else:
            losses.sum().backward()
        self.optimizer.step()
        return losses.mean().item()

    def _empty_batch(self) -> None:
        """A Poisson batch can be empty; the step still happens (and is accounted): noise only."""
        for p in self.optimizer.params:
            if self.mode == "ghost":
                p.grad = torch.zeros_like(p)
            else:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)

    def close(self) -> nn.Module:
        """Remove Opacus hooks and give back the plain model for the next phase."""
        return self.module.to_standard_module()


def run_phase(model: nn.Module, optimizer: torch.optim.Optimizer, phase: Phase, ledger: StepRecorder | None,
              seed: int, grad_sample_mode: str = "hooks", on_step: Callable[[PhaseStats], None] | None = None) -> PhaseStats:
    """Train `model` in place for one phase. Private phases count every step in `ledger` before taking it."""
    import time

    if phase.runner is not None:
        return phase.runner(model, optimizer, phase, ledger, seed, grad_sample_mode, on_step)

    start = time.perf_counter()
    stats = PhaseStats(phase.name, phase.private)
    sampling = torch.Generator().manual_seed(seed)  # batch indices: host memory
    device = model_device(model)
    model.train()
    trainer = None
    if phase.private:  # the noise is drawn where the gradients are
        noise = torch.Generator(device=device).manual_seed(seed + 1)
        trainer = PrivateTrainer(model, optimizer, phase, grad_sample_mode, noise)
    try:
        for epoch, steps in enumerate(phase.epoch_steps()):
            if steps == 0:
                continue
            if phase.private:
                sigma = phase.sigmas[epoch]
                stats.sigmas.append(sigma)
                batches = poisson_batches(len(phase.data), phase.sample_rate, steps, sampling)
            else:
                batches = shuffled_batches(len(phase.data), min(phase.batch_size, len(phase.data)), steps, sampling)
            for rows in batches:
                batch = phase.data.subset(rows).to(device)
                if trainer is not None:
                    ledger.record_steps(ledger_key(phase.name, epoch), 1)
                    loss = trainer.step(batch.input_ids, batch.weights, sigma, batch.labels)
                else:
                    optimizer.zero_grad(set_to_none=True)
                    losses = record_losses(model(batch.input_ids), batch.input_ids, batch.weights, batch.labels)
                    losses.mean().backward()
                    optimizer.step()
                    loss = losses.mean().item()
                stats.add(1, len(rows), loss)
                if on_step is not None:
                    on_step(stats)
    finally:
        if trainer is not None:
            trainer.close()
    stats.seconds = time.perf_counter() - start
    return stats
