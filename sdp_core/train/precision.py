"""Mixed precision for training steps (`training.precision`): what runs in low precision and what stays fp32.

Micikevicius et al. 2018 ("Mixed precision training"): the forward and backward run under `torch.autocast`, so
activations, output gradients and the per-record gradient pieces built from them are bf16 or fp16, while the
weights stay fp32 masters that the optimizer updates. A private step keeps the privacy-relevant arithmetic in
fp32 whatever the precision: per-record norms are accumulated in fp32 from the pieces, and the clipping factors,
the clipped sum and the Gaussian noise are fp32 (see `clipping`). fp16's narrow range needs loss scaling: the
per-record losses are multiplied by `loss_scale` before the backward and every piece is divided by it again in
fp32. A private step's scale is fixed (a scale that adapts to overflows would let one record's gradient change
how every other record is rounded); a record whose pieces overflow is clipped to weight 0, as is any record
whose norm is not finite. Public steps use torch's dynamic `GradScaler`.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import ContextManager

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """A resolved `training.precision` (fp32, bf16 or fp16) and, for fp16, the private steps' fixed loss scale."""

    name: str = "fp32"
    loss_scale: float = 1.0

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.name]

    @property
    def low(self) -> bool:
        """Whether the forward and backward run in a 16-bit format."""
        return self.name != "fp32"

    def autocast(self, device: torch.device) -> ContextManager:
        """The context a forward runs in: autocast to the low precision, or nothing for fp32."""
        if not self.low:
            return nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)


FP32 = Precision()


def resolve_precision(setting: str, device: torch.device, loss_scale: float = 1024.0) -> Precision:
    """`auto` is bf16 on a GPU that supports it, fp32 elsewhere (a CPU has no 16-bit matrix units to gain from)."""
    if setting == "auto":
        setting = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return Precision(setting, loss_scale if setting == "fp16" else 1.0)


def use_tf32(device: torch.device, enabled: bool) -> None:
    """TF32 tensor-core matmuls for the fp32 work on an NVIDIA GPU (10-bit mantissa products, fp32 accumulation):
    the fp32 step and the fp32 parts of a mixed step. A process-wide switch, set through torch's `fp32_precision`
    settings (reading the legacy `allow_tf32` after they were used raises); nothing to do off the GPU."""
    if device.type == "cuda":
        setting = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = setting
        torch.backends.cudnn.conv.fp32_precision = setting
        torch.backends.cudnn.rnn.fp32_precision = setting


FP32_MATMUL_OPERAND_ROUNDOFF = {"tf32": 2.0**-11, "bf16": 2.0**-8}
"""Unit roundoff of the operand format an fp32 CUDA matmul rounds to under each `fp32_precision` ('ieee': none)."""


def cuda_fp32_matmul_roundoff() -> float:
    """u such that an fp32 matmul on the GPU reads each operand entry v as v·(1 + δ), |δ| ≤ u: TF32's 2⁻¹¹ when
    TF32 is on however it was switched on (`use_tf32`, `torch.set_float32_matmul_precision`, the legacy
    `allow_tf32`, or the global `torch.backends.fp32_precision` that a backend's 'none' defers to), 0 for IEEE."""
    setting = torch.backends.cuda.matmul.fp32_precision
    if setting == "none":
        setting = torch.backends.fp32_precision
    return FP32_MATMUL_OPERAND_ROUNDOFF.get(setting, 0.0)


def clip_factors(norms: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """c_i = min(1, C/‖G_i‖) in fp32, as Opacus' `DPOptimizer` (with its 1e-6), and 0 for a record whose norm is
    inf or NaN (an overflow): that record then adds nothing, and never turns the clipped sum into NaN."""
    norms = norms.float()
    factors = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    return torch.where(torch.isfinite(norms), factors, torch.zeros_like(factors))


def scaled_rows(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """x_i · c_i over the leading (record) axis, with a record of weight 0 exactly 0 even where x_i holds inf/NaN."""
    c = c.view(-1, *([1] * (x.dim() - 1)))
    return torch.where(c > 0, x * c, torch.zeros((), dtype=x.dtype, device=x.device))
