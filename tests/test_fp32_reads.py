"""The two reductions over instantiated per-record gradients, bf16 (compiled) and fp32, against float64 references
formed from the very numbers they read: each record's chunked sum of squares within the γ_{k+4} bound the norms rely
on, and Σ_i c_i·x_i within an fp32 B-term accumulation."""

from __future__ import annotations

import pytest
import torch

from sdp_core.train.clipping import gamma
from sdp_core.train.fp32_reads import (SQUARES_CHUNK, chunked_squared_norms, consecutive_chunk_squared_norms,
                                       normalized_record_sums, weighted_record_sum)


def _wide_range(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Entries spread over 2⁻³⁰..2³⁰, so that an fp32 sum rounds at every step."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64)
            * 2.0 ** torch.randint(-30, 31, shape, generator=gen)).to(dtype)


@pytest.mark.parametrize("norms", [chunked_squared_norms, consecutive_chunk_squared_norms])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(5, 1280), (1, 7), (3, 32000), (2, 45), (4, 1024), (2, 3000)])
def test_chunked_squared_norms_are_within_their_bound_of_the_float64_sums(norms, dtype, shape):
    """Both ways of chunking (the CPU's compiled blocks of 32² entries and its rest in float64; a GPU's torch norm of
    every 32 consecutive entries, run here on the CPU) within γ_36 of float64 sums of the very numbers."""
    x = _wide_range(shape, dtype, seed=sum(shape))
    computed = norms(x)
    exact = x.double().square().sum(1)
    assert computed.dtype == torch.float64 and computed.shape == shape[:1]
    assert ((computed - exact).abs() <= gamma(SQUARES_CHUNK + 4) * exact).all()
    assert (computed != exact).any() or shape[-1] < 8  # the bound is exercised, not an exact sum


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(5, 1000), (1, 33), (32, 4096)])
def test_a_weighted_record_sum_is_within_an_fp32_accumulation_of_the_float64_one(dtype, shape):
    x = _wide_range(shape, dtype, seed=shape[1])
    c = torch.rand(shape[0], generator=torch.Generator().manual_seed(1))
    computed = weighted_record_sum(c, x)
    exact = c.double() @ x.double()
    magnitudes = c.double() @ x.double().abs()
    assert computed.dtype == torch.float32 and computed.shape == shape[1:]
    assert ((computed.double() - exact).abs() <= gamma(shape[0] + 1) * magnitudes).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(4, 37, 24), (1, 1, 8), (2, 300, 40)])
def test_a_layer_norms_record_sums_are_within_an_fp32_accumulation_of_the_float64_ones(dtype, shape):
    """Σ_t g_t ⊙ x̂_t and Σ_t g_t, x̂ = (x − μ)·r from the statistics given, against float64 sums of the very
    numbers read (x in fp32, as a LayerNorm's input is; g in either format)."""
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=gen) * 3 + 1
    mean, reciprocal = x.mean(-1, keepdim=True), torch.rand(shape[:2] + (1,), generator=gen) + 0.5
    g = _wide_range(shape, dtype, seed=shape[1])
    weight, bias = normalized_record_sums(x, mean, reciprocal, g)
    x_hat = (x.double() - mean.double()) * reciprocal.double()
    terms = g.double() * x_hat
    assert weight.dtype == bias.dtype == torch.float32 and weight.shape == bias.shape == (shape[0], shape[2])
    assert ((weight.double() - terms.sum(1)).abs() <= gamma(shape[1] + 3) * terms.abs().sum(1)).all()
    assert ((bias.double() - g.double().sum(1)).abs() <= gamma(shape[1]) * g.double().abs().sum(1)).all()
