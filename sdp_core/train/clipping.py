"""Per-record gradient clipping for the private step: Opacus' hooks and ghost clipping, and book-keeping (`bk`).

`DPStep` runs a batch's forward through `clipping.module`, hands the per-row losses and the record of each row to
`clipping.backward` and lets Opacus' DP optimizer add N(0, σ²C²), divide by the expected batch size and step. A
record longer than a row is several rows (its windows); its gradient G_i = ∇L_i is the sum of its rows' gradients,
L_i the sum of their losses, and it is clipped as one. The modes differ only in how they reach the clipped sum
Σ_i c_i·G_i, c_i = min(1, C/‖G_i‖), of the per-record gradients:

- `hooks`: Opacus materialises every row's gradient (`p.grad_sample`, B copies of each parameter), summed here into
  each record's G_i; `DPOptimizer` clips them.
- `ghost`: Opacus' ghost clipping (Li et al. 2022, "Large language models can be strong differentially private
  learners"): a first backward yields the norms ‖G_i‖ without any G_i, a second backward of Σ_i c_i·L_i the sum.
  Opacus' norms are per row; a record of several rows is clipped by the sum of its rows' norms, which bounds
  ‖G_i‖ (triangle inequality): it adds at most C, and is clipped harder than its own norm would ask.
- `bk`: book-keeping (Bu et al. 2023, "Differentially private optimization on large model at small cost"): one
  backward of Σ_i L_i that computes output gradients only (no parameter gradient); every trainable layer keeps its
  inputs a and output gradients g, from which it forms its share of ‖G_i‖² — a ghost norm or an instantiated G_i,
  whichever is cheaper for that layer (mixed ghost clipping, Bu et al. 2022, "Scalable and efficient training of
  large convolutional neural networks with differential privacy") — and then, from the same tensors, its clipped
  sum ((c ⊙ g)ᵀ a as one matmul, or Σ_i c_i·G_i). No second backward; the embedding never gets a per-record copy
  (B × V × d), and a weight only where its G_i take no more memory than the a and g they replace. A record of w
  rows is one record of w·T positions (`RecordBucket`): every rule then forms its norm exactly, cross terms
  between its windows included.

Both `ghost` and `bk` hand the clipped sum over in `p.grad` to Opacus' `DPOptimizerFastGradientClipping` (or its
distributed variant), the `DPOptimizer` that takes a clipped sum as given: its `step` copies it to `summed_grad`,
then `add_noise` (rank 0 only under DDP), `scale_grad`, `reduce_gradients` (DDP) and the original optimizer's step,
with the same noise draws, in the same parameter order, as `DPOptimizer` in `hooks` mode.

Under mixed precision (`precision`) the pieces (activations, output gradients, Opacus' per-sample gradients or
norms) are bf16/fp16; every mode forms the norms, clipping factors (`clip_factors`: weight 0 for a non-finite norm)
and clipped sum in fp32 from them, and divides fp16's loss scale out in fp32 before anything is compared with C.
`bk` reads bf16 pieces as bf16 matmul operands with fp32 accumulation and output (`fp32_product`: the GPU's tensor
cores); the one operand it rounds, c_i·a_i of a ghost layer's clipped sum, is covered by `rounding_allowance`.
"""

from __future__ import annotations

import warnings
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, Protocol

import torch
from opacus.grad_sample.utils import wrap_model
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.autograd.graph import GradientEdge, get_gradient_edge
from transformers.pytorch_utils import Conv1D

from sdp_core.errors import UserError
from sdp_core.train.precision import clip_factors, scaled_rows

# Opacus' hooks on the embedding see no input gradient (token ids are integers); torch warns on every step.
warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)


class PerRecordClipping(Protocol):
    """How a private step turns per-record losses into the clipped sum that Opacus' DP optimizer noises."""

    module: nn.Module  # what the step's forward runs
    optimizer_mode: str  # Opacus' grad_sample_mode whose DP optimizer takes the result

    def backward(self, losses: torch.Tensor, optimizer: DPOptimizer, records: torch.Tensor) -> None: ...
    # losses [rows]; records [rows]: each row's record, 0 .. R−1 (`tensors.record_groups`), clipped as one

    def empty_batch(self, optimizer: DPOptimizer) -> None: ...

    def paused(self) -> ContextManager[None]: ...  # a forward and backward that are not private (S-DPSGD's public slots)

    def close(self) -> nn.Module: ...


def unscaled(x: torch.Tensor, loss_scale: float) -> torch.Tensor:
    """A gradient piece in fp32 with fp16's loss scale divided out (no copy for an fp32 piece and scale 1)."""
    x = x.float()
    return x / loss_scale if loss_scale != 1.0 else x


def zero_clipped_sum(optimizer: DPOptimizer) -> None:
    """An empty Poisson batch's clipped sum, in `p.grad` (ghost, bk): zero, so the step adds noise only."""
    for p in optimizer.params:
        p.grad = torch.zeros_like(p)


class OpacusModule:
    """The model inside Opacus' `GradSampleModule` of mode `optimizer_mode` (the base of `hooks` and `ghost`)."""

    optimizer_mode: str

    def __init__(self, model: nn.Module, **kwargs: float):
        self.module = wrap_model(model, self.optimizer_mode, batch_first=True, loss_reduction="sum", **kwargs)

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.module.disable_hooks()
        try:
            yield
        finally:
            self.module.enable_hooks()

    def close(self) -> nn.Module:
        return self.module.to_standard_module()


class OpacusHooks(OpacusModule):
    """Opacus' per-sample gradients (Abadi et al. 2016): every G_i in `p.grad_sample`, clipped by `DPOptimizer`."""

    optimizer_mode = "hooks"

    def __init__(self, model: nn.Module, max_grad_norm: float, loss_scale: float = 1.0):
        super().__init__(model)  # DPOptimizer clips
        self.loss_scale = loss_scale

    def backward(self, losses: torch.Tensor, optimizer: DPOptimizer, records: torch.Tensor) -> None:
        """The module's loss_reduction "sum": exact per-row gradients, summed into each record's (its windows').
        Opacus forms them in the pieces' dtype; here they become fp32 and unscaled before `DPOptimizer` takes their
        norms and clipped sum, and a record with a non-finite entry anywhere becomes zero (weight 0: 0·inf would be
        NaN in Opacus' einsum)."""
        (losses.sum() * self.loss_scale).backward()
        params = [p for p in optimizer.params if p.grad_sample is not None]
        count = int(records.max()) + 1
        finite = None
        for p in params:
            p.grad_sample = unscaled(p.grad_sample, self.loss_scale)
            if count < len(records):  # some record has several rows
                p.grad_sample = p.grad_sample.new_zeros((count, *p.shape)).index_add_(0, records, p.grad_sample)
            ok = torch.isfinite(p.grad_sample.flatten(1)).all(1)
            finite = ok if finite is None else finite & ok
        if finite is not None and not finite.all():
            for p in params:
                p.grad_sample = scaled_rows(p.grad_sample, finite.float())

    def empty_batch(self, optimizer: DPOptimizer) -> None:
        for p in optimizer.params:
            p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)


class OpacusGhost(OpacusModule):
    """Opacus' ghost clipping (Li et al. 2022; Bu et al. 2022): norms from a first backward, the clipped sum from a
    second backward of Σ_i c_i·L_i, in `p.grad`."""

    optimizer_mode = "ghost"

    def __init__(self, model: nn.Module, max_grad_norm: float, loss_scale: float = 1.0):
        if loss_scale != 1.0:
            raise UserError("training.precision fp16 needs grad_sample_mode bk or hooks: Opacus' ghost norms are "
                            "formed in fp16, whose range a squared norm above 256 overflows")
        super().__init__(model, max_grad_norm=max_grad_norm)
        self.max_grad_norm = max_grad_norm

    def backward(self, losses: torch.Tensor, optimizer: DPOptimizer, records: torch.Tensor) -> None:
        """Opacus' two passes (`DPTensorFastGradientClipping.backward`), with the clipping factors formed in fp32
        from its per-layer norms (bf16 under autocast), and weight 0 for a record whose norm is not finite. Every
        row of a record takes the record's factor, from the sum of its rows' norms (≥ ‖G_i‖)."""
        losses.sum().backward(retain_graph=True)
        optimizer.zero_grad()
        norms = torch.stack([p._norm_sample.float() for p in self.module.trainable_parameters]).norm(dim=0)
        records = records.to(norms.device)
        bounds = norms.new_zeros(int(records.max()) + 1).index_add_(0, records, norms)
        clip = clip_factors(bounds, self.max_grad_norm)[records].to(losses.device)
        with self.paused():
            scaled_rows(losses, clip).sum().backward()

    def empty_batch(self, optimizer: DPOptimizer) -> None:
        zero_clipped_sum(optimizer)


# ------------------------------------------------------------------------------------- book-keeping


def fp32_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y (batched or not) accumulated and returned in fp32. A bf16/fp16 pair runs on the GPU's 16-bit tensor
    cores (`out_dtype`); the product of two such numbers is exact in fp32, so only the fp32 accumulation rounds, as
    in an fp32 matmul. Elsewhere (a CPU has no such kernel) the operands are upcast first, which is exact too."""
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and y.dtype == x.dtype:
        return (torch.bmm if x.dim() == 3 else torch.mm)(x, y, out_dtype=torch.float32)
    return x.float() @ y.float()


def operand_roundoff(x: torch.Tensor) -> float:
    """u such that a matmul reads an fp32 value v, computed in place of x, as v·(1 + δ) with |δ| ≤ u per entry
    (Higham 2002, "Accuracy and stability of numerical algorithms", §2.2). bf16 operands: u = 2⁻⁸. fp32 operands
    on a GPU with TF32 matmuls: TF32's 2⁻¹¹ for v and again for the piece the norm was formed from, 2⁻⁹ with room.
    Plain fp32: 0 here (the rounding every fp32 step has, in every mode)."""
    if x.dtype == torch.bfloat16:
        return 2.0**-8
    if x.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        return 2.0**-9
    return 0.0


@dataclass(frozen=True)
class ParameterGradients:
    """One layer's share of a parameter's per-record gradients G_i, held in whichever form is cheapest: their
    squared norms, the clipped sum Σ_i c_i·G_i formed on demand from the same tensors, and G_i materialised
    ([B, *parameter shape]; only for a parameter several layers share, such as a tied embedding and LM head).
    `rounding` bounds, per record, how far the clipped sum's contribution can be from c_i times the G_i whose norm
    was taken, per unit of c_i, where norm and sum read differently rounded operands (`rounding_allowance`: a ghost
    layer's sum rounds c_i·a_i; on a GPU, TF32 rounds the embedding's Gram matrix); 0 where they read the same."""

    squared_norms: torch.Tensor  # [B]
    clipped_sum: Callable[[torch.Tensor], torch.Tensor]  # c [B] -> Σ_i c_i·G_i
    per_record: Callable[[], torch.Tensor]
    rounding: torch.Tensor  # [B]


def instantiated(per_record: torch.Tensor) -> ParameterGradients:
    """G_i materialised in fp32, [B, ...]: biases, LayerNorm, and weights whose G_i are no larger than their a and g.
    Norm and clipped sum read the same numbers, so the contribution is c_i·G_i up to fp32 rounding."""
    per_record = per_record.float()
    norms = torch.linalg.vector_norm(per_record.flatten(1), dim=1).square()
    return ParameterGradients(norms, lambda c: scaled_rows(per_record, c).sum(0), lambda: per_record,
                              torch.zeros_like(norms))


def shared(layers: list[ParameterGradients]) -> ParameterGradients:
    """A parameter several layers use: G_i is the sum of their shares, whose norm has cross terms, so it is
    materialised (as Opacus' hooks do for it) — the other parameters keep their cheaper forms."""
    return instantiated(sum(layer.per_record() for layer in layers))


def ghost_norms(a: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """‖Σ_t g_it a_itᵀ‖² = Σ_{t,s} (a_it·a_is)(g_it·g_is) for a [B, T, d_in], g [B, T, d_out], without forming the
    d_out × d_in sums (Li et al. 2022's ghost clipping): B·T²·(d_in + d_out) multiply-adds, in fp32 from 16-bit
    operands. Also Σ_t ‖a_it‖·‖g_it‖, from the Gram matrices' diagonals, for `rounding_allowance`."""
    a_gram, g_gram = fp32_product(a, a.transpose(1, 2)), fp32_product(g, g.transpose(1, 2))
    diagonal = (a_gram.diagonal(dim1=1, dim2=2) * g_gram.diagonal(dim1=1, dim2=2)).sqrt().sum(1)
    return (a_gram * g_gram).sum((1, 2)), diagonal


def rounding_allowance(norms: torch.Tensor, rounding: torch.Tensor) -> torch.Tensor:
    """What the clipping factors are computed from: ‖G_i‖ + ‖(R_il)_l‖, over layers l, with R_il = u·Σ_t ‖a_it‖·‖g_it‖.

    A ghost layer's clipped sum multiplies c_i·a_it (or c_i·g_it), rounded to its operand format, rather than the
    a_it the norm read: entry by entry (1 + δ) with |δ| ≤ u (`operand_roundoff`), so its contribution differs from
    c_i·G_il by at most c_i·u·Σ_t ‖g_it‖‖δ ⊙ a_it‖ ≤ c_i·R_il, and by the triangle inequality the record's whole
    contribution has norm ≤ c_i·(‖G_i‖ + ‖R_i‖) ≤ C (up to fp32 accumulation, as in every mode). Without this a
    record whose per-position terms cancel could exceed C by up to u·R_i/‖G_i‖ of it. fp32 on a CPU: R = 0."""
    return norms + torch.linalg.vector_norm(rounding, dim=0)


def weight_gradients(a: torch.Tensor, g: torch.Tensor, transposed: bool) -> ParameterGradients:
    """G_i = g_iᵀ a_i [d_out, d_in] (`nn.Linear`), or a_iᵀ g_i [d_in, d_out] (`transposed`: transformers' Conv1D).

    Per layer, the cheaper of two forms (mixed ghost clipping, Bu et al. 2022). Book-keeping pays the
    B·T·d_in·d_out multiply-adds of a_iᵀ g_i either way: as a ghost layer's clipped sum (one matmul over all B·T
    positions, scaling the narrower of a and g by c), or as the instantiation itself, after which norms and sum
    take B·d_in·d_out. Instantiating therefore saves the ghost norms' B·T²·(d_in + d_out); it is chosen when the
    G_i it keeps take no more memory than the a and g it lets go, d_in·d_out ≤ T·(d_in + d_out), and ghost norms
    otherwise (the large layers of long sequences: their extra memory is two T×T Gram matrices per record).
    """
    positions, d_in, d_out = a.shape[1], a.shape[2], g.shape[2]

    def per_record() -> torch.Tensor:
        return fp32_product(a.transpose(1, 2), g) if transposed else fp32_product(g.transpose(1, 2), a)

    if d_in * d_out <= positions * (d_in + d_out):
        return instantiated(per_record())

    def clipped_sum(c: torch.Tensor) -> torch.Tensor:
        # c in fp32, the product rounded once to the operand format (`rounding_allowance`)
        x, y = (scaled_rows(a, c).to(a.dtype), g) if d_in <= d_out else (a, scaled_rows(g, c).to(g.dtype))
        x, y = x.reshape(-1, d_in), y.reshape(-1, d_out)
        return fp32_product(x.T, y) if transposed else fp32_product(y.T, x)

    norms, diagonal = ghost_norms(a, g)
    return ParameterGradients(norms, clipped_sum, per_record, operand_roundoff(a) * diagonal)


def affine(module: nn.Module, a: torch.Tensor, g: torch.Tensor, transposed: bool) -> dict[str, ParameterGradients]:
    """y = a·Wᵀ + b (or a·W + b): the weight's gradients and, with a bias, its G_i = Σ_t g_it."""
    out = {"weight": weight_gradients(a, g, transposed)}
    if module.bias is not None:
        out["bias"] = instantiated(g.sum(1, dtype=torch.float32))
    return out


def linear(module: nn.Linear, a: torch.Tensor, g: torch.Tensor) -> dict[str, ParameterGradients]:
    return affine(module, a, g, transposed=False)


def conv1d(module: Conv1D, a: torch.Tensor, g: torch.Tensor) -> dict[str, ParameterGradients]:
    """transformers' Conv1D (GPT-2): y = a·W + b with W [d_in, d_out]."""
    return affine(module, a, g, transposed=True)


def embedding(module: nn.Embedding, ids: torch.Tensor, g: torch.Tensor) -> dict[str, ParameterGradients]:
    """Row x_it of G_i collects g_it: ‖G_i‖² = Σ_{t,s} [x_it = x_is] (g_it·g_is) (Li et al. 2022), and the clipped
    sum adds c_i·g_it into row x_it — never a dense B × V × d tensor. The padding row gets no gradient, as in torch."""
    if module.padding_idx is not None:
        g = g * (ids != module.padding_idx).unsqueeze(-1)
    same = ids.unsqueeze(2) == ids.unsqueeze(1)
    gram = fp32_product(g, g.transpose(1, 2))
    norms = (gram * same).sum((1, 2))
    # The sum below reads g exactly; a Gram matrix formed from rounded g (TF32) is off by at most u·Σ_t ‖g_it‖.
    rounding = operand_roundoff(g) * gram.diagonal(dim1=1, dim2=2).sqrt().sum(1)

    def clipped_sum(c: torch.Tensor) -> torch.Tensor:
        rows = scaled_rows(g.float(), c).flatten(0, 1)
        return torch.zeros_like(module.weight, dtype=torch.float32).index_add_(0, ids.flatten(), rows)

    def per_record() -> torch.Tensor:
        rows = torch.zeros((len(ids), *module.weight.shape), dtype=torch.float32, device=g.device)
        return rows.scatter_add_(1, ids.unsqueeze(-1).expand_as(g), g.float())

    return {"weight": ParameterGradients(norms, clipped_sum, per_record, rounding)}


def layer_norm(module: nn.LayerNorm, a: torch.Tensor, g: torch.Tensor) -> dict[str, ParameterGradients]:
    """y = x̂ ⊙ w + b: G_i = Σ_t g_it ⊙ x̂_it for w, Σ_t g_it for b, instantiated ([B, d] each)."""
    a, g = a.float(), g.float()
    x_hat = nn.functional.layer_norm(a, module.normalized_shape, eps=module.eps)
    per_record = {"weight": (g * x_hat).sum(1), "bias": g.sum(1)}
    return {name: instantiated(per_record[name]) for name, _ in module.named_parameters(recurse=False)}


LayerRule = Callable[[nn.Module, torch.Tensor, torch.Tensor], dict[str, ParameterGradients]]

LAYER_RULES: dict[type[nn.Module], LayerRule] = {
    nn.Linear: linear,  # also Opacus' RNNLinear: DPLSTM's gates
    Conv1D: conv1d,
    nn.Embedding: embedding,
    nn.LayerNorm: layer_norm,
}


AUTOCAST_MATMULS = (linear, conv1d)
"""Rules of layers whose product autocast computes in low precision from an input it casts (an input kept in the
output's dtype is then exactly the operand the layer used)."""


def layer_rule(module: nn.Module) -> LayerRule | None:
    """The rule of the module's type or of its nearest base class in `LAYER_RULES`."""
    return next((LAYER_RULES[t] for t in type(module).__mro__ if t in LAYER_RULES), None)


def trainable_layers(model: nn.Module) -> dict[nn.Module, LayerRule]:
    """Every module holding a trainable parameter, with its rule; a `UserError` names a module type that holds a
    trainable parameter no rule covers (a parameter may also sit in a container that aliases it, as DPLSTM does)."""
    layers = {m: layer_rule(m) for m in model.modules()
              if layer_rule(m) is not None and any(p.requires_grad for p in m.parameters(recurse=False))}
    covered = {p for m in layers for p in m.parameters(recurse=False)}
    for name, m in model.named_modules():
        if any(p.requires_grad and p not in covered for p in m.parameters(recurse=False)):
            raise UserError(f"grad_sample_mode bk has no per-record gradient rule for {type(m).__name__} ({name}); "
                            "use grad_sample_mode hooks")
    return layers


def stacked(parts: list[torch.Tensor], batch: int) -> torch.Tensor:
    """A layer's tensors of all its calls as [B, positions(, features)]: a call on n < B rows (a packed time step)
    holds the first n records, and every call adds positions (DPLSTM's cells run once per time step)."""
    parts = [x.reshape(len(x), -1, x.shape[-1]) if x.is_floating_point() else x.reshape(len(x), -1) for x in parts]
    if len(parts) == 1 and len(parts[0]) == batch:
        return parts[0]
    return torch.cat([torch.cat([x, x.new_zeros((batch - len(x), *x.shape[1:]))]) for x in parts], dim=1)


@dataclass(frozen=True)
class RecordBucket:
    """The records of a batch that have `windows` rows each, read as records of windows·T positions: a record's
    gradient is the sum of its rows', so its rows one after another along the positions axis are one record to
    every layer rule (its norm gets the cross terms between its windows; its mixed ghost/instantiate choice sees
    the longer T). `rows`: the bucket's rows, record by record (None: every row, in order)."""

    rows: torch.Tensor | None
    windows: int

    def regrouped(self, x: torch.Tensor) -> torch.Tensor:
        """A layer's [rows, T(, d)] tensor as [records, windows·T(, d)]."""
        x = x if self.rows is None else x[self.rows]
        return x if self.windows == 1 else x.reshape(len(x) // self.windows, self.windows * x.shape[1], *x.shape[2:])


def record_buckets(records: torch.Tensor) -> list[RecordBucket]:
    """A batch's rows as buckets of records with equally many rows (`records`: each row's record, 0 .. R−1). A
    record's clipping factor depends on its own gradient alone, so buckets are clipped one after another; none is
    padded. A batch whose records all have one row, or all w consecutive rows, is one bucket of every row."""
    counts = torch.bincount(records)
    sizes = counts.unique().tolist()
    if len(sizes) == 1 and (sizes[0] == 1 or bool((records[1:] >= records[:-1]).all())):
        return [RecordBucket(None, sizes[0])]
    order = torch.argsort(records, stable=True)
    per_row = counts[records[order]]
    return [RecordBucket(order[per_row == w], w) for w in sizes]


def operands(a: torch.Tensor, g: torch.Tensor, loss_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's kept input and output gradient as its norms' and sums' matmuls read them: a bf16 pair (or token
    ids and a bf16 g) as it is, since bf16 has fp32's range (scaling by c_i underflows no sooner than in fp32);
    anything else in fp32, with fp16's loss scale divided out."""
    if g.dtype == torch.bfloat16 and a.dtype in (torch.bfloat16, torch.long, torch.int):
        return a, g
    return (a.float() if a.is_floating_point() else a), unscaled(g, loss_scale)


class BookKeeping:
    """Book-keeping clipping (Bu et al. 2023) with per-layer mixed ghost norms (Bu et al. 2022); see the module
    docstring. Forward hooks keep each trainable layer's input and the autograd edge of its output; `backward`
    asks autograd for the output gradients only, then clips and sums layer by layer into `p.grad`."""

    optimizer_mode = "ghost"  # Opacus' DP optimizer that takes the clipped sum in p.grad

    def __init__(self, model: nn.Module, max_grad_norm: float, loss_scale: float = 1.0):
        self.module, self.max_grad_norm, self.loss_scale = model, max_grad_norm, loss_scale
        self.layers = trainable_layers(model)
        self.calls: dict[nn.Module, list[tuple[torch.Tensor, GradientEdge]]] = defaultdict(list)
        self.capturing = True
        self.handles = [m.register_forward_hook(self.keep) for m in self.layers]

    def keep(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        """Forward hook: the layer's input and where its output's gradient arrives (a forward under no_grad or
        `paused` keeps nothing). The edge is the output's own: a later in-place change of the output cannot move it."""
        if self.capturing and output.requires_grad:
            a = inputs[0].detach()
            if output.dtype != a.dtype and a.is_floating_point() and self.layers[module] in AUTOCAST_MATMULS:
                a = a.to(output.dtype)  # what autocast's matmul read (a LayerNorm's fp32 output, cast): half the memory
            self.calls[module].append((a, get_gradient_edge(output)))

    def backward(self, losses: torch.Tensor, optimizer: DPOptimizer, records: torch.Tensor) -> None:
        """One backward of Σ_i L_i to the layer outputs (exact per-row gradients), then Σ_i c_i·G_i in `p.grad`,
        G_i the gradient of record i's rows together (`records`), bucket by bucket (`record_buckets`). Each layer's
        inputs and output gradients are released as soon as its parameters' sums in the last bucket are formed."""
        calls, self.calls = self.calls, defaultdict(list)
        edges = [edge for layer_calls in calls.values() for _, edge in layer_calls]
        grads = deque(torch.autograd.grad(losses.sum() * self.loss_scale, edges, allow_unused=True))  # call order
        with torch.no_grad():
            kept = {module: pair for module in list(calls)
                    if (pair := self.layer_operands(calls.pop(module), grads, len(losses))) is not None}
            buckets = record_buckets(records)
            sums: dict[nn.Parameter, torch.Tensor] = {}
            for k, bucket in enumerate(buckets):
                take = kept.pop if k == len(buckets) - 1 else kept.get  # the last bucket lets each layer go
                shares: dict[nn.Parameter, list[ParameterGradients]] = defaultdict(list)  # one per layer using it
                for module in list(kept):
                    a, g = take(module)
                    for param, grads_of in self.layer_gradients(module, bucket.regrouped(a), bucket.regrouped(g)):
                        shares[param].append(grads_of)
                per_param = {p: share[0] if len(share) == 1 else shared(share) for p, share in shares.items()}
                del shares  # a shared parameter's per-layer tensors
                norms = torch.stack([grads_of.squared_norms for grads_of in per_param.values()]).sum(0).sqrt()
                rounding = torch.stack([grads_of.rounding for grads_of in per_param.values()])
                clip = clip_factors(rounding_allowance(norms, rounding), self.max_grad_norm)
                for p in optimizer.params:
                    if (grads_of := per_param.pop(p, None)) is not None:
                        part = grads_of.clipped_sum(clip).view_as(p)
                        sums[p] = sums[p] + part if p in sums else part
            for p in optimizer.params:
                p.grad = sums.pop(p).to(p.dtype) if p in sums else torch.zeros_like(p)

    def layer_operands(self, calls: list[tuple[torch.Tensor, GradientEdge]], grads: deque[torch.Tensor | None],
                       batch: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """One layer's calls' inputs and their output gradients (the next ones in `grads`; None: an output the
        loss does not use) as [rows, positions, d] operands; None when the loss uses none of its outputs."""
        kept = [(a, g) for a, g in ((a, grads.popleft()) for a, _ in calls) if g is not None]
        if not kept:
            return None
        return operands(*(stacked([pair[i] for pair in kept], batch) for i in (0, 1)), self.loss_scale)

    def layer_gradients(self, module: nn.Module, a: torch.Tensor, g: torch.Tensor
                        ) -> list[tuple[nn.Parameter, ParameterGradients]]:
        """One layer's per-record gradients from its operands. Its a and g live on only where its forms keep them."""
        return [(module.get_parameter(name), grads_of) for name, grads_of in self.layers[module](module, a, g).items()
                if module.get_parameter(name).requires_grad]

    def empty_batch(self, optimizer: DPOptimizer) -> None:
        zero_clipped_sum(optimizer)

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.capturing = False
        try:
            yield
        finally:
            self.capturing = True

    def close(self) -> nn.Module:
        for handle in self.handles:
            handle.remove()
        return self.module


CLIPPING: dict[str, Callable[[nn.Module, float, float], PerRecordClipping]] = {
    "hooks": OpacusHooks,
    "ghost": OpacusGhost,
    "bk": BookKeeping,
}
"""`training.grad_sample_mode` -> how the private step clips: built from the model, the clipping norm C and the
loss scale (fp16; 1 otherwise) that the pieces carry."""
