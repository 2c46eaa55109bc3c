"""The private step's multi-tensor noise (`noise.MultiTensorNoise`) against Opacus' own DP optimizer on the same
clipped sums: the same division by B, and noise that scipy's tests find to be N(0, σ²C²) per coordinate,
independent across parameters, as Opacus' per-parameter draws are, from either noise source (`randomness`: a CPU's
AES-CTR keystream, and torch's generator, which a GPU uses)."""

from __future__ import annotations

import pytest
import torch
from opacus.optimizers import DPOptimizerFastGradientClipping
from scipy import stats

from sdp_core.train.noise import dp_optimizer_class, parameter_blocks
from sdp_core.train.randomness import Keystream, TorchNoise

SHAPES = [(300, 7), (13,), (64, 65), (1,), (64, 65), (5000,), (17, 3, 401)]  # ~57,000 coordinates
SIGMA, CLIP, BATCH = 1.3, 0.7, 24


OURS = dp_optimizer_class("ghost", False)
SOURCES = ["keystream", "torch"]


def _noised(optimizer_class: type, sigma: float, secure_mode: bool, seed: int = 0, rank: int | None = None,
            source: str = "keystream") -> tuple[torch.Tensor, torch.Tensor]:
    """(clipped sums S, p.grad after the DP optimizer's step), each flattened over all parameters. Opacus' optimizer
    draws from a torch generator seeded with `seed`; ours from that generator (`source` "torch") or a keystream."""
    gen = torch.Generator().manual_seed(1)
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in SHAPES]
    sums = [torch.randn(shape, generator=gen) for shape in SHAPES]
    optimizer = optimizer_class(torch.optim.SGD(params, lr=0.0), noise_multiplier=sigma, max_grad_norm=CLIP,
                                expected_batch_size=BATCH, loss_reduction="mean",
                                generator=_generator(optimizer_class, seed, source), secure_mode=secure_mode)
    if rank is not None:
        optimizer.rank = rank  # what Opacus' distributed optimizers set
    for p, s in zip(params, sums):
        p.grad = s.clone()
    optimizer.step()
    return torch.cat([s.flatten() for s in sums]), torch.cat([p.grad.flatten() for p in params])


def _generator(optimizer_class: type, seed: int, source: str) -> object:
    generator = torch.Generator().manual_seed(seed)
    if optimizer_class is not OURS or source == "plain":
        return generator
    return TorchNoise(generator) if source == "torch" else Keystream.from_seed(seed, "test")


def _standard_noise(sums: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """What was added to the clipped sums, in units of σC, if the step is (S + noise)/B."""
    return ((grads.double() * BATCH - sums.double()) / (SIGMA * CLIP)).numpy()


def test_without_noise_the_step_is_opacus_division_by_b():
    sums, ours = _noised(OURS, 0.0, False)
    _, opacus = _noised(DPOptimizerFastGradientClipping, 0.0, False)
    assert torch.equal(ours, opacus)
    assert torch.equal(ours, sums / BATCH)


def test_sums_of_two_backwards_accumulate_as_opacus_accumulates_them():
    """A clipped sum taken over without a copy (`GivenClippedSum`) still adds a second backward's sum to the first,
    as Opacus' copying `accumulate` does."""
    gen = torch.Generator().manual_seed(2)
    first, second = ([torch.randn(shape, generator=gen) for shape in SHAPES] for _ in range(2))
    results = []
    for optimizer_class in (dp_optimizer_class("ghost", False), DPOptimizerFastGradientClipping):
        params = [torch.nn.Parameter(torch.zeros(shape)) for shape in SHAPES]
        optimizer = optimizer_class(torch.optim.SGD(params, lr=0.0), noise_multiplier=0.0, max_grad_norm=CLIP,
                                    expected_batch_size=BATCH, loss_reduction="mean")
        for p, s in zip(params, first):
            p.grad = s.clone()
        optimizer.accumulate()
        for p, s in zip(params, second):
            p.grad = s.clone()
        optimizer.step()
        results.append(torch.cat([p.grad.flatten() for p in params]))
    ours, opacus = results
    assert torch.equal(ours, opacus)
    assert torch.allclose(ours, torch.cat([(a + b).flatten() for a, b in zip(first, second)]) / BATCH)


def test_a_rank_other_than_zero_adds_no_noise():
    sums, grads = _noised(OURS, SIGMA, False, rank=1)
    assert torch.equal(grads, sums / BATCH)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("secure_mode", [False, True])
def test_noise_is_gaussian_sigma_c_per_coordinate_as_opacus_draws_it(secure_mode, source):
    sums, ours = _noised(OURS, SIGMA, secure_mode, source=source)
    _, opacus = _noised(DPOptimizerFastGradientClipping, SIGMA, secure_mode)
    z, reference = _standard_noise(sums, ours), _standard_noise(sums, opacus)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.01  # 57,000 draws: 4.8 and 3.4 standard errors
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert stats.ks_2samp(z, reference).pvalue > 1e-3
    # the two parameters of the same shape get their own draws, uncorrelated
    first = sum(torch.Size(s).numel() for s in SHAPES[:2])
    size = torch.Size(SHAPES[2]).numel()
    second = first + size + 1
    assert abs(stats.pearsonr(z[first:first + size], z[second:second + size]).statistic) < 0.05


def test_a_plain_torch_generator_is_refused_with_the_type_it_needs():
    with pytest.raises(TypeError, match="NoiseSource, not a Generator"):
        _noised(OURS, SIGMA, False, source="plain")


@pytest.mark.parametrize("source", SOURCES)
def test_noise_comes_from_the_optimizers_generator_only(source):
    sums, grads = _noised(OURS, SIGMA, False, seed=5, source=source)
    torch.manual_seed(123)  # torch's global generator plays no part
    assert torch.equal(_noised(OURS, SIGMA, False, seed=5, source=source)[1], grads)
    assert not torch.equal(_noised(OURS, SIGMA, False, seed=6, source=source)[1], grads)


def test_parameter_blocks_cover_every_parameter_once_in_order():
    sizes = [30, 50, 20, 1, 250, 99, 2, 100]
    blocks = parameter_blocks(sizes, 100)
    assert [i for block in blocks for i in block] == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in block) <= 100 or len(block) == 1 for block in blocks)
    assert [list(b) for b in blocks] == [[0, 1, 2], [3], [4], [5], [6], [7]]
