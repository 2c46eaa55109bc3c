"""Book-keeping clipping (`grad_sample_mode: bk`): the same clipped, noised gradient as Opacus' hooks, per family, up to
clipping factors that its rigorous norm bounds may make slightly smaller (never larger)."""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from torch import nn

from sdp_core.errors import UserError
from sdp_core.mechanisms import sdpsgd as S
from sdp_core.models.gpt2 import build_gpt2
from sdp_core.models.lstm import LSTMLM
from sdp_core.models.roberta import BPE_PAD_ID, build_roberta
from sdp_core.tensors import LMData
from sdp_core.train import clipping
from sdp_core.train.clipping import BookKeeping, embedding, stacked, weight_gradients
from sdp_core.train.loop import DPStep, Phase, PublicStep, StepContext
from sdp_core.train.randomness import TorchNoise

VOCAB = 300
RTOL = 1e-5  # float32 sums in another order: the largest difference, relative to the gradient's largest entry
FACTOR_SLACK = 5e-3  # how much smaller than exact a bk clipping factor may be: its bounds, which grow with positions


def _lm_data(n: int, t: int, seed: int = 0) -> LMData:
    """Random tokens with random loss weights in (0, 1): every record's loss, and its gradient, differs."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (n, t), generator=g)
    weights = torch.rand(n, t, generator=g)
    weights[:, 0] = 0
    return LMData(ids, weights, torch.zeros(n, t, dtype=torch.bool), torch.arange(n))


def _classification_data(n: int, t: int, seed: int = 0) -> LMData:
    """Labelled rows of random lengths, padded with the pad id."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (n, t), generator=g)
    lengths = torch.randint(3, t + 1, (n,), generator=g)
    ids[torch.arange(t)[None, :] >= lengths[:, None]] = BPE_PAD_ID
    weights = (ids != BPE_PAD_ID).float()
    return LMData(ids, weights, torch.zeros(n, t, dtype=torch.bool), torch.arange(n), torch.randint(0, 3, (n,), generator=g))


MODELS = {
    "gpt2": (lambda: build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0), lambda: _lm_data(8, 16), 0.02),
    "roberta": (lambda: build_roberta("roberta-tiny", None, VOCAB, 16, 0.0, 3), lambda: _classification_data(8, 16), 0.2),
    # T = 32: every LSTM layer instantiates G_i (d_in·d_out ≤ T·(d_in + d_out)); GPT-2 and RoBERTa take ghost norms
    "lstm": (lambda: LSTMLM(VOCAB, 16, 16), lambda: _lm_data(8, 32), 0.1),
}


def _private_gradient(arch: str, mode: str, sigma: float) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """(Σ clipped + noise)/B of one DP step (the optimizer leaves it in p.grad); with hooks, the per-record
    gradients G_i, flattened over all parameters ([B, P])."""
    build, data, clip = MODELS[arch]
    torch.manual_seed(0)
    model, batch = build(), data()
    phase = Phase("dp", batch, private=True, epochs=1, batch_size=len(batch), sigmas=(sigma,), max_grad_norm=clip)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    step = DPStep(StepContext(model, optimizer, mode, TorchNoise(torch.Generator().manual_seed(7))), phase)
    step(batch, sigma)
    grads = [p.grad.clone() for p in step.optimizer.params]
    per_record = _per_record(step.optimizer.params) if mode == "hooks" else None
    step.close()
    return grads, per_record


def _per_record(params: list[torch.Tensor]) -> torch.Tensor:
    """Opacus hooks' per-sample gradients of every parameter, [B, P]."""
    return torch.cat([p.grad_sample.flatten(1) for p in params], dim=1)


def _assert_clipped_sum(got: torch.Tensor, per_record: torch.Tensor, factors: torch.Tensor) -> None:
    """`got` is Σ_i c_i·G_i (to fp32 rounding) with c_i ∈ [(1 − slack)·f_i, f_i], f_i the exact factors: least
    squares recovers the c_i from the float64 per-record gradients G_i ([R, P])."""
    c = torch.linalg.lstsq(per_record.T, got.double()[:, None]).solution.flatten()
    assert (got.double() - per_record.T @ c).abs().max() <= RTOL * got.abs().max()
    assert (c <= factors * (1 + 1e-5)).all() and (c >= factors * (1 - FACTOR_SLACK)).all(), (c / factors).tolist()


def _assert_equal(bk: list[torch.Tensor], hooks: list[torch.Tensor], per_record: torch.Tensor, clip: float,
                  batch_size: int) -> None:
    """bk's step is hooks' step with clipping factors c_i^bk ∈ [(1 − slack)·c_i, c_i], c_i = min(1, C/‖G_i‖): the
    difference of the two steps is Σ_i (c_i^bk − c_i)·G_i / B, whose coefficients least squares recovers from
    hooks' per-record gradients G_i; the residual is fp32 summation order only."""
    difference = torch.cat([(b - h).flatten() for b, h in zip(bk, hooks)]).double() * batch_size
    records = per_record.double()
    delta = torch.linalg.lstsq(records.T, difference[:, None]).solution.flatten()
    scale = max(h.abs().max() for h in hooks) * batch_size
    assert (difference - records.T @ delta).abs().max() <= RTOL * scale
    factors = (clip / (records.norm(dim=1) + 1e-6)).clamp(max=1.0)
    assert (delta <= 1e-5 * factors).all() and (delta >= -FACTOR_SLACK * factors).all(), (delta / factors).tolist()


@pytest.mark.parametrize("arch", MODELS)
@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_bk_step_equals_opacus_hooks(arch, sigma):
    hooks, per_record = _private_gradient(arch, "hooks", sigma)
    bk, _ = _private_gradient(arch, "bk", sigma)
    clip = MODELS[arch][2]
    assert (per_record.norm(dim=1) > clip).float().mean() >= 0.75  # most records are clipped
    _assert_equal(bk, hooks, per_record, clip, len(per_record))


def test_bk_empty_batch_is_the_same_noise_only_step():
    results = []
    for mode in ("hooks", "bk"):
        torch.manual_seed(0)
        model = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0)
        data = _lm_data(8, 16)
        phase = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(1.0,), max_grad_norm=0.5)
        step = DPStep(StepContext(model, torch.optim.SGD(model.parameters(), lr=0.0), mode,
                                  TorchNoise(torch.Generator().manual_seed(3))), phase)
        step(data.subset(torch.arange(0)), 1.0)
        results.append([p.grad.clone() for p in step.optimizer.params])
        step.close()
    assert all(torch.equal(a, b) for a, b in zip(*results))


def _two_dp_steps(compiled: bool) -> tuple[list[list[torch.Tensor]], int]:
    """The gradients (Σ clipped)/B, σ = 0, of two bk steps of gpt2-tiny that train (lr 0.1), eager or compiled,
    after a public step on the same model (a redacted phase first: the model compiled and run before bk's hooks are
    added); and how many layer calls the closed clipping kept of a public step after them."""
    torch.manual_seed(0)
    model, data = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0), _lm_data(8, 16)
    if compiled:
        # dynamo's graphs and AOTAutograd's forward and backward, as inductor gets them (its kernels are what
        # benchmarks.train_step's compiled rows time); in place: bk's hooks stay on the layers
        model.compile(backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    public = PublicStep(StepContext(model, optimizer, "bk", None))
    public(data, 0.0)
    phase = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(0.0,), max_grad_norm=0.02)
    step = DPStep(StepContext(model, optimizer, "bk", TorchNoise(torch.Generator().manual_seed(7))), phase)
    grads = []
    for _ in range(2):
        step(data, 0.0)
        grads.append([p.grad.clone() for p in step.optimizer.params])
    step.close()
    public(data, 0.0)
    return grads, sum(len(calls) for calls in step.clipping.calls.values())


@pytest.mark.slow  # dynamo traces and AOTAutograd splits the forward and backward: about 15 s
def test_a_compiled_private_step_equals_the_eager_one():
    """`torch.compile` of the model (AOTAutograd's graphs), compiled and run publicly before bk's hooks are added:
    the hooks run eagerly at graph breaks, both steps' clipped sums equal the eager steps' up to fp32 summation order
    (RTOL of the largest entry), and once the clipping is closed a forward reaches none of its hooks."""
    torch._dynamo.reset()
    eager, _ = _two_dp_steps(compiled=False)
    try:
        compiled, kept_after_close = _two_dp_steps(compiled=True)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # it did compile
    finally:
        torch._dynamo.reset()
    assert kept_after_close == 0  # the hooks' removal reached the compiled code
    for eager_step, compiled_step in zip(eager, compiled):
        scale = max(float(g.abs().max()) for g in eager_step)
        assert scale > 0
        assert max(float((e - c).abs().max()) for e, c in zip(eager_step, compiled_step)) <= RTOL * scale


def packed_private_slot(record_index: list[int] | None = None):
    """(data, its segment table, the first private segment of 4 rows packed longest first, a carried (h, c) state);
    row r a window of record `record_index[r]` (default: each row its own record)."""
    data = _lm_data(4, 12)
    data = LMData(data.input_ids, data.weights, torch.rand(4, 12, generator=torch.Generator().manual_seed(2)) < 0.3,
                  data.record_index if record_index is None else torch.tensor(record_index))
    table = S.segment_table(data)
    rows = torch.arange(4)
    start, end = table.bounds[rows, 1, 0], table.bounds[rows, 1, 1]
    order = torch.argsort(end - start, descending=True, stable=True)
    seg = S.gather_segments(data, rows[order], start[order], end[order])
    g = torch.Generator().manual_seed(1)
    return data, table, seg, (torch.randn(1, 4, 16, generator=g), torch.randn(1, 4, 16, generator=g))


@pytest.mark.parametrize("record_index", [None, [0, 1, 1, 0]])
def test_selective_private_slot_with_bk_equals_hooks(record_index):
    """S-DPSGD's packed private slot from a carried state: rows of different lengths, cells called per time step;
    also two records of two rows each, which packing puts apart."""
    data, table, seg, state = packed_private_slot(record_index)
    assert len(set(seg.lengths.tolist())) > 1  # packed: later time steps hold fewer rows
    results = []
    for mode in ("hooks", "bk"):
        torch.manual_seed(0)
        lm = LSTMLM(VOCAB, 16, 16)
        phase = S.SelectivePhase("p", data, True, 1, 4, sigmas=(1.0,), max_grad_norm=0.05, segments=table)
        step = S.SelectiveStep(StepContext(lm, torch.optim.SGD(lm.parameters(), lr=0.0), mode,
                                           TorchNoise(torch.Generator().manual_seed(5))), phase)
        step.private(seg, state, 0.5)
        results.append([p.grad.clone() for p in step.dp.optimizer.params])
        if mode == "hooks":
            per_record = _per_record(step.dp.optimizer.params)
        step.close()
    _assert_equal(results[1], results[0], per_record, 0.05, 4)


# ------------------------------------------------------------------------------------------ layer rules


def _explicit(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """G_i = Σ_t g_it a_itᵀ, [B, d_out, d_in]."""
    return torch.einsum("bto,bti->boi", g, a)


def _assert_norm_bound(squared_norms: torch.Tensor, explicit: torch.Tensor) -> None:
    """A layer's squared norms bound the float64 ones from above, and closely where no position terms cancel."""
    exact = explicit.flatten(1).square().sum(1)
    assert squared_norms.dtype == torch.float64
    assert (squared_norms >= exact * (1 - 1e-12)).all() and (squared_norms <= exact * (1 + 1e-3)).all()


@pytest.mark.parametrize("positions", [4, 40])  # ghost norms (T·(d_in + d_out) < d_in·d_out), instantiated G_i
@pytest.mark.parametrize("transposed", [False, True])
def test_weight_gradients_match_explicit_per_record_gradients(positions, transposed):
    gen = torch.Generator().manual_seed(0)
    a, g = torch.randn(5, positions, 32, generator=gen), torch.randn(5, positions, 48, generator=gen)
    c = torch.rand(5, generator=gen)
    explicit = _explicit(a, g)
    grads = weight_gradients(a, g, transposed)
    # ghost norms bound the exact G_i; an instantiated G_i's norm is of the very numbers its sum reads
    reference = _explicit(a.double(), g.double()) if positions == 4 else grads.per_record().double()
    _assert_norm_bound(grads.squared_norms, reference)
    expected = torch.einsum("b,boi->oi", c, explicit)
    torch.testing.assert_close(grads.clipped_sum(c), expected.T if transposed else expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stack_batch", [clipping.STACK_BATCH, 2 * (3 * 40 * 64 + 4 * 3 * 40**2)])  # one batch; two
@pytest.mark.parametrize("gram_chunk", [clipping.GRAM_CHUNK, 10])  # 48 features: one chunk; 5 of 10, the last padded
@pytest.mark.parametrize("shared_min", [clipping.GRAM_SHARED_MIN, 8])  # by width; 16 and 48 features share chunks
def test_ghost_layers_whose_tensors_are_stacked_each_bound_their_own_norm(dtype, stack_batch, gram_chunk, shared_min,
                                                                         monkeypatch):
    """Four ghost layers at once, whose a and g `grams` stacks (in one batch: five of 16 features and three of 48, by
    width or all of them at chunks they share), with records of magnitudes 1e-20, 1 and 1e15, their features in one
    chunk or in several (two chunks a product): each layer's bound is at least its own float64 ‖G_i‖² (of the very
    bf16 numbers) and close to it, and what the layer alone gives."""
    monkeypatch.setattr(clipping, "STACK_BATCH", stack_batch)
    monkeypatch.setattr(clipping, "GRAM_CHUNK", gram_chunk)
    monkeypatch.setattr(clipping, "GRAM_SHARED_MIN", shared_min)
    monkeypatch.setattr(clipping, "GRAM_BATCH", 2 * 3 * 40**2)
    gen = torch.Generator().manual_seed(0)
    magnitudes = torch.tensor([1e-20, 1.0, 1e15]).view(-1, 1, 1)
    layers = [clipping.GhostOperands((torch.randn(3, 40, d_in, generator=gen) * magnitudes).to(dtype),
                                     torch.randn(3, 40, d_out, generator=gen).to(dtype), rho=0.0)
              for d_in, d_out in [(16, 48), (16, 16), (48, 16), (16, 48)]]
    together = clipping.ghost_norms(layers)
    for layer, sums in zip(layers, together):
        bound = clipping.norm_bounds([sums])[0]
        _assert_norm_bound(bound, _explicit(layer.a.double(), layer.g.double()))
        torch.testing.assert_close(bound, clipping.norm_bounds(clipping.ghost_norms([layer]))[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("gram_chunk,shared_min", [
    (clipping.GRAM_CHUNK, clipping.GRAM_SHARED_MIN),  # by width: one chunk each
    (10, clipping.GRAM_SHARED_MIN),  # by width: 2, 3 or 5 chunks of 8 to 10 features
    (clipping.GRAM_CHUNK, 8),  # 16, 48 and 24 features share chunks of 8 (2, 6 and 3 of them); 27 by its width
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_gram_matrix_formed_in_chunks_is_within_its_bound_of_the_exact_one(dtype, gram_chunk, shared_min,
                                                                            monkeypatch):
    """Each entry of a Gram matrix (`grams`: scaled by a power of two per record, its features in chunks, shared with
    tensors of other widths or its own, the chunks' products several at a time and summed in fp32) is within
    γ·‖x'_t‖‖x'_s‖ + η of the float64 product of the scaled numbers, with γ the blocked sum's γ_{k+m−1} of its own
    chunks, and the scaled numbers are the record's own divided by s_i."""
    monkeypatch.setattr(clipping, "GRAM_CHUNK", gram_chunk)
    monkeypatch.setattr(clipping, "GRAM_SHARED_MIN", shared_min)
    monkeypatch.setattr(clipping, "GRAM_BATCH", 2 * 3 * 7**2)  # two chunks' partial products at a time
    gen = torch.Generator().manual_seed(0)
    magnitudes = torch.tensor([1e-20, 1.0, 1e15]).view(-1, 1, 1)
    xs = [(torch.randn(3, 7, d, generator=gen) * magnitudes).to(dtype) for d in (16, 27, 48, 27, 48, 24)]
    widths = {k: width for members, width in clipping.chunk_groups(xs) for k in members}
    if shared_min == 8:
        assert [widths[k] for k in range(len(xs))] == [8, clipping.gram_chunks(27)[1], 8, clipping.gram_chunks(27)[1], 8, 8]
    else:
        assert all(widths[k] == clipping.gram_chunks(x.shape[-1])[1] for k, x in enumerate(xs))
    computed = clipping.grams(xs)
    for k, x in enumerate(xs):
        width = widths[k]
        chunks = math.ceil(x.shape[-1] / width)
        assert width <= gram_chunk and width % clipping.GRAM_ALIGN == 0 or width == gram_chunk  # 16-byte aligned rows
        assert computed.gammas[k] == clipping.gamma(width + chunks - 1)
        scale = computed.scales[k].view(-1, 1, 1)
        largest = x.double().abs().flatten(1).amax(1).view(-1, 1, 1)
        assert ((scale <= largest) & (largest < 2 * scale)).all()
        scaled = x.double() / scale
        exact = scaled @ scaled.transpose(1, 2)
        lengths = scaled.norm(dim=2)
        allowed = computed.gammas[k] * lengths.unsqueeze(2) * lengths.unsqueeze(1) + computed.etas[k]
        assert ((computed.matrices[k].double() - exact).abs() <= allowed).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stack_batch", [clipping.STACK_BATCH, 2 * 5 * 4 * 80])  # each group at once; in runs of 2
def test_clipped_sums_of_ghost_layers_formed_together_are_each_layers_own(dtype, stack_batch, monkeypatch):
    """Ghost layers of one shape and layout are multiplied together (`clipped_sums`), beside an instantiated layer
    and ghost layers of another shape or layout: each parameter's sum is the one it forms alone, and its own
    Σ_i c_i·G_i (float64, explicit), in the order given; each form is let go once its sum is formed."""
    monkeypatch.setattr(clipping, "STACK_BATCH", stack_batch)
    gen = torch.Generator().manual_seed(0)
    shapes = [(32, 48, True), (32, 48, True), (32, 48, False), (48, 32, True), (32, 48, True), (32, 48, True)]
    operands = [(torch.randn(5, 4, d_in, generator=gen).to(dtype), torch.randn(5, 4, d_out, generator=gen).to(dtype),
                 transposed) for d_in, d_out, transposed in shapes]
    forms = [weight_gradients(a, g, transposed) for a, g, transposed in operands]
    per_record = torch.randn(5, 7, 3, generator=gen)
    forms.insert(2, clipping.instantiated(per_record))
    assert [f.transposed_ghost for f in forms] == [True, True, None, False, True, True, True]
    c = torch.rand(5, generator=gen)
    alone = [form.clipped_sum(c) for form in forms]
    released = weakref.ref(forms[0])
    sums = clipping.clipped_sums(forms, c)
    assert forms == [] and released() is None
    assert all(torch.equal(together, own) for together, own in zip(sums, alone))
    for (a, g, transposed), computed in zip(operands, sums[:2] + sums[3:]):
        # the narrower of a and g scaled by c and rounded once to its format, as `scaled_roundoff` allows for
        if a.shape[-1] <= g.shape[-1]:
            a = (a.float() * c.view(-1, 1, 1)).to(dtype)
        else:
            g = (g.float() * c.view(-1, 1, 1)).to(dtype)
        expected = _explicit(a.double(), g.double()).sum(0)
        torch.testing.assert_close(computed.double(), expected.T if transposed else expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums[2].double(), torch.einsum("b,bij->ij", c.double(), per_record.double()))


def test_a_bf16_instantiated_gradient_is_read_in_fp32_without_a_copy():
    """A CPU's bf16 G_i stays bf16 (no fp32 copy is kept): its norms bound, and its clipped sum matches, the float64
    ones of the very bf16 numbers (1,750 entries a record: the last chunk of squares short)."""
    gen = torch.Generator().manual_seed(0)
    per_record, c = torch.randn(5, 7, 50, generator=gen).bfloat16(), torch.rand(5, generator=gen)
    grads = clipping.instantiated(per_record)
    assert grads.pieces[0] is per_record
    _assert_norm_bound(grads.squared_norms, per_record.double())
    assert (grads.squared_norms / per_record.double().flatten(1).square().sum(1)).max() <= 1 + 1e-5  # γ_36's margin
    expected = torch.einsum("b,bij->ij", c.double(), per_record.double())
    assert grads.clipped_sum(c).dtype == torch.float32
    torch.testing.assert_close(grads.clipped_sum(c).double(), expected, rtol=1e-6, atol=1e-6)


def test_embedding_norms_count_repeated_tokens_and_skip_padding():
    layer = nn.Embedding(6, 3, padding_idx=0)
    ids = torch.tensor([[1, 2, 1, 0], [3, 3, 3, 3]])
    g = torch.randn(2, 4, 3)
    c = torch.tensor([0.5, 2.0])
    explicit = torch.zeros(2, 6, 3)
    for i in range(2):
        explicit[i].index_add_(0, ids[i], g[i])
    explicit[:, 0] = 0  # torch gives the padding row no gradient
    grads = embedding(layer, ids, g)["weight"]
    _assert_norm_bound(grads.squared_norms, explicit.double())
    torch.testing.assert_close(grads.clipped_sum(c), torch.einsum("b,bvd->vd", c, explicit))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_rows_are_the_explicit_per_record_gradient(dtype):
    """Records of 64 positions drawn from 20 tokens (most repeat, some records hold one token only): G_i read back
    dense is torch's own per-record embedding gradient (autograd, float64, of the very g), its norm is that
    gradient's to within the sum of squares' γ_36 (no Gram matrix's accumulation slack), and the clipped sum is
    Σ_i c_i·G_i."""
    gen = torch.Generator().manual_seed(0)
    layer = nn.Embedding(20, 16)
    ids = torch.randint(0, 20, (6, 64), generator=gen)
    ids[1] = 7
    g = torch.randn(6, 64, 16, generator=gen).to(dtype)
    c = torch.rand(6, generator=gen)
    explicit = []
    for i in range(6):
        weight = layer.weight.detach().double().requires_grad_()
        (nn.functional.embedding(ids[i], weight) * g[i].double()).sum().backward()
        explicit.append(weight.grad)
    explicit = torch.stack(explicit)
    grads = embedding(layer, ids, g)["weight"]
    torch.testing.assert_close(grads.per_record().double(), explicit, rtol=1e-6, atol=1e-6)
    exact = explicit.flatten(1).square().sum(1)
    assert (grads.squared_norms >= exact * (1 - 1e-12)).all() and (grads.squared_norms <= exact * (1 + 1e-5)).all()
    torch.testing.assert_close(grads.clipped_sum(c).double(), torch.einsum("b,bvd->vd", c.double(), explicit),
                               rtol=1e-5, atol=1e-5)


def test_embeddings_formed_together_are_each_layers_own_per_record_gradients():
    """Embeddings whose ids and g have one shape (GPT-2's token and position embeddings) are formed together
    (`JOINT_RULES`), beside one of another shape: each weight's G_i, read back dense, is torch's per-record gradient
    of its own layer (autograd, float64), padding row included, its norm bounds that gradient's, and its clipped sum
    is Σ_i c_i·G_i."""
    gen = torch.Generator().manual_seed(0)
    tables = [nn.Embedding(20, 16), nn.Embedding(9, 16, padding_idx=2), nn.Embedding(20, 16), nn.Embedding(20, 16)]
    clipping_of = BookKeeping(nn.ModuleList(tables), max_grad_norm=1.0)
    c = torch.rand(4, generator=gen)
    kept, explicit = {}, {}
    for k, table in enumerate(tables):
        positions = 12 if k < 3 else 7
        ids = torch.randint(0, table.num_embeddings, (4, positions), generator=gen)
        g = torch.randn(4, positions, 16, generator=gen)
        kept[table] = (ids, g)
        explicit[table] = []
        for i in range(4):
            weight = table.weight.detach().double().requires_grad_()
            (nn.functional.embedding(ids[i], weight, padding_idx=table.padding_idx) * g[i].double()).sum().backward()
            explicit[table].append(weight.grad)
    assert (kept[tables[1]][0] == 2).any()
    shares = clipping_of.bucket_shares(kept, clipping.RecordBucket(None, 1), last=True)
    assert kept == {} and len(shares) == 4
    for table in tables:
        (grads,) = shares[table.weight]
        expected = torch.stack(explicit[table])
        torch.testing.assert_close(grads.per_record().double(), expected, rtol=1e-6, atol=1e-6)
        _assert_norm_bound(grads.squared_norms, expected)
        torch.testing.assert_close(grads.clipped_sum(c).double(), torch.einsum("b,bvd->vd", c.double(), expected),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stack_batch", [clipping.STACK_BATCH, 2 * 2 * 3 * 5 * 8])  # all at once; runs of two
def test_layer_norms_formed_together_are_each_layers_own_per_record_gradients(stack_batch, monkeypatch):
    """LayerNorms whose inputs and g have one shape are formed together (`JOINT_RULES`, in runs of `STACK_BATCH`),
    their x̂ from the statistics their forwards saved, beside one of another width, one without a bias and one that
    saved none (normalised again): each parameter's G_i is its own layer's Σ_t g_it ⊙ x̂_it (or Σ_t g_it), float64
    from torch's normalisation of its input, and the layers' kept tensors are left as they were."""
    monkeypatch.setattr(clipping, "STACK_BATCH", stack_batch)
    gen = torch.Generator().manual_seed(0)
    norms = [nn.LayerNorm(8), nn.LayerNorm(8), nn.LayerNorm(12), nn.LayerNorm(8, bias=False), nn.LayerNorm(8),
             nn.LayerNorm(8)]
    clipping_of = BookKeeping(nn.ModuleList(norms), max_grad_norm=1.0)
    kept, expected = {}, {}
    for k, m in enumerate(norms):
        x = torch.randn(3, 5, m.normalized_shape[0], generator=gen) * 3 + 1
        g = torch.randn(3, 5, m.normalized_shape[0], generator=gen)
        normalization = clipping.normalized_input(m, x, m(x.clone().requires_grad_()))
        if k == len(norms) - 1:  # as a GPU's, or a compiled graph's, LayerNorm keeps it
            normalization = clipping.Normalization(x, None, None, normalization.shape, normalization.eps)
        kept[m] = (normalization, g)
        x_hat = nn.functional.layer_norm(x.double(), m.normalized_shape, eps=m.eps)
        expected[m] = (torch.einsum("btd,btd->bd", g.double(), x_hat), g.double().sum(1))
    assert kept[norms[0]][0].mean is not None
    held = {m: [x for x in (n.x, n.mean, n.reciprocal, g) if x is not None] for m, (n, g) in kept.items()}
    copies = {m: [x.clone() for x in tensors] for m, tensors in held.items()}
    shares = clipping_of.bucket_shares(kept, clipping.RecordBucket(None, 1), last=True)
    assert kept == {}
    assert all(torch.equal(x, before) for m in held for x, before in zip(held[m], copies[m]))
    for m, (weight, bias) in expected.items():
        assert len(shares[m.weight]) == 1
        torch.testing.assert_close(shares[m.weight][0].double(), weight, rtol=1e-5, atol=1e-5)
        if m.bias is not None:
            torch.testing.assert_close(shares[m.bias][0].double(), bias, rtol=1e-5, atol=1e-6)
    assert len(shares) == 11


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_layer_norm_keeps_the_statistics_that_form_torchs_normalisation(precision):
    """What `bk` keeps of a LayerNorm's input (the statistics its forward saved, under autocast too) forms torch's
    own normalisation of that input: the layer's per-record sums Σ_t g_t ⊙ x̂_t from them are those of x̂ from
    torch's float64 layer_norm, and the input is left as it was."""
    layer = nn.LayerNorm(24)
    x = torch.randn(3, 5, 24) * 4 + 1
    g = torch.randn(3, 5, 24)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = layer(x.requires_grad_())
    kept = clipping.normalized_input(layer, x.detach(), out)
    assert kept.mean is not None  # the forward's saved statistics, not a second normalisation
    before = x.detach().clone()
    grads = clipping.layer_norm(layer, kept, g)
    x_hat = nn.functional.layer_norm(before.double(), (24,), eps=layer.eps)
    torch.testing.assert_close(grads["weight"].double(), (g.double() * x_hat).sum(1), rtol=0, atol=1e-5)
    torch.testing.assert_close(grads["bias"].double(), g.double().sum(1), rtol=0, atol=1e-5)
    assert torch.equal(x.detach(), before)


def test_packed_calls_stack_as_positions_of_their_first_rows():
    calls = [torch.ones(3, 2), 2 * torch.ones(2, 2), 3 * torch.ones(1, 2)]  # time steps of a packed batch of 3
    out = stacked(calls, 3)
    assert out.shape == (3, 3, 2)
    assert out[:, :, 0].tolist() == [[1, 2, 3], [1, 2, 0], [1, 0, 0]]


def test_a_layer_without_a_rule_is_a_user_error_naming_its_type():
    with pytest.raises(UserError, match="Conv2d"):
        BookKeeping(nn.Sequential(nn.Conv2d(1, 1, 3), nn.Flatten()), 1.0)


def test_bk_clips_a_tied_embedding_and_head_as_hooks_do():
    """A pretrained GPT-2 ties its LM head to the token embedding: that parameter's G_i sums both layers' shares."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from sdp_core.models.gpt2 import GPT2LM

    config = GPT2Config(vocab_size=VOCAB, n_positions=128, n_layer=1, n_embd=32, n_head=2, tie_word_embeddings=True,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    data = _lm_data(8, 16)
    results = []
    for mode in ("hooks", "bk"):
        torch.manual_seed(0)
        model = GPT2LM(GPT2LMHeadModel(config))
        assert model.model.lm_head.weight is model.model.transformer.wte.weight
        phase = Phase("dp", data, private=True, epochs=1, batch_size=8, sigmas=(0.0,), max_grad_norm=0.05)
        sgd = torch.optim.SGD(model.parameters(), lr=0.0)
        step = DPStep(StepContext(model, sgd, mode, TorchNoise(torch.Generator())), phase)
        step(data, 0.0)
        results.append([p.grad.clone() for p in step.optimizer.params])
        if mode == "hooks":
            per_record = _per_record(step.optimizer.params)
        step.close()
    _assert_equal(results[1], results[0], per_record, 0.05, 8)



# ----------------------------------------------------------------------------- records of several rows


def _windowed(record_index: list[int], seed: int = 0) -> LMData:
    """Rows of random tokens and loss weights, row r a window of record `record_index[r]`."""
    data = _lm_data(len(record_index), 16, seed)
    return LMData(data.input_ids, data.weights, data.sensitive, torch.tensor(record_index))


def _step_sum(mode: str, batch: LMData, clip: float, precision=None) -> torch.Tensor:
    """Σ clipped of one σ = 0 DP step of gpt2-tiny on `batch`, flattened (the optimizer's division undone)."""
    from sdp_core.train.precision import FP32

    torch.manual_seed(0)
    model = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0)
    phase = Phase("dp", batch, private=True, epochs=1, batch_size=len(batch), sigmas=(0.0,), max_grad_norm=clip)
    step = DPStep(StepContext(model, torch.optim.SGD(model.parameters(), lr=0.0), mode, TorchNoise(torch.Generator()),
                              precision=precision or FP32), phase)
    step(batch, 0.0)
    out = torch.cat([p.grad.flatten() for p in step.optimizer.params]).double() * step.optimizer.expected_batch_size
    step.close()
    return out


def _row_gradients(batch: LMData) -> torch.Tensor:
    """Every row's gradient of gpt2-tiny (the same initialisation as `_step_sum`) in float64, by autograd, one row
    at a time: [rows, parameters]."""
    from sdp_core.tensors import record_losses

    torch.manual_seed(0)
    model = build_gpt2("gpt2-tiny", None, VOCAB, 16, 0.0).double()
    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for r in range(len(batch)):
        ids = batch.input_ids[r : r + 1]
        loss = record_losses(model(ids), ids, batch.weights[r : r + 1].double())[0]
        rows.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    return torch.stack(rows)


LAYOUTS = {  # each row's record: rows of one record together or scattered (S-DPSGD's packed order)
    "mixed": [0, 0, 0, 0, 0, 0, 1, 2, 2],  # 6, 1 and 2 windows: 6·16 positions instantiate gpt2-tiny's attention
    "pairs": [0, 0, 1, 1, 2, 2, 3, 3],
    "scattered": [2, 0, 1, 0, 3, 2, 0, 3],
}
CLIP = 0.05  # below every row's gradient norm: every record is clipped


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode,precision", [("bk", "fp32"), ("bk", "bf16"), ("hooks", "fp32"), ("hooks", "bf16")])
def test_a_record_of_several_windows_is_clipped_as_one(layout, mode, precision):
    """The step's clipped sum is Σ_r c_r·G_r over records, G_r the float64 sum of its windows' gradients (autograd,
    row by row), c_r = min(1, C/‖G_r‖): fp32 to the last digits (bk's factors up to its bounds' slack), bf16 to its
    8 bits."""
    from sdp_core.train.precision import FP32, Precision

    batch = _windowed(LAYOUTS[layout])
    rows = _row_gradients(batch)
    per_record = torch.zeros(int(batch.record_index.max()) + 1, rows.shape[1], dtype=torch.float64)
    per_record.index_add_(0, batch.record_index, rows)
    factors = (CLIP / per_record.norm(dim=1)).clamp(max=1.0)
    assert (factors < 1).all()
    expected = (factors[:, None] * per_record).sum(0)
    got = _step_sum(mode, batch, CLIP, FP32 if precision == "fp32" else Precision("bf16", 1.0))
    if precision == "fp32":
        _assert_clipped_sum(got, per_record, factors)
    else:
        assert (got - expected).norm() <= 2e-2 * expected.norm()


@pytest.mark.parametrize("mode,precision", [("bk", "fp32"), ("bk", "bf16"), ("hooks", "fp32"), ("hooks", "bf16")])
def test_a_record_of_several_windows_adds_at_most_c(mode, precision):
    """Record 0 is three copies of one window: clipped per row it would add 3C. Each record's contribution, the
    step on its rows alone, is at most C (bk and hooks: up to fp32 rounding, as for a one-row record)."""
    from sdp_core.train.precision import FP32, Precision

    batch = _windowed([0, 0, 0, 1, 2, 2])
    copies = batch.input_ids.clone()
    copies[1:3] = copies[0]
    weights = batch.weights.clone()
    weights[1:3] = weights[0]
    batch = LMData(copies, weights, batch.sensitive, batch.record_index)
    norms = [_step_sum(mode, batch.subset(torch.nonzero(batch.record_index == r).flatten()), CLIP,
                       FP32 if precision == "fp32" else Precision("bf16", 1.0)).norm().item() for r in range(3)]
    assert norms[0] > 0.9 * CLIP  # clipped: the bound is reached
    assert max(norms) <= CLIP * (1 + 1e-5)


def test_record_buckets_hold_each_record_whole_and_unpadded():
    from sdp_core.train.clipping import record_buckets

    records = torch.tensor([2, 0, 1, 0, 3, 2, 0, 3])  # windows: 3, 1, 2, 2
    buckets = record_buckets(records)
    assert sorted((b.windows, len(b.rows)) for b in buckets) == [(1, 1), (2, 4), (3, 3)]
    x = torch.arange(8.0)[:, None, None].expand(8, 5, 2)  # [rows, T, d]: each row's entries are its index
    for b in buckets:
        grouped = b.regrouped(x)
        assert grouped.shape == (len(b.rows) // b.windows, b.windows * 5, 2)
        for rec in grouped:  # every position of a grouped record comes from rows of one record
            assert len(set(records[rec[:, 0].long()].tolist())) == 1
    assert [(b.rows, b.windows) for b in record_buckets(torch.tensor([0, 0, 1, 1]))] == [(None, 2)]  # a view
    assert [(b.rows, b.windows) for b in record_buckets(torch.tensor([1, 0, 2]))] == [(None, 1)]
