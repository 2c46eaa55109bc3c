"""The private step's defining properties: noise std σC/B, Poisson batch sizes, exactness with σ = 0."""

from __future__ import annotations


import pytest
import torch

from sdp_core.models.gpt2 import build_gpt2
from sdp_core.tensors import LMData, per_record_loss
from sdp_core.train.loop import DPStep, Phase, StepContext, poisson_batches

VOCAB, T = 300, 16


def _data(n: int, seed: int = 0) -> LMData:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (n, T), generator=g)
    w = torch.ones(n, T)
    w[:, 0] = 0
    return LMData(ids, w, torch.zeros(n, T, dtype=torch.bool), torch.arange(n))


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return build_gpt2("gpt2-tiny", None, VOCAB, T, 0.0)


def _flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("empty_batch", [False, True])
def test_zero_gradient_dp_step_adds_noise_of_std_sigma_c_over_b(empty_batch):
    sigma, clip, batch = 1.3, 0.7, 8
    data = _data(64)
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    phase = Phase("dp", data, private=True, epochs=1, batch_size=batch, sigmas=(sigma,), max_grad_norm=clip)
    trainer = DPStep(StepContext(model, sgd, "hooks", torch.Generator().manual_seed(0)), phase)
    before = _flat_params(model)
    rows = torch.arange(0) if empty_batch else torch.arange(batch)
    zero_loss = data.subset(rows).with_weights(torch.zeros(len(rows), T))  # zero loss -> zero gradients
    trainer(zero_loss, sigma)
    noise = before - _flat_params(trainer.close())
    expected = sigma * clip / batch
    assert noise.numel() > 100_000
    assert abs(noise.std().item() / expected - 1) < 0.01
    assert abs(noise.mean().item()) < 0.01 * expected


def test_poisson_batch_sizes_have_mean_qn():
    n, q, steps = 1000, 0.05, 2000
    sizes = torch.tensor([len(b) for b in poisson_batches(n, q, steps, torch.Generator().manual_seed(1))], dtype=torch.float)
    assert abs(sizes.mean().item() - q * n) < 4 * (q * (1 - q) * n / steps) ** 0.5
    assert abs(sizes.var().item() / (q * (1 - q) * n) - 1) < 0.1  # binomial, not fixed-size


@pytest.mark.parametrize("mode", ["hooks", "bk"])
def test_sigma_zero_without_clipping_equals_plain_step(mode):
    data = _data(8)
    weights = torch.rand(8, T) * data.weights  # token weights are honoured by both paths
    plain, private = _model(), _model()
    sgd = torch.optim.SGD(plain.parameters(), lr=0.1)
    sgd.zero_grad()
    per_record_loss(plain(data.input_ids), data.input_ids, weights).mean().backward()
    sgd.step()

    phase = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(0.0,), max_grad_norm=1e6)
    trainer = DPStep(StepContext(private, torch.optim.SGD(private.parameters(), lr=0.1), mode, torch.Generator()), phase)
    trainer(data.with_weights(weights), 0.0)
    a, b = _flat_params(plain), _flat_params(trainer.close())
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
