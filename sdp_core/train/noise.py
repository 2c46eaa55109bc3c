"""The private step's Gaussian noise and its division by the expected batch size, over all parameters at once.

DP-SGD (Abadi et al. 2016, Algorithm 1) adds N(0, σ²C²) to every coordinate of the sum of clipped per-record
gradients, once per step, and divides by the expected batch size B. Opacus' DP optimizers do this parameter by
parameter (`add_noise`: a zero tensor, a draw and an add for each; `scale_grad`: a division for each), which on a
GPU costs more host time than device time (GPT-2 has 12 tensors per layer). `MultiTensorNoise` keeps their
arithmetic and launches it for many parameters at once:

- the draws are the phase's noise source's (`randomness.NoiseSource`, given to the optimizer as its `generator`: an
  AES-256-CTR keystream on a CPU, torch's Philox on a GPU), with Opacus' `secure_mode` (each coordinate the sum
  of four draws, halved, against floating-point attacks: Holohan & Braghin 2021), fp32, one call per block of
  consecutive parameters of up to `noise_block` entries instead of one per parameter: every coordinate still gets
  its own independent N(0, σ²C²);
- the noise is added to the clipped sums with one `torch._foreach_add` per block, and every gradient is divided by
  B with one `torch._foreach_div_`.

In ghost mode (book-keeping's clipped sum given in p.grad) `GivenClippedSum` also takes that sum over without
Opacus' copy of every parameter's (`accumulate`).

Under data parallelism only rank 0 adds noise, as in Opacus' distributed optimizers (the ranks' sums are then
all-reduced by them).
"""

from __future__ import annotations

import functools
from typing import cast

import torch
from opacus.optimizers import DPOptimizer, get_optimizer_class
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

from sdp_core.train.clipping import BoundedNormClipping
from sdp_core.train.randomness import NoiseSource


def noise_block(device: torch.device) -> int:
    """Entries drawn per call. On a GPU, where each launch costs host time, 2²⁴: a few calls for GPT-2's parameters,
    each 64 MiB of fp32, small next to the model (a larger parameter is drawn alone). On a CPU, 2²² (16 MiB, and
    its words as much: `randomness.BOX_MULLER_PAIRS`): one compiled transform a block, 26 blocks at gpt2-small's
    parameters where 2²⁰ made 74; a trial's process keeps freed memory (`host_memory`), so the next step reuses
    them."""
    return 2**24 if device.type == "cuda" else 2**22


def parameter_blocks(sizes: list[int], block: int) -> list[range]:
    """Consecutive runs of parameters (their indices) holding at most `block` entries each, or one parameter."""
    blocks: list[range] = []
    start, entries = 0, 0
    for i, size in enumerate(sizes):
        if i > start and entries + size > block:
            blocks.append(range(start, i))
            start, entries = i, 0
        entries += size
    return blocks + [range(start, len(sizes))] if sizes else blocks


class MultiTensorNoise(DPOptimizer):
    """Opacus' `add_noise` and `scale_grad` as multi-tensor operations (see the module docstring); placed before an
    Opacus DP optimizer class in a subclass's bases (`dp_optimizer_class`), it replaces those two steps only."""

    def add_noise(self) -> None:
        """p.grad = p.summed_grad + N(0, σ²C²) per coordinate (rank 0; the sum alone on other ranks, or σC = 0)."""
        summed = [p.summed_grad for p in self.params]
        _check_processed_flag(summed)
        grads = summed
        rank = getattr(self, "rank", 0)  # set by Opacus' distributed optimizers; one worker is rank 0
        if summed and rank == 0 and self.noise_multiplier * self.max_grad_norm > 0:
            grads = []
            for block in parameter_blocks([s.numel() for s in summed], noise_block(summed[0].device)):
                parts = [summed[i] for i in block]
                noise = self.draw([s.numel() for s in parts])
                grads += torch._foreach_add(parts, [n.view_as(s) for n, s in zip(noise, parts)])
        for p, grad in zip(self.params, grads):
            p.grad = grad.view_as(p)
        _mark_as_processed(summed)

    def draw(self, sizes: list[int]) -> tuple[torch.Tensor, ...]:
        """One call of the noise source for parameters of these sizes: N(0, σ²C²) per entry, fp32 (the weights'),
        split into one flat tensor per parameter."""
        source = self.generator
        if not isinstance(source, NoiseSource):  # Opacus' own convention, a torch.Generator, does not draw here
            raise TypeError(f"a DP optimizer's generator is a randomness.NoiseSource, not a {type(source).__name__}")
        noise = source.normal(sum(sizes), self.noise_multiplier * self.max_grad_norm, self.secure_mode)
        return noise.split(sizes)

    def scale_grad(self) -> None:
        """Opacus' loss_reduction "mean": every gradient divided by the expected batch size (of this rank)."""
        if self.loss_reduction == "mean":
            torch._foreach_div_([p.grad for p in self.params], self.expected_batch_size * self.accumulated_iterations)


class GivenClippedSum(DPOptimizer):
    """Opacus' `DPOptimizerFastGradientClipping.accumulate` (the clipped sum given in p.grad becomes
    `p.summed_grad`) without its copy of every parameter's sum: the clipping hands over a fresh sum each step, which
    nothing else holds, and `add_noise` replaces p.grad by the noised sum (rank 0) or keeps the sum itself as it
    (other ranks). Sums already accumulated (several backwards before a step) are added to with one multi-tensor
    add. Placed before Opacus' ghost-mode DP optimizer class in a subclass's bases (`dp_optimizer_class`)."""

    def accumulate(self) -> None:
        accumulated = [p for p in self.params if p.summed_grad is not None]
        if accumulated:
            torch._foreach_add_([p.summed_grad for p in accumulated], [p.grad for p in accumulated])
        for p in self.params:
            if p.summed_grad is None:
                p.summed_grad = p.grad


@functools.cache
def dp_optimizer_class(grad_sample_mode: str, distributed: bool) -> type[DPOptimizer]:
    """Opacus' flat-clipping DP optimizer for the clipping's `optimizer_mode` (hooks: per-sample gradients it clips
    itself, with norms bounded from above by `clipping.BoundedNormClipping`; ghost: a clipped sum given in p.grad,
    taken without a copy by `GivenClippedSum`), single worker or distributed, with `MultiTensorNoise`."""
    opacus_class = get_optimizer_class(clipping="flat", distributed=distributed, grad_sample_mode=grad_sample_mode)
    clipping = BoundedNormClipping if grad_sample_mode == "hooks" else GivenClippedSum
    subclass = type(f"MultiTensorNoise{opacus_class.__name__}", (MultiTensorNoise, clipping, opacus_class), {})
    return cast(type[DPOptimizer], subclass)
