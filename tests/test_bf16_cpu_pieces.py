"""A CPU's bf16 pieces in `bk`: per-record largest magnitudes (the power-of-two scales of Gram matrices) and bias
gradients summed in bf16, each against float64 references formed entry by entry."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sdp_core.train.clipping import jointly_instantiated, largest_magnitudes, linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_largest_magnitudes_are_each_records_largest_entry_inf_and_nan_included(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 6, 5, generator=gen) * 1e-20).to(dtype)
    x[1, 2, 3] = -math.inf
    x[2, 0, 0] = math.nan
    largest = largest_magnitudes(x)
    assert largest.dtype == torch.float32
    for i, record in enumerate(x.double().flatten(1).tolist()):
        expected = math.nan if any(math.isnan(v) for v in record) else max(abs(v) for v in record)
        if math.isnan(expected):
            assert math.isnan(largest[i].item())
        else:
            assert largest[i].item() == expected  # exact: the scale is a power of two read off its exponent


def test_a_cpu_bf16_bias_gradient_is_the_rounded_sum_whose_norm_and_clipped_sum_read_the_same_numbers():
    """Σ_t g_it accumulated in fp32 and rounded once to bf16 (8 significant bits), and the squared norm that clips it
    bounds the squared norm of exactly the numbers its clipped sum adds."""
    gen = torch.Generator().manual_seed(0)
    layer = nn.Linear(8, 48)
    a = torch.randn(5, 64, 8, generator=gen).bfloat16()
    g = torch.randn(5, 64, 48, generator=gen).bfloat16()
    bias = linear(layer, a, g)["bias"]
    assert isinstance(bias, torch.Tensor) and bias.dtype == torch.float32
    exact = g.double().sum(1)
    accumulation = 64 * 2.0**-23 * g.double().abs().sum(1)  # γ_64 · Σ_t |g_it|, above the fp32 accumulation's error
    assert ((bias.double() - exact).abs() <= 2.0**-8 * exact.abs() + 2 * accumulation).all()
    assert torch.equal(bias, bias.bfloat16().float())  # bf16 numbers, upcast exactly
    joint, _ = jointly_instantiated([bias])
    summed = bias.double().square().sum(1)
    assert (joint.squared_norms >= summed).all() and (joint.squared_norms <= summed * (1 + 1e-5)).all()
    c = torch.rand(5, generator=gen)
    torch.testing.assert_close(joint.clipped_sum(c).double(), c.double() @ bias.double(), rtol=1e-6, atol=1e-6)
