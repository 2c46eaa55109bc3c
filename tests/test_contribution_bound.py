"""One record adds at most C to `bk`'s clipped sum, in every layer form and precision, even a record built so that
its per-position gradient terms cancel: the case where rounding moves a ghost norm by more than the norm itself.

Each record's contribution is measured as `bk` forms it (the layer's clipped sum with that record's clipping factor
alone, as computed from the layer's own norm bound and rounding allowance) and its norm taken in float64. The
records' true gradients are formed in float64 from the very pieces (a, g) the matmuls read, and C lies below
all of them, so every record is clipped. On a GPU the same checks run on the TF32 and bf16 tensor-core paths.
"""

from __future__ import annotations

import pytest
import torch

from sdp_core.train.clipping import embedding, rounding_allowance, weight_gradients
from sdp_core.train.precision import clip_factors, use_tf32

TOLERANCE = 1e-5
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CASES = [(device, dtype) for device in DEVICES for dtype in (torch.float32, torch.bfloat16)]
# fp16 pieces are divided by the loss scale into fp32 before any norm (`clipping.operands`): the fp32 case covers them


def _cancelling_records(n: int, positions: int, width: int, eps: float, dtype: torch.dtype, device: str
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Records of a 64 → 64 layer whose positions come in pairs (a, g), (a + eps·δ, −g): the pair's terms g aᵀ cancel
    to eps·g δᵀ, so ‖G_i‖ is about eps·√(T/2) of D_i = Σ_t ‖a_t‖‖g_t‖. The pieces are rounded to `dtype` first."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, positions // 2, width, generator=gen).repeat_interleave(2, dim=1)
    a[:, 1::2] += eps * torch.randn(n, positions // 2, width, generator=gen)
    g = torch.randn(n, positions // 2, width, generator=gen).repeat_interleave(2, dim=1)
    g[:, 1::2] *= -1
    return a.to(dtype).to(device), g.to(dtype).to(device)


def _worst_contribution(grads, true_norms: torch.Tensor) -> float:
    """The largest ‖clipped share of one record‖ / C over the records, C being half the smallest true norm."""
    clip = 0.5 * true_norms.min().item()
    factors = clip_factors(rounding_allowance(grads.squared_norms.sqrt(), grads.rounding[None]), clip)
    worst = 0.0
    for i in range(len(factors)):
        alone = torch.zeros_like(factors)
        alone[i] = factors[i]
        worst = max(worst, grads.clipped_sum(alone).double().norm().item() / clip)
    return worst


@pytest.fixture(autouse=True)
def _tf32_on_a_gpu():
    """The training default on a GPU: fp32 matmuls in TF32 (the path whose operand rounding the allowance covers)."""
    if torch.cuda.is_available():
        use_tf32(torch.device("cuda"), True)


@pytest.mark.parametrize("eps", [1e-4, 1e-2])
@pytest.mark.parametrize("device,dtype", CASES)
def test_a_ghost_layer_record_whose_terms_cancel_adds_at_most_c(device, dtype, eps):
    a, g = _cancelling_records(64, 16, 64, eps, dtype, device)  # T·(d_in + d_out) < d_in·d_out: ghost norms
    grads = weight_gradients(a, g, transposed=False)
    true = torch.einsum("bto,bti->boi", g.double(), a.double()).flatten(1).norm(dim=1)
    assert (true > 0).all()
    assert _worst_contribution(grads, true) <= 1 + TOLERANCE


@pytest.mark.parametrize("device,dtype", CASES)
def test_an_instantiated_layer_record_whose_terms_cancel_adds_at_most_c(device, dtype):
    a, g = _cancelling_records(16, 64, 16, 1e-4, dtype, device)  # T·(d_in + d_out) > d_in·d_out: G_i instantiated
    grads = weight_gradients(a, g, transposed=True)
    true = torch.einsum("bti,bto->bio", a.double(), g.double()).flatten(1).norm(dim=1)
    assert _worst_contribution(grads, true) <= 1 + TOLERANCE


@pytest.mark.parametrize("device,dtype", CASES)
def test_an_embedding_record_whose_terms_cancel_adds_at_most_c(device, dtype):
    """A token repeated at positions whose output gradients nearly cancel: its row of G_i nearly vanishes."""
    layer = torch.nn.Embedding(8, 64).to(device)
    ids = torch.tensor([[1, 1, 2, 2, 3, 3, 4, 4]] * 32, device=device)
    eps = 1e-4 if dtype == torch.float32 else 1e-2  # bf16 resolves 2⁻⁸: a smaller difference would round to 0
    _, g = _cancelling_records(32, 8, 64, 0.0, torch.float32, "cpu")
    g[:, 1::2] -= eps * g[:, ::2]  # g_s = −(1 + eps)·g_t for the repeated token
    g = g.to(dtype).to(device)
    grads = embedding(layer, ids, g)["weight"]
    explicit = torch.zeros(32, 8, 64, dtype=torch.float64, device=device)
    for i in range(32):
        explicit[i].index_add_(0, ids[i], g[i].double())
    assert _worst_contribution(grads, explicit.flatten(1).norm(dim=1)) <= 1 + TOLERANCE


@pytest.mark.parametrize("switch_on", [
    lambda: use_tf32(torch.device("cuda"), True),
    lambda: torch.set_float32_matmul_precision("high"),
    lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
    lambda: (setattr(torch.backends.cuda.matmul, "fp32_precision", "none"),
             setattr(torch.backends, "fp32_precision", "tf32")),
])
def test_tf32_switched_on_through_any_of_torchs_settings_is_seen_by_the_allowance(switch_on):
    """However TF32 was switched on for CUDA matmuls (the project's switch, the legacy one, the newer per-backend
    and global `fp32_precision`), the allowance reads TF32's operand rounding, and reading it never raises (torch
    refuses to read the legacy flag once the newer settings were used)."""
    from sdp_core.train.precision import cuda_fp32_matmul_roundoff

    saved = torch.backends.cuda.matmul.fp32_precision, torch.backends.fp32_precision
    try:
        use_tf32(torch.device("cuda"), False)
        assert cuda_fp32_matmul_roundoff() == 0.0
        switch_on()
        assert cuda_fp32_matmul_roundoff() == 2.0**-11
    finally:
        torch.backends.fp32_precision = saved[1]
        torch.backends.cuda.matmul.fp32_precision = saved[0]


@pytest.mark.parametrize("device,dtype", CASES)
def test_a_ghost_layer_record_whose_products_underflow_adds_at_most_c(device, dtype):
    """Layer inputs near 1e-23 and output gradients near 1e17 at an MLP projection's shape (3072 → 768, T = 512,
    ghost norms): every product of two inputs underflows fp32, so an unscaled Gram matrix of the inputs is 0, while
    the record's gradient (entries near 1e-6) is far from 0."""
    gen = torch.Generator().manual_seed(0)
    a = (1e-23 * torch.randn(2, 512, 3072, generator=gen)).to(dtype).to(device)
    g = (1e17 * torch.randn(2, 512, 768, generator=gen)).to(dtype).to(device)
    grads = weight_gradients(a, g, transposed=True)
    true = torch.einsum("bti,bto->bio", a.double(), g.double()).flatten(1).norm(dim=1)
    assert (true > 1e-3).all()
    assert _worst_contribution(grads, true) <= 1 + TOLERANCE


def test_a_hooks_record_at_gpt2_small_head_size_adds_at_most_c():
    """Opacus hooks' per-sample gradient of a two-window record at the size of gpt2-small's LM head (and embedding,
    50,257 × 768): one large entry per row and many whose squares are 2⁻¹⁶ of it, which a fp32 norm reduction
    partly rounds away. The record's contribution, with σ = 0 and B = 1, is the step's gradient."""
    from torch import nn

    from sdp_core.train.clipping import OpacusHooks
    from sdp_core.train.noise import dp_optimizer_class

    head = nn.Linear(768, 50257, bias=False)
    a = torch.full((2, 1, 768), 2.0**-8)
    a[:, :, 0] = 1.0
    w = torch.ones(2, 1, 50257)  # the output gradient of each window's loss (layer output · w)
    true = (2 * w[0].T.double() @ a[0].double()).norm().item()  # both windows, one record
    clip = 0.5 * true
    clipping = OpacusHooks(head, clip)
    optimizer = dp_optimizer_class("hooks", False)(torch.optim.SGD(head.parameters(), lr=0.0), noise_multiplier=0.0,
                                                   max_grad_norm=clip, expected_batch_size=1, loss_reduction="mean")
    clipping.backward((clipping.module(a) * w).sum((1, 2)), optimizer, torch.tensor([0, 0]))
    optimizer.step()
    assert head.weight.grad.double().norm().item() / clip <= 1 + TOLERANCE
    clipping.close()
