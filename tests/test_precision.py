"""Mixed-precision private steps (`training.precision`): bf16/fp16 clipped sums against fp32, the bound C on each
record's contribution, non-finite norms, the ledger, and the secure-mode noise.

Tolerances (stated here, checked below):
- the clipped sum Σ_i c_i·G_i of a bf16 step is within 2e-2 of the fp32 step's, relative ℓ2 (bf16 keeps 8
  significant bits; the per-layer roundings compound through the model), and fp16's within 5e-3 (11 bits);
- one record's contribution c_i·G_i has norm ≤ C·(1 + 1e-5) with hooks and bk, whose norms are formed in fp32 from
  the very pieces that are summed (bk's with bounds on what rounding can move; see test_contribution_bound.py).
"""

from __future__ import annotations

import pytest
import torch

from sdp_core.mechanisms.base import phase_events
from sdp_core.models.gpt2 import build_gpt2
from sdp_core.privacy import PrivacyLedger
from sdp_core.tensors import LMData
from sdp_core.train.loop import DPStep, Phase, PublicStep, StepContext, StepSettings, make_optimizer, train_phase
from sdp_core.train.precision import FP32, Precision, clip_factors, resolve_precision
from sdp_core.train.randomness import Keystream, TorchNoise
from test_train_clipping import MODELS, VOCAB, _lm_data, packed_private_slot

SUM_TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3}
CONTRIBUTION_TOLERANCE = 1e-5
CASES = [(arch, mode) for arch in MODELS for mode in ("hooks", "bk")]


def _precision(name: str) -> Precision:
    return Precision(name, 1024.0 if name == "fp16" else 1.0)


def _clipped_sum(arch: str, mode: str, precision: Precision, rows: list[int] | None = None,
                 batch: LMData | None = None) -> torch.Tensor:
    """Σ_i c_i·G_i of one σ = 0 step over `rows` of the family's batch (all by default), flattened."""
    build, data, clip = MODELS[arch]
    torch.manual_seed(0)
    model, batch = build(), batch if batch is not None else data()
    phase = Phase("dp", batch, private=True, epochs=1, batch_size=len(batch), sigmas=(0.0,), max_grad_norm=clip)
    step = DPStep(StepContext(model, torch.optim.SGD(model.parameters(), lr=0.0), mode, TorchNoise(torch.Generator()),
                              precision=precision), phase)
    step(batch if rows is None else batch.subset(rows), 0.0)
    out = torch.cat([p.grad.flatten() for p in step.optimizer.params]) * len(batch)  # the optimizer divided by B
    step.close()
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    return out


@pytest.mark.parametrize("arch,mode,precision", [(*case, p) for case in CASES for p in ("bf16", "fp16")])
def test_low_precision_clipped_sum_matches_fp32(arch, mode, precision):
    reference = _clipped_sum(arch, mode, FP32)
    low = _clipped_sum(arch, mode, _precision(precision))
    assert (low - reference).norm() <= SUM_TOLERANCE[precision] * reference.norm()
    assert not torch.equal(low, reference)  # it did run in low precision


@pytest.mark.parametrize("arch,mode", CASES)
def test_bf16_contribution_of_a_record_is_at_most_c(arch, mode):
    clip = MODELS[arch][2]
    norms = [_clipped_sum(arch, mode, _precision("bf16"), rows=[i]).norm() for i in range(3)]
    assert max(norms) > 0.9 * clip  # clipped records: the bound is reached, not trivially met
    assert max(norms) <= clip * (1 + CONTRIBUTION_TOLERANCE)


def test_opacus_ghost_clipping_is_refused_with_its_reason():
    """Opacus' ghost norms carry no bound on their rounding: a record whose position terms cancel can add many
    times C in fp32, and up to 1.0033·C under bf16. The configuration refuses the mode and says what to use."""
    from pydantic import ValidationError

    from sdp_core.config.training import TrainingConfig

    with pytest.raises(ValidationError, match="ghost.*bk"):
        TrainingConfig(grad_sample_mode="ghost")


@pytest.mark.parametrize("mode,precision", [("hooks", "fp32"), ("bk", "fp32"), ("bk", "bf16"),
                                            ("hooks", "bf16")])
def test_a_record_whose_norm_overflows_gets_weight_zero(mode, precision):
    """Record 0's loss weights are 1e30: its gradient entries stay finite but its squared norm is not. The step is
    the step without record 0 (Opacus' weight 0 for an infinite norm), not NaN."""
    data = _lm_data(8, 16)
    weights = data.weights.clone()
    weights[0] *= 1e30
    batch = data.with_weights(weights)
    with_overflow = _clipped_sum("gpt2", mode, _precision(precision), batch=batch)
    without = _clipped_sum("gpt2", mode, _precision(precision), rows=list(range(1, 8)), batch=batch)
    assert torch.allclose(with_overflow, without, rtol=1e-5, atol=1e-6 * without.abs().max().item())


def test_clip_factors_of_non_finite_norms_are_zero():
    norms = torch.tensor([0.5, 2.0, float("inf"), float("nan")])
    assert clip_factors(norms, 1.0).tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0], abs=1e-6)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_low_precision_phase_spends_the_same_epsilon(precision):
    """The ledger counts sampled batches, whatever the arithmetic: the same plan gives the same ε."""
    data = _lm_data(16, 16)
    phase = Phase("dp", data, private=True, epochs=2, batch_size=4, sigmas=(1.0, 1.0), max_grad_norm=0.1)
    epsilons = []
    for p in ("fp32", precision):
        torch.manual_seed(0)
        model = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0)
        ledger = PrivacyLedger(notion="DP", delta=1e-5, accountant="rdp", plan=phase_events(phase, "dpsgd", "all"))
        stats = train_phase(model, make_optimizer(model, "sgd", 0.1, 0.0), phase, ledger, seed=0,
                            settings=StepSettings(grad_sample_mode="bk", precision=p))
        assert stats.steps == phase.total_steps and ledger.complete
        assert all(torch.isfinite(v).all() and v.dtype == torch.float32 for v in model.state_dict().values()
                   if v.is_floating_point())
        epsilons.append(ledger.report()["epsilon"])
    assert epsilons[0] == epsilons[1]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_public_step_in_low_precision_lowers_the_loss(precision):
    torch.manual_seed(0)
    model = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0)
    data = _lm_data(4, 16)
    step = PublicStep(StepContext(model, make_optimizer(model, "adamw", 3e-3, 0.0), "bk", TorchNoise(torch.Generator()),
                                  precision=_precision(precision)))
    losses = [step(data, 0.0) for _ in range(8)]
    assert losses[-1] < losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_auto_is_fp32_on_cpu():
    assert resolve_precision("auto", torch.device("cpu")) == FP32
    assert resolve_precision("fp16", torch.device("cpu"), 512.0) == Precision("fp16", 512.0)


@pytest.mark.parametrize("secure_mode", [False, True])
def test_noise_has_standard_deviation_sigma_c_over_b(secure_mode):
    """An empty batch's step is noise only: (Σ of nothing + N(0, σ²C²))/B, in either noise mode (secure mode sums
    four draws and halves them: the same Gaussian, Holohan & Braghin 2021)."""
    torch.manual_seed(0)
    model = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0)
    data = _lm_data(8, 16)
    phase = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(2.0,), max_grad_norm=0.5)
    step = DPStep(StepContext(model, torch.optim.SGD(model.parameters(), lr=0.0), "bk", Keystream.from_seed(1, "test"),
                              secure_mode=secure_mode), phase)
    assert step.optimizer.secure_mode is secure_mode
    step(data.subset([]), 2.0)
    noise = torch.cat([p.grad.flatten() for p in step.optimizer.params])
    step.close()
    assert noise.dtype == torch.float32
    assert abs(noise.std().item() / (2.0 * 0.5 / 8) - 1) < 0.02  # ~4e5 draws: the std within 2 %


@pytest.mark.parametrize("mode", ["hooks", "bk"])
def test_selective_dpsgd_private_slot_in_bf16_matches_fp32(mode):
    """S-DPSGD's packed LSTM slot from a carried state: the bf16 clipped sum is the fp32 one, and the released
    hidden state is clipped and noised in fp32."""
    from sdp_core.mechanisms import sdpsgd as S
    from sdp_core.models.lstm import LSTMLM

    data, table, seg, state = packed_private_slot()
    results = []
    for precision in (FP32, _precision("bf16")):
        torch.manual_seed(0)
        lm = LSTMLM(VOCAB, 16, 16)
        phase = S.SelectivePhase("p", data, True, 1, 4, sigmas=(0.0,), max_grad_norm=0.05, segments=table)
        step = S.SelectiveStep(StepContext(lm, torch.optim.SGD(lm.parameters(), lr=0.0), mode,
                                           TorchNoise(torch.Generator()),
                                           precision=precision), phase)
        out = step.private(seg, state, 0.0)
        released = S.release_state(out, 0.5, 1.0, TorchNoise(torch.Generator().manual_seed(3)), seg.records)
        assert all(x.dtype == torch.float32 for x in released)
        results.append(torch.cat([p.grad.flatten() for p in step.dp.optimizer.params]))
        step.close()
    reference, low = results
    assert (low - reference).norm() <= SUM_TOLERANCE["bf16"] * reference.norm()
    assert not torch.equal(low, reference)


def _cancelling_pieces(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One record of one ghost layer (T·(d_in + d_out) < d_in·d_out) whose position terms g_t a_tᵀ nearly cancel in
    pairs: ‖G‖ is about a hundredth of Σ_t ‖a_t‖‖g_t‖, so rounding c·a_t moves the sum by far more than ‖c·G‖."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(1, 4, 64, generator=gen).repeat_interleave(2, dim=1)
    a[:, 1::2] += 1e-2 * torch.randn(1, 4, 64, generator=gen)
    g = torch.randn(1, 4, 64, generator=gen).repeat_interleave(2, dim=1)
    g[:, 1::2] *= -1
    return a.to(dtype), g.to(dtype)


def test_rounding_allowance_keeps_a_cancelling_record_within_c():
    """bk under bf16 rounds c·a_t to bf16 for a ghost layer's clipped sum. Clipped by its exact norm (float64, from
    the same pieces) the record exceeds C: that rounding alone moves the sum by more than ‖c·G‖. With the
    allowance of `rounding_allowance` on bk's own norm bound the contribution stays ≤ C."""
    from sdp_core.train.clipping import rounding_allowance, weight_gradients

    a, g = _cancelling_pieces(torch.bfloat16)
    grads = weight_gradients(a, g, transposed=False)
    exact = torch.einsum("bto,bti->oi", g.double(), a.double()).norm().reshape(1)
    clip = 0.3 * exact.item()  # a clipped record (c = 0.3: not a power of 2, which bf16 scales exactly)
    allowed = rounding_allowance(grads.squared_norms.sqrt(), grads.rounding[None])
    for norms, within in ((allowed, True), (exact, False)):
        contribution = grads.clipped_sum(clip_factors(norms, clip)).double().norm().item()
        assert (contribution <= clip * (1 + 1e-5)) is within, (within, contribution / clip)


def test_an_fp16_record_that_overflows_in_a_ghost_layer_gets_weight_zero_and_leaves_the_rest_unchanged():
    """fp16, T = 12: record 0's loss weights ×1e3 overflow its output gradients under the loss scale, in layers that
    take ghost norms (one matmul over every record's positions for the sum). The record gets weight 0 and the step is
    bit for bit the step in which its loss weights are 0 (its gradient exactly 0), not NaN everywhere."""
    data = _lm_data(8, 12)
    weights = data.weights.clone()
    weights[0] *= 1e3
    overflowing = _clipped_sum("gpt2", "bk", _precision("fp16"), batch=data.with_weights(weights))
    weights[0] = 0
    assert torch.equal(overflowing, _clipped_sum("gpt2", "bk", _precision("fp16"), batch=data.with_weights(weights)))
