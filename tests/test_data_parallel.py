"""A private phase on two Ray Train workers takes the one-worker step (a file of its own: its Ray Train runs take
about as long as the rest of the sweep tests, and test files run side by side)."""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch

from sdp_core.mechanisms import sdpsgd as S
from sdp_core.mechanisms.base import phase_events
from sdp_core.models.gpt2 import build_gpt2
from sdp_core.models.lstm import LSTMLM
from sdp_core.privacy import PrivacyLedger
from sdp_core.tensors import LMData
from sdp_core.train.distributed import run_private_phase_distributed
from sdp_core.train.loop import Phase, StepSettings, make_optimizer, train_phase

VOCAB, T = 300, 16
SIGMA = 1.3
SGD = partial(make_optimizer, name="sgd", lr=1.0, weight_decay=0.0)  # importable by Ray workers, as in trial.py


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def _phase_for(mechanism: str, data: LMData, **fields) -> Phase:
    if mechanism == "sdpsgd":
        return S.SelectivePhase("dp", data, segments=S.segment_table(data), hidden_clip=0.5, **fields)
    return Phase("dp", data, **fields)


# Each rank clips with either per-sample gradient mode (their per-record sums match a float64 reference in
# test_train_clipping.py); what data parallelism adds (record shards, noise once, the all-reduced sum over the
# global B) lies in Opacus' distributed optimizer of the mode: `bk` hands its sums to the fast-clipping one, `hooks`
# to the per-sample one. Each runs once: the default `bk` under DP-SGD, `hooks` under S-DPSGD's own step.
@pytest.mark.slow
@pytest.mark.parametrize("mechanism, arch, mode, sigma", [("dpsgd", "gpt2", "bk", SIGMA), ("sdpsgd", "lstm", "hooks", 0.0)])
def test_two_workers_take_the_one_worker_step_on_the_same_batch(local_ray, mechanism, arch, mode, sigma):
    """q = 1 puts every record in every batch, so both runs step on the same sample, and reproducible noise gives
    the gradient's noise the same draws. With a clip norm below every record's gradient norm the update is the
    averaged clipped gradient plus that noise, which must not depend on how the records are split over ranks;
    noise added on both ranks would move the two-worker step by σC/B more. S-DPSGD (σ = 0: each record's hidden
    state is noised on the rank that holds it, from that rank's draws): its public slots and released states too.
    Records of one to three rows (windows), each clipped as one: a rank must hold all of a record's rows."""
    g = torch.Generator().manual_seed(1)
    n = 12
    ids = torch.randint(3, VOCAB, (n, T), generator=g)
    weights = torch.rand(n, T, generator=g) + 0.5
    weights[:, 0] = 0
    sensitive = torch.rand(n, T, generator=g) < 0.2
    data = LMData(ids, weights, sensitive, torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 4, 5, 6, 6]))  # 7 records
    phase = _phase_for(mechanism, data, private=True, epochs=2, batch_size=n, sigmas=(sigma, sigma),
                       max_grad_norm=0.05)
    torch.manual_seed(0)
    model = build_gpt2("gpt2-tiny", None, VOCAB, T, 0.0) if arch == "gpt2" else LSTMLM(VOCAB, 16, 16)
    before = _flat(model.state_dict().values())
    ledgers = [PrivacyLedger(notion="DP", delta=1e-5, accountant="rdp", plan=phase_events(phase, mechanism, "all"))
               for _ in range(2)]

    one = copy.deepcopy(model)
    settings = StepSettings(grad_sample_mode=mode, reproducible_noise=True)
    train_phase(one, SGD(one), phase, ledgers[0], seed=3, settings=settings)
    state, stats = run_private_phase_distributed(copy.deepcopy(model), SGD, phase, ledgers[1], 3, settings, workers=2,
                                                 storage_path=local_ray)
    after_one, after_two = _flat(one.state_dict().values()), _flat(state[k] for k in model.state_dict())
    assert (after_one - before).norm() > 1e-3  # the steps moved the model
    assert torch.allclose(after_one, after_two, atol=1e-6, rtol=1e-5)
    assert stats.steps == 2 and stats.sigmas == [sigma, sigma]
    assert ledgers[0].spent_steps == ledgers[1].spent_steps == {"dp/epoch0": 1, "dp/epoch1": 1}
    assert ledgers[1].report()["epsilon"] == ledgers[0].report()["epsilon"]
