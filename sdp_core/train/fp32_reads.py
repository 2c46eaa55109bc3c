"""The reductions that a CPU runs compiled: the two that read an instantiated per-record gradient G_i ([B, ...]) in
fp32 — its records' squared norms, summed chunk by chunk (`chunked_squared_norms`), and its clipped sum
Σ_i c_i·G_i (`weighted_record_sum`) — and a LayerNorm's per-record gradients formed from the statistics its forward
saved (`normalized_record_sums`).

torch's eager CPU kernels neither widen a bf16 G_i (`clipping.instantiation_product`) while they read it (a bf16
reduction with an fp32 result upcasts the whole tensor first) nor multiply bf16 by fp32 into fp32, so each pass
would read an fp32 copy that a third pass made — three passes over twice the bytes, the largest part of the private
step's extra time at gpt2-tiny (29 M entries a step). Here each reduction is compiled by TorchInductor (C++, and
OpenMP over the output), which fuses the exact upcast into it: one pass over the bf16 numbers, its arithmetic in
fp32, and no fp32 copy. The norms of an fp32 G_i are read by the same kernel (a streaming read, where torch's norm
of each chunk sums it horizontally), its clipped sum by torch's matrix-vector product. A LayerNorm's
x̂ = (x − μ)·r, its product with g and the two sums over positions are likewise one pass over x and g, where eager
kernels write out a stack of the layers' x and g, x̂ and the product.
Where a CPU cannot compile (no C++ compiler), the same functions run eagerly, with the same arithmetic
(`compiled.compiled_or_eager`).
"""

from __future__ import annotations

import torch

from sdp_core.train.compiled import compiled_or_eager


SQUARES_CHUNK = 32
"""Entries whose squares are summed in fp32 before the partial sums go to float64 (`chunked_squared_norms`): a bound
γ_36 ≈ 4·10⁻⁶ below the true sum, and partial sums that take 1/32 of the tensor's memory."""


@compiled_or_eager
def _blocked_squared_norms(x: torch.Tensor) -> torch.Tensor:
    blocks = x.view(len(x), -1, SQUARES_CHUNK, SQUARES_CHUNK)
    return blocks.float().square().sum(2).double().sum((1, 2))


@compiled_or_eager
def _low_precision_weighted_record_sum(c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (c.unsqueeze(1) * x.float()).sum(0)


def chunked_squared_norms(x: torch.Tensor) -> torch.Tensor:
    """[B, n] → [B] float64: each record's Σ_j x_j², as chunks of at most k = `SQUARES_CHUNK` squares, each chunk
    summed in fp32, so at most γ_{k+4} below its true sum whatever the order of the additions (Higham 2002, Lemma
    3.1 and §3.1: the terms are positive, and a square rounds once; bf16's are exact), and the chunk sums added in
    float64. A chunk is any k of a record's entries; which ones only decides how fast they are read. On a CPU, one
    compiled kernel reads each record's blocks of k² entries and sums entries j·k + v (j < k) of a block into lane
    v: k vector additions a block, a streaming read, no fp32 or float64 copy (gpt2-tiny's head: a quarter less time
    in bf16, a sixth in fp32, than torch's norm of each k consecutive entries); the fewer than k² entries left are
    summed in float64 (far tighter than the fp32 chunks). A GPU's records: `consecutive_chunk_squared_norms`."""
    block = SQUARES_CHUNK**2
    body = x.shape[1] - x.shape[1] % block
    if x.device.type != "cpu" or body == 0:
        return consecutive_chunk_squared_norms(x)
    squares = _blocked_squared_norms(x[:, :body])
    if body == x.shape[1]:
        return squares
    return squares + torch.linalg.vector_norm(x[:, body:], dim=1, dtype=torch.float64).square()


def consecutive_chunk_squared_norms(x: torch.Tensor) -> torch.Tensor:
    """`chunked_squared_norms` as torch's norm of every k consecutive entries of a record (and of the fewer left),
    squared in float64 (its square root and the squaring are the 4 more roundings), with no copy of x."""
    k = min(x.shape[1], SQUARES_CHUNK)
    body = x.shape[1] - x.shape[1] % k
    squares = _norms_squared(x[:, :body].reshape(len(x), -1, k))
    return squares + _norms_squared(x[:, body:].unsqueeze(1)) if body < x.shape[1] else squares


def _norms_squared(chunks: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(chunks, dim=2, dtype=torch.float32).double().square().sum(-1)


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
