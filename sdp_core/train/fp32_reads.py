"""The reductions that a CPU runs compiled: the two that read an instantiated per-record gradient G_i ([B, ...]) in
fp32 — its records' squared norms, summed chunk by chunk (`chunked_squared_norms`), and its clipped sum
Σ_i c_i·G_i (`weighted_record_sum`) — and a LayerNorm's per-record gradients formed from the statistics its forward
saved (`normalized_record_sums`).

An fp32 G_i is read by torch's own kernels (a norm reduction, a matrix-vector product). A CPU's bf16 G_i
(`clipping.instantiation_product`) is not: torch's eager CPU kernels neither widen while they read (a bf16
reduction with an fp32 result upcasts the whole tensor first) nor multiply bf16 by fp32 into fp32, so each pass
would read an fp32 copy that a third pass made — three passes over twice the bytes, the largest part of the private
step's extra time at gpt2-tiny (29 M entries a step). Here each reduction is compiled by TorchInductor (C++, and
OpenMP over the output), which fuses the exact upcast into it: one pass over the bf16 numbers, its arithmetic in
fp32, and no fp32 copy. A LayerNorm's x̂ = (x − μ)·r, its product with g and the two sums over positions are
likewise one pass over x and g, where eager kernels write out a stack of the layers' x and g, x̂ and the product.
Where a CPU cannot compile (no C++ compiler), the same functions run eagerly, with the same arithmetic
(`compiled.compiled_or_eager`).
"""

from __future__ import annotations

import torch

from sdp_core.train.compiled import compiled_or_eager


@compiled_or_eager
def _low_precision_chunked_squared_norms(chunks: torch.Tensor) -> torch.Tensor:
    return chunks.float().square().sum(-1).double().sum(-1)


@compiled_or_eager
def _low_precision_weighted_record_sum(c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (c.unsqueeze(1) * x.float()).sum(0)


def chunked_squared_norms(chunks: torch.Tensor) -> torch.Tensor:
    """[B, m, k] → [B] float64: each record's m chunk sums of Σ_j x_j², each summed in fp32, so at most γ_{k+4}
    below its true sum whatever the order of the additions (Higham 2002, Lemma 3.1; the terms are positive), and
    the chunk sums added in float64. fp32: torch's norm per chunk, squared in float64 (its square root and the
    squaring are the 4 more roundings); bf16: the squares themselves, exact in fp32 (8 significant bits squared),
    summed by one compiled kernel that also adds the chunk sums in float64: no float64 copy of the [B, m] sums (its
    fp32 sums are read back once, inside the kernel)."""
    if chunks.dtype == torch.float32:
        return torch.linalg.vector_norm(chunks, dim=2).double().square().sum(-1)
    return _low_precision_chunked_squared_norms(chunks)


def weighted_record_sum(c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Σ_i c_i·x_i of [B] fp32 weights and [B, n] records, [n] fp32: the products and their B-term sum in fp32,
    as a matrix-vector product forms them (fp32: it is one)."""
    if x.dtype == torch.float32:
        return c @ x
    return _low_precision_weighted_record_sum(c, x)


@compiled_or_eager
def normalized_record_sums(x: torch.Tensor, mean: torch.Tensor, reciprocal: torch.Tensor, g: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """A LayerNorm's per-record gradients from its input x [B, T, d], the mean μ and reciprocal deviation r
    [B, T, 1] its forward saved, and its output gradient g [B, T, d]: Σ_t g_t ⊙ x̂_t (its weight's) and Σ_t g_t (its
    bias's), fp32 [B, d] each, x̂ = (x − μ)·r formed in fp32 as it is read."""
    g = g.float()
    return ((x.float() - mean.float()) * reciprocal.float() * g).sum(1), g.sum(1)
