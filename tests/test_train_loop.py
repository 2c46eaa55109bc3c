"""The private step's defining properties: noise std σC/B, Poisson batch sizes, exactness with σ = 0; the trial's step
settings reach the step."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest
import torch

from sdp_core.config.training import PrivacyConfig, TrainingConfig
from sdp_core.models.gpt2 import build_gpt2
from sdp_core.tensors import LMData, per_record_loss
from sdp_core.train.loop import DPStep, Phase, StepContext, StepSettings, poisson_batches, train_phase
from sdp_core.train.precision import Precision
from sdp_core.train.randomness import Keystream, TorchNoise

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
    trainer = DPStep(StepContext(model, sgd, "hooks", TorchNoise(torch.Generator().manual_seed(0))), phase)
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
    batches = poisson_batches(torch.arange(n), q, steps, Keystream.from_seed(1, "test"))
    sizes = torch.tensor([len(b) for b in batches], dtype=torch.float)
    assert abs(sizes.mean().item() - q * n) < 4 * (q * (1 - q) * n / steps) ** 0.5
    assert abs(sizes.var().item() / (q * (1 - q) * n) - 1) < 0.1  # binomial, not fixed-size


def _windowed(windows: list[int]) -> LMData:
    """Rows of records with `windows[r]` rows each, a record's rows consecutive (as `text.encode` makes them)."""
    data = _data(sum(windows))
    index = torch.repeat_interleave(torch.arange(len(windows)), torch.tensor(windows))
    return LMData(data.input_ids, data.weights, data.sensitive, index)


def test_poisson_batches_sample_records_with_all_their_rows():
    """The record is the unit: a batch holds every row of a record or none, and the number of records in it is
    Binomial(N, q) over the N records (not over the rows)."""
    from sdp_core.tensors import record_groups

    q, steps = 0.05, 2000
    data = _windowed([1, 2, 3, 4, 8] * 200)  # 1,000 records, 3,600 rows
    n = 1000
    counts = data.record_index.bincount()
    sizes = []
    for rows in poisson_batches(record_groups(data.record_index), q, steps, Keystream.from_seed(1, "test")):
        taken = data.record_index[rows].bincount(minlength=n)
        assert torch.equal(taken[taken > 0], counts[taken > 0])  # whole records
        sizes.append(int((taken > 0).sum()))
    sizes = torch.tensor(sizes, dtype=torch.float)
    assert abs(sizes.mean().item() - q * n) < 4 * (q * (1 - q) * n / steps) ** 0.5
    assert abs(sizes.var().item() / (q * (1 - q) * n) - 1) < 0.1


def test_a_private_phase_draws_records_and_a_public_phase_rows():
    """q = B/N and the epoch's steps count records in a private phase (the accountant's unit); rows in a public one."""
    data = _windowed([1, 3, 2, 1, 1, 4, 1, 3] * 4)  # 32 records, 64 rows
    private = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(1.0,))
    assert private.units == 32 and private.sample_rate == 8 / 32 and private.steps_per_epoch == 4
    assert private.expected_batch_size == 8
    public = Phase("pub", data, private=False, epochs=1, batch_size=8)
    assert public.units == 64 and public.steps_per_epoch == 8


def test_data_parallel_shards_hold_whole_records():
    from sdp_core.train.loop import shard

    data = _windowed([1, 3, 2, 1, 1, 4, 1, 3, 2])
    shards = [shard(data, rank, 2) for rank in range(2)]
    held = [set(s.record_index.tolist()) for s in shards]
    assert not held[0] & held[1] and held[0] | held[1] == set(range(9))
    assert sum(len(s) for s in shards) == len(data)


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
    private_sgd = torch.optim.SGD(private.parameters(), lr=0.1)
    trainer = DPStep(StepContext(private, private_sgd, mode, TorchNoise(torch.Generator())), phase)
    trainer(data.with_weights(weights), 0.0)
    a, b = _flat_params(plain), _flat_params(trainer.close())
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_a_trials_step_settings_reach_the_step_the_loop_builds(monkeypatch):
    """Every step setting comes from the trial's config field of its name (each set away from the loop's default,
    so a setting left behind shows), and the loop builds its step with them: fp16 resolved with the trial's scale."""
    training = TrainingConfig(grad_sample_mode="bk", precision="fp16", loss_scale=64.0, tf32=False,
                              keep_host_memory=False, shared_rows_mb=64)
    privacy = PrivacyConfig(reproducible_noise=True, secure_mode=True)
    settings = StepSettings.from_config(training, privacy)
    for setting in fields(StepSettings):
        config = training if setting.name in TrainingConfig.model_fields else privacy
        assert getattr(settings, setting.name) == getattr(config, setting.name) != setting.default, setting.name

    contexts: list[StepContext] = []
    batch_step = Phase.batch_step
    monkeypatch.setattr(Phase, "batch_step", lambda phase, ctx: contexts.append(ctx) or batch_step(phase, ctx))
    phase = Phase("dp", _data(8), private=True, epochs=1, batch_size=4, sigmas=(1.0,), max_steps=1)
    model = _model()
    train_phase(model, torch.optim.SGD(model.parameters(), lr=0.1), phase, SimpleNamespace(record_steps=lambda *_: None),
                seed=0, settings=settings)
    [ctx] = contexts
    assert (ctx.grad_sample_mode, ctx.precision, ctx.secure_mode) == ("bk", Precision("fp16", 64.0), True)


def _ranks_sampling(phase: Phase, world: int, monkeypatch) -> tuple[list[float], list[int], torch.Tensor]:
    """Run `train_phase` as each of `world` data-parallel ranks with a step that only records its batches: the rate
    each rank passed to the Poisson sampler, the steps each charged to its ledger, and how often each record was in
    the union of the ranks' batches."""
    from sdp_core.train import loop

    rates: list[float] = []
    real = loop.poisson_batches
    monkeypatch.setattr(loop, "poisson_batches", lambda records, q, steps, g: rates.append(q) or real(records, q, steps, g))
    per_step: list[list[torch.Tensor]] = []

    class Recording:
        def __init__(self) -> None:
            self.step = 0

        def __call__(self, batch: LMData, sigma: float) -> None:
            if len(per_step) <= self.step:
                per_step.append([])
            per_step[self.step].append(batch.record_index.unique())
            self.step += 1

        def close(self):
            return None

    class Ledger:
        def __init__(self) -> None:
            self.steps = 0

        def record_steps(self, key: str, steps: int) -> None:
            self.steps += steps

    model, charged = torch.nn.Linear(1, 1), []
    for rank in range(world):
        monkeypatch.setattr(Phase, "batch_step", lambda self, ctx: Recording())
        ledger = Ledger()
        loop.train_phase(model, torch.optim.SGD(model.parameters(), lr=0.1), phase, ledger, 0, rank=rank,
                         world_size=world)
        charged.append(ledger.steps)
    records = int(phase.data.record_index.max()) + 1
    included = torch.zeros(records)
    for batches in per_step:
        union = torch.cat(batches)
        assert len(union) == len(union.unique())  # the ranks hold disjoint records
        included[union] += 1
    return rates, charged, included / len(per_step)


def test_ranks_sample_at_the_phases_rate_and_epsilon_is_one_workers(monkeypatch):
    """Data-parallel ranks Poisson-sample their shards at the phase's global q = B/N (not B over their shard), each
    charging the plan's steps: the union of their batches is one Poisson sample at q, and ε is one worker's."""
    from sdp_core.privacy.accountants.rdp import rdp_epsilon

    data = _windowed([1, 2, 3] * 20)  # 60 records
    sigma, epochs = 1.1, 60
    phase = Phase("dp", data, private=True, epochs=epochs, batch_size=6, sigmas=(sigma,) * epochs)
    q, steps = phase.sample_rate, phase.total_steps
    assert q == 0.1 and steps == 600
    epsilons = {}
    for world in (1, 3):
        rates, charged, frequency = _ranks_sampling(phase, world, monkeypatch)
        assert rates == [q] * epochs * world and charged == [steps] * world
        # Every record is in the union at rate q: over 60 records × 600 steps, within 4 standard deviations.
        assert abs(frequency.mean().item() - q) < 4 * (q * (1 - q) / (60 * steps)) ** 0.5
        epsilons[world] = rdp_epsilon([(rates[0], sigma, charged[0])], 1e-5)
    assert epsilons[1] == epsilons[3]
