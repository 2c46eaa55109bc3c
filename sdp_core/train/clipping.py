"""Per-record gradient clipping for the private step: Opacus' hooks and book-keeping (`bk`).

`DPStep` runs a batch's forward through `clipping.module`, hands the per-row losses and the record of each row to
`clipping.backward` and lets Opacus' DP optimizer add N(0, σ²C²), divide by the expected batch size and step. A
record longer than a row is several rows (its windows); its gradient G_i = ∇L_i is the sum of its rows' gradients,
L_i the sum of their losses, and it is clipped as one. The modes differ only in how they reach the clipped sum
Σ_i c_i·G_i, c_i = min(1, C/‖G_i‖), of the per-record gradients:

- `hooks`: Opacus materialises every row's gradient (`p.grad_sample`, B copies of each parameter), summed here into
  each record's G_i; `DPOptimizer` clips them, with each record's norm bounded from above as `bk` bounds an
  instantiated G_i (`BoundedNormClipping`).
- `bk`: book-keeping (Bu et al. 2023, "Differentially private optimization on large model at small cost"): one
  backward of Σ_i L_i that computes output gradients only (no parameter gradient); every trainable layer keeps its
  inputs a and output gradients g, from which it forms its share of ‖G_i‖² — a ghost norm (Li et al. 2022, "Large
  language models can be strong differentially private learners") or an instantiated G_i, whichever is cheaper for
  that layer (mixed ghost clipping, Bu et al. 2022, "Scalable and efficient training of large convolutional neural
  networks with differential privacy") — and then, from the same tensors, its clipped sum ((c ⊙ g)ᵀ a as one
  matmul, or Σ_i c_i·G_i). No second backward; the embedding never gets a per-record copy (B × V × d), and a weight
  only where its G_i take no more memory than the a and g they replace. A record of w rows is one record of w·T
  positions (`RecordBucket`): every rule then forms its norm exactly, cross terms between its windows included.

Opacus' own ghost clipping is not offered: its norms carry no bound on their rounding, and a record whose position
terms cancel gets a norm near 0 and adds many times C. `bk`'s norms are upper bounds with proven error terms
(`ghost_norms`, `rounding_allowance`): one record adds at most C in every precision and layer form.

`bk` hands the clipped sum over in `p.grad` to Opacus' `DPOptimizerFastGradientClipping` (or its distributed
variant), the `DPOptimizer` that takes a clipped sum as given: its `step` takes it as `summed_grad` (without
Opacus' copy: `noise.GivenClippedSum`; the sums of layers formed together are views of one tensor), then
`add_noise` (rank 0 only under DDP), `scale_grad`, `reduce_gradients` (DDP) and the original optimizer's step, with
the same noise draws, in the same parameter order, as `DPOptimizer` in `hooks` mode.

Under mixed precision (`precision`) the pieces (activations, output gradients, Opacus' per-sample gradients) are
bf16/fp16; every mode forms the norms, clipping factors (`clip_factors`: weight 0 for a non-finite norm) and
clipped sum in fp32 from them, and divides fp16's loss scale out in fp32 before anything is compared with C.
`bk` reads bf16 pieces as bf16 matmul operands with fp32 accumulation and output (`fp32_product`: the GPU's tensor
cores); what rounding can move, in the norms and in the sum, is covered by its bounds.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Protocol, TypeAlias

import torch
from opacus.grad_sample.utils import wrap_model
from opacus.optimizers import DPOptimizer
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed
from torch import nn
from torch.autograd.graph import GradientEdge, get_gradient_edge
from torch.profiler import record_function
from transformers.pytorch_utils import Conv1D

from sdp_core.errors import UserError
from sdp_core.train.fp32_reads import (SQUARES_CHUNK, chunked_squared_norms, normalized_record_sums,
                                       weighted_record_sum)
from sdp_core.train.precision import clip_factors, cuda_fp32_matmul_roundoff, scaled_rows

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


class OpacusHooks:
    """Opacus' per-sample gradients (Abadi et al. 2016): every G_i in `p.grad_sample`, clipped by `DPOptimizer`
    (with `BoundedNormClipping`'s norms)."""

    optimizer_mode = "hooks"

    def __init__(self, model: nn.Module, max_grad_norm: float, loss_scale: float = 1.0):
        # DPOptimizer clips the per-sample gradients
        self.module = wrap_model(model, self.optimizer_mode, batch_first=True, loss_reduction="sum")
        self.loss_scale = loss_scale

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.module.disable_hooks()
        try:
            yield
        finally:
            self.module.enable_hooks()

    def close(self) -> nn.Module:
        return self.module.to_standard_module()

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


# ------------------------------------------------------------------------------------- book-keeping

ACCUMULATION_ROUNDOFF = 2.0**-23
"""u of an fp32 accumulation inside a matmul or reduction: round-to-nearest's 2⁻²⁴, doubled because tensor cores
may truncate while they accumulate (Fasi et al. 2021, "Numerical behavior of NVIDIA tensor cores")."""
GRAM_CHUNK = 1024
"""The most features summed per fp32 product when a Gram matrix is formed; the partial products are then added in
fp32. d features go in m = ⌈d/`GRAM_CHUNK`⌉ chunks of k = ⌈d/m⌉ rounded up to `GRAM_ALIGN` (the last zero-padded),
or in chunks of the width they share with tensors of other widths (`shared_width`), and an entry's accumulation
bound grows with k + m − 1 terms instead of d (Higham 2002, §3.1, blocked summation): for an LM head's output
gradients (d = 50,257: 50 chunks of 1,008) 1,057 instead of 50,257."""
GRAM_ALIGN = 8
"""A chunk's width is a multiple of this many features (up to `GRAM_CHUNK`), zero-padded: cuBLAS's fastest
tensor-core kernels need each row to start 16-byte aligned (its tensor-op restrictions), which 1,006 bf16 or fp32
features (50,257 in 50 even chunks) are not. Padding adds exact zeros, and the bound reads the k it used."""
BF16_SCALED_ROUNDOFF = 2.0**-8 * (1 + 2.0**-15)
"""c_i·x rounded twice, to fp32 (the product) and then to bf16: (1 + 2⁻²⁴)(1 + 2⁻⁸) − 1 < 2⁻⁸(1 + 2⁻¹⁵)."""


def gamma(n: int) -> float:
    """γ_n = n·u/(1 − n·u) (Higham 2002, Lemma 3.1): an n-term fp32 accumulation of products is off by at most γ_n
    times the sum of the terms' magnitudes, whatever the order of the additions."""
    nu = n * ACCUMULATION_ROUNDOFF
    return nu / (1 - nu)


def fp32_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y (batched or not) accumulated and returned in fp32. A bf16/fp16 pair runs on the GPU's 16-bit tensor
    cores (`out_dtype`); the product of two such numbers is exact in fp32, so only the fp32 accumulation rounds, as
    in an fp32 matmul. Elsewhere (a CPU has no such kernel) the operands are upcast first, which is exact too."""
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and y.dtype == x.dtype:
        return (torch.bmm if x.dim() == 3 else torch.mm)(x, y, out_dtype=torch.float32)
    return x.float() @ y.float()


def product_format(x: torch.Tensor) -> torch.dtype:
    """The format `fp32_product` reads x in: its own on a GPU's 16-bit tensor cores, fp32 elsewhere. A copy of x
    scaled by a power of two for a Gram matrix (`grams`: exact in either format) is made in this format
    directly, so that a CPU makes no 16-bit copy for the product to upcast again."""
    return x.dtype if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) else torch.float32


def instantiation_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y for instantiated per-record gradients. On a GPU, `fp32_product`. On a CPU, bf16 operands are
    multiplied as bf16 (fp32 accumulation, the result rounded to bf16, as a bf16 step's weight gradients are) and the
    product stays bf16: an instantiated G_i's norm and clipped sum read the same numbers, each in fp32 as it reads
    them (`fp32_reads`), so rounding them moves no record past C. The product runs on the CPU's bf16 units (about 3×
    faster than upcasting both operands, at gpt2-tiny's head), and no fp32 copy of any G_i is made."""
    if not x.is_cuda and x.dtype == torch.bfloat16 and y.dtype == x.dtype:
        return x @ y
    return fp32_product(x, y)


def read_roundoff(x: torch.Tensor) -> float:
    """u such that a matmul reads each entry v of x as v·(1 + δ), |δ| ≤ u (Higham 2002, §2.2): 0 for 16-bit pieces
    (their products are exact in fp32) and for fp32 on a CPU; on a GPU, the operand format of its fp32 matmuls
    (TF32's 2⁻¹¹ unless they run in IEEE fp32)."""
    return cuda_fp32_matmul_roundoff() if x.is_cuda and x.dtype == torch.float32 else 0.0


def scaled_roundoff(x: torch.Tensor) -> float:
    """u of c_i·x_i computed in fp32 and stored in x's format (bf16: `BF16_SCALED_ROUNDOFF`; fp32: 2⁻²⁴)."""
    return BF16_SCALED_ROUNDOFF if x.dtype == torch.bfloat16 else 2.0**-24


@dataclass(frozen=True)
class GramSums:
    """A Gram-matrix norm's per-record sums (`ghost_norms`), in the units of its operands scaled by
    powers of two, and the constants of its bounds, which `norm_bounds` adds for all such layers at once:
    ‖G_i‖² ≤ (products + κ·D'² + Λ)·s², D_i ≤ D'·s with D' = (diagonal + slack)·factor, and the rounding allowance
    ρ·D_i."""

    products: torch.Tensor  # [B] float64: the computed Σ_{t,s} of the Gram matrices' products
    diagonal: torch.Tensor  # [B] float64: the computed Σ_t √(product of the diagonals)
    scale: torch.Tensor  # s [B] float64: the power of two the operands were divided by (both together)
    slack: float  # what underflow can take from `diagonal`
    factor: float  # the diagonal's rounding: D' ≥ the true Σ_t (scaled)
    kappa: float
    underflow: float  # Λ
    rho: float  # rounding allowance per unit of D (`rounding_allowance`)


@dataclass(frozen=True)
class GhostOperands:
    """A ghost layer's a [B, T, d_in] and g [B, T, d_out] as its matmuls read them, and its rounding allowance per
    unit of D (`weight_gradients`): what `ghost_norms` turns into `GramSums`, for all ghost layers at once."""

    a: torch.Tensor
    g: torch.Tensor
    rho: float


def norm_bounds(bounds: list[torch.Tensor | GramSums | GhostOperands]) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_l ‖G_il‖² bounds [B], float64; the Gram forms' rounding allowances [L, B]) of a record's parameters: an
    instantiated form's squared norms as they are, every ghost layer's sums formed together (`ghost_norms`), and
    every Gram form's bound (`GramSums`) in a few operations for all of them, with the same float64 arithmetic as one
    at a time; the squares summed in the order given."""
    ghosts = iter(ghost_norms([b for b in bounds if isinstance(b, GhostOperands)]))
    bounds = [next(ghosts) if isinstance(b, GhostOperands) else b for b in bounds]
    grams = [b for b in bounds if isinstance(b, GramSums)]
    rows: list[torch.Tensor] = []
    rounding = torch.empty(0)
    if grams:
        constants = constant(tuple((b.slack, b.factor, b.kappa, b.underflow, b.rho) for b in grams), torch.float64,
                             grams[0].products.device).T.unsqueeze(-1)
        slack, factor, kappa, underflow, rho = constants
        products, diagonal, scale = (torch.stack(x) for x in zip(*[(b.products, b.diagonal, b.scale) for b in grams]))
        diagonal = (diagonal + slack) * factor
        squared = (products + kappa * diagonal.square() + underflow) * scale.square()
        rounding = rho * (diagonal * scale)
        rows = list(squared.unbind())
    squares = [rows.pop(0) if isinstance(b, GramSums) else b for b in bounds]
    return torch.stack(squares).sum(0), rounding


@dataclass(frozen=True)
class ParameterGradients:
    """One layer's share of a parameter's per-record gradients G_i, held in whichever form is cheapest.

    - `bound`: what `squared_norms` and `rounding` are formed from (`norm_bounds`, for all parameters at once): an
      instantiated G_i's squared norms, a Gram-matrix form's sums before its bounds are added (`GramSums`), or a
      ghost layer's operands, whose sums `ghost_norms` forms with every other ghost layer's.
    - `squared_norms` [B], float64: an upper bound on ‖G̃_i‖², where G̃_i is the gradient formed from the pieces as
      the matmuls read them: exact for an instantiated G_i, and for ghost norms the computed value plus a bound on
      its accumulation error (`ghost_norms`).
    - `rounding` [B], float64: a bound, per unit of c_i, on how far the clipped sum's share of record i can be from
      c_i·G_i beyond what `squared_norms` covers: ‖G_i − G̃_i‖ (pieces a matmul rounds when it reads them, TF32)
      plus the rounding of c_i·x_i in the clipped sum (`rounding_allowance`); 0 where norm and sum read the same
      fp32 numbers.
    - `clipped_sum(c)`: Σ_i c_i·G_i, formed on demand from `pieces`; for ghost layers of one shape, format and
      layout (`transposed_ghost`), `clipped_sums` forms them together.
    - `per_record()`: G_i materialised ([B, *parameter shape]; only for a parameter several layers share).
    - `pieces`: the tensors `clipped_sum` reads, records first. Under fp16 a record of weight 0 may hold inf or NaN
      there (its pieces overflowed under the loss scale), and 0·inf is NaN in every entry of a matmul over all
      positions, so `BookKeeping` replaces them by copies with that record's rows zeroed before any sum is formed.
      bf16 and fp32 pieces have fp32's range: one record's gradient entries stay finite (only its squared norm, a
      sum of squares, can overflow, and `clip_factors` gives that record weight 0).
    """

    bound: torch.Tensor | GramSums | GhostOperands
    clipped_sum: Callable[[torch.Tensor], torch.Tensor]
    per_record: Callable[[], torch.Tensor]
    pieces: list[torch.Tensor]
    transposed_ghost: bool | None = None  # a ghost layer's layout (`ghost_clipped_sums`); None: not a ghost layer

    @property
    def squared_norms(self) -> torch.Tensor:
        return norm_bounds([self.bound])[0]

    @property
    def rounding(self) -> torch.Tensor:
        rounding = norm_bounds([self.bound])[1]
        return rounding[0] if len(rounding) else torch.zeros_like(self.squared_norms)

    def drop_records(self, keep: torch.Tensor) -> None:
        """Zero the rows of records whose factor is 0 (`keep` False) in every piece the clipped sum reads."""
        self.pieces[:] = [torch.where(keep.view(-1, *[1] * (x.dim() - 1)), x, 0) if x.is_floating_point() else x
                          for x in self.pieces]


def sum_of_squares(x: torch.Tensor) -> torch.Tensor:
    """An upper bound on Σ_j x_ij² per record i of a tensor [B, ...], in float64: the entries' squares summed
    `SQUARES_CHUNK` at a time in fp32 (`chunked_squared_norms`: at most γ_{k+4} below the true sum of those
    positive terms, whatever the order), the chunks' sums added in float64. No float64 copy of x, nor an fp32 copy
    of a bf16 x. A square or a chunk's partial sum below `UNDERFLOW` may be flushed to 0: at most 2n such losses of
    less than it each, for a record's n entries, added back."""
    n = x[0].numel()
    return chunked_squared_norms(x.flatten(1)) / (1 - gamma(SQUARES_CHUNK + 4)) + 2 * n * UNDERFLOW


def instantiated(per_record: torch.Tensor) -> ParameterGradients:
    """G_i materialised, [B, ...]: biases, LayerNorm, and weights whose G_i are no larger than their a and g; fp32,
    or bf16 products on a CPU (`instantiation_product`), which both reductions read in fp32 without a copy
    (`fp32_reads`). Norm and clipped sum read the same numbers (`sum_of_squares` bounds the norm from above), so
    the contribution is c_i·G_i up to the sum's own fp32 accumulation."""
    pieces = [per_record]

    def clipped_sum(c: torch.Tensor) -> torch.Tensor:
        (per_record,) = pieces
        return weighted_record_sum(c, per_record.flatten(1)).view(per_record.shape[1:])

    return ParameterGradients(sum_of_squares(per_record), clipped_sum, lambda: pieces[0].float(), pieces)


def shared(layers: list[ParameterGradients | torch.Tensor]) -> ParameterGradients | torch.Tensor:
    """A parameter several layers use: G_i is the sum of their shares, whose norm has cross terms, so it is
    materialised (as Opacus' hooks do for it) — the other parameters keep their cheaper forms. Small shares stay
    small (their sum)."""
    per_record = sum(layer if isinstance(layer, torch.Tensor) else layer.per_record() for layer in layers)
    return per_record if all(isinstance(layer, torch.Tensor) for layer in layers) else instantiated(per_record)


def jointly_instantiated(per_record: list[torch.Tensor]) -> tuple[ParameterGradients, list[int]]:
    """Small parameters' instantiated G_i ([B, *shape_k], fp32) as one: their columns side by side, one
    `sum_of_squares` for the records' share of all of them (the squared norm of the concatenation is the sum of
    theirs) and one matrix-vector product for all their clipped sums, instead of a few operations per parameter.
    The sizes split the clipped sum back into parameters."""
    sizes = [x[0].numel() for x in per_record]
    return instantiated(torch.cat([x.flatten(1) for x in per_record], dim=1)), sizes


UNDERFLOW = 2.0**-126
"""The smallest normal fp32 (and bf16) number. A product, a sum or an operand below it may be kept as a subnormal
or flushed to 0 (FTZ/DAZ: some kernels do), and each such event moves it by less than this: an absolute error that
no relative bound (γ_n) covers. With layer inputs near 1e-23 every product a_it·a_is underflows, a ghost norm is
0 and its record, however large its gradient, gets clipping factor 1."""
SCALED_MAX = 4.0
"""|entries| of a record scaled by `grams` stay below this (below 2 unless the exponent is clamped)."""


@dataclass(frozen=True)
class Grams:
    """x'_i·x'_iᵀ per record of tensors x [B, T, d_x] of one record and position count, x' = x_i / s_i with s_i a
    power of two per record and tensor (`power_of_two_scales`), and bounds on their error: entry (t, s) of tensor k's
    matrix is off by at most gammas[k]·‖x'_it‖‖x'_is‖ + etas[k] from the exact product of the scaled pieces (the
    product with x itself is s_i² times that)."""

    matrices: torch.Tensor  # [X, B, T, T] fp32, in the tensors' order
    scales: torch.Tensor  # s_i [X, B] float64
    gammas: list[float]
    etas: list[float]


EXPONENT_BITS = 0x7F800000
"""The exponent field of an IEEE-754 fp32 number: x's bits masked by it are those of 2^⌊log₂ x⌋ (x normal)."""


def largest_magnitudes(x: torch.Tensor, kept: int = 1) -> torch.Tensor:
    """max |x| over all but the first `kept` dimensions (a tensor [B, ...]: each record's; a stack of chunks
    [C, B, ...]: each chunk's, record by record), in fp32 (exact; inf or NaN where the record holds one). A CPU takes
    |x| and its maximum, about 8× faster than its inf-norm reduction on a 32 × 128 × 128 tensor; a GPU runs the one
    reduction kernel, without the copy."""
    dims = list(range(kept, x.dim()))
    return (torch.linalg.vector_norm(x, ord=math.inf, dim=dims) if x.is_cuda else x.abs().amax(dims)).float()


def power_of_two_scales(largest: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(1/s_i in fp32, s_i in float64) from records' largest magnitudes (`largest_magnitudes`): s_i = 2^e_i ≤ the
    largest |entry| < 2^(e_i + 1), e_i clamped to [−126, 126] so that s_i and 1/s_i are normal numbers in fp32 and
    bf16. They are assembled from exponent bits (2^e has the bits (e + 127)·2²³, 2^−e the bits 254·2²³ minus
    those), so they are exact (and stay exact cast to bf16)."""
    bits = (largest.view(torch.int32) & EXPONENT_BITS).clamp(1 << 23, 253 << 23)
    return ((254 << 23) - bits).view(torch.float32), bits.view(torch.float32).double()


def cat(xs: list[torch.Tensor]) -> torch.Tensor:
    """Tensors concatenated along their first dimension; one tensor is itself (no copy)."""
    return torch.cat(xs) if len(xs) > 1 else xs[0]


@functools.lru_cache(maxsize=256)
def constant(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`values` (numbers, or tuples of them) as a tensor on `device`, made once per layout (a step's shapes): a step
    then copies nothing from host memory to a GPU, a copy after which the host waits for the device, so that its
    launches stop running ahead of the device's work."""
    return torch.tensor(values, dtype=dtype, device=device)


def chunk_owner(counts: list[int], device: torch.device) -> torch.Tensor:
    """Each chunk's tensor (its index), for tensors of `counts` chunks laid out one after another (`chunked`)."""
    return constant(tuple(k for k, m in enumerate(counts) for _ in range(m)), torch.long, device)


def gram_chunks(features: int) -> tuple[int, int]:
    """(m, k): a Gram matrix's d features as m chunks of k ≤ `GRAM_CHUNK`, k = ⌈d/⌈d/`GRAM_CHUNK`⌉⌉ rounded up to a
    multiple of `GRAM_ALIGN` (m = ⌈d/k⌉), only the last one short (zero-padded)."""
    even = math.ceil(features / math.ceil(features / GRAM_CHUNK))
    width = min(GRAM_CHUNK, math.ceil(even / GRAM_ALIGN) * GRAM_ALIGN)
    return math.ceil(features / width), width


GRAM_SHARED_MIN = 128
"""The narrowest chunk width that tensors of different widths share (`shared_width`): narrower chunks would cost
their products more than the operations that sharing saves."""


def shared_width(widths: list[int]) -> int | None:
    """The chunk width k ≤ `GRAM_CHUNK` that tensors of these widths share without padding: the largest multiple of
    `GRAM_ALIGN` dividing every width (a transformer's d, 3d and 4d share d, or d/2 above `GRAM_CHUNK`); None if it
    would be narrower than `GRAM_SHARED_MIN`."""
    common = math.gcd(*widths)
    widest = min(common, GRAM_CHUNK) // GRAM_ALIGN * GRAM_ALIGN
    return next((k for k in range(widest, GRAM_SHARED_MIN - 1, -GRAM_ALIGN) if common % k == 0), None)


def chunk_groups(xs: list[torch.Tensor]) -> list[tuple[list[int], int]]:
    """The tensors (indices into `xs`, all of one record and position count) that `grams` multiplies together, each
    group with its chunk width: those of one format whose widths are multiples of `GRAM_ALIGN` at the width they
    share (`shared_width`); every other tensor with those of its format and width, at its own (`gram_chunks`)."""
    by_format: dict[torch.dtype, list[int]] = defaultdict(list)
    for k, x in enumerate(xs):
        by_format[x.dtype].append(k)
    groups: list[tuple[list[int], int]] = []
    for members in by_format.values():
        aligned = [k for k in members if xs[k].shape[-1] % GRAM_ALIGN == 0]
        width = shared_width([xs[k].shape[-1] for k in aligned]) if aligned else None
        if width is not None:
            groups.append((aligned, width))
        sharing = set(aligned) if width is not None else set()
        by_width: dict[int, list[int]] = defaultdict(list)
        for k in members:
            if k not in sharing:
                by_width[xs[k].shape[-1]].append(k)
        groups += [(same, gram_chunks(features)[1]) for features, same in by_width.items()]
    return groups


def chunked(xs: list[torch.Tensor], width: int, inverses: torch.Tensor | None = None) -> torch.Tensor:
    """Tensors [B, T, d_x] of one record and position count and one format, each as its m_x = ⌈d_x/width⌉ chunks of
    `width` features in turn ([Σ_x m_x, B, T, width], a tensor's last chunk zero-padded where width does not divide
    d_x): a copy in their own format (one concatenation where no chunk is padded), or with `inverses` (1/s_i [B] of
    one tensor, `power_of_two_scales`) its x_i / s_i written there directly, in the format its product reads
    (`product_format`: a bf16 x times an fp32 inverse is fp32 on a CPU, exact as well)."""
    if inverses is None:
        padded = [x if (pad := -x.shape[-1] % width) == 0 else nn.functional.pad(x, (0, pad)) for x in xs]
        return torch.cat([x.unflatten(-1, (-1, width)).permute(2, 0, 1, 3) for x in padded])
    (x,) = xs
    full, rest = divmod(x.shape[-1], width)  # chunks without padding, and the last one's features
    out = torch.empty((full + bool(rest), *x.shape[:2], width), device=x.device, dtype=product_format(x))
    inverses = inverses.to(out.dtype).view(-1, 1, 1)
    torch.mul(x[..., :full * width].unflatten(-1, (full, width)).permute(2, 0, 1, 3), inverses, out=out[:full])
    if rest:
        torch.mul(x[..., full * width:], inverses, out=out[full, ..., :rest])
        out[full, ..., rest:] = 0
    return out


def chunk_products(chunks: torch.Tensor, counts: list[int], inverses: torch.Tensor | None = None) -> torch.Tensor:
    """[X, B, T, T]: for tensors of `counts` chunks laid out in turn in `chunks` [Σ counts, B, T, k] (`chunked`),
    each tensor's Gram matrices per record, the sum over its chunks of x_c·x_cᵀ. The chunks are multiplied as the
    records of batched products, as many at a time as hold `GRAM_BATCH` entries of partial products, and a tensor's
    partial products are added in fp32 (m_x − 1 additions an entry, in any order). With `inverses` ([Σ counts, B]:
    each chunk's 1/s_i) each part is first scaled into the format its product reads (a CPU's bf16 chunks into fp32):
    a copy the size of a part, not of all the chunks."""
    records, positions = chunks.shape[1:3]
    per_product = max(1, GRAM_BATCH // (records * positions**2))
    matrices: torch.Tensor | None = None
    for start in range(0, len(chunks), per_product):
        part = chunks[start:start + per_product]
        if inverses is not None:
            part = part * inverses[start:start + per_product].to(product_format(part)).view(*part.shape[:2], 1, 1)
        part = part.flatten(0, 1)
        product = fp32_product(part, part.transpose(1, 2)).unflatten(0, (-1, records))
        if len(chunks) == len(counts) <= per_product:  # one product of a chunk a tensor: the Gram matrices
            return product
        if matrices is None:
            matrices = torch.zeros((len(counts), records, positions, positions), device=chunks.device)
        matrices.index_add_(0, chunk_owner(counts, chunks.device)[start:start + per_product], product)
    assert matrices is not None
    return matrices


def grams(xs: list[torch.Tensor]) -> Grams:
    """The Gram matrices of tensors x [B, T, d_x] of one record and position count, each scaled record by record by
    a power of two (`power_of_two_scales`), formed from chunks of at most `GRAM_CHUNK` features whose partial
    products are added in fp32. The scaled entries are below 2 (below `SCALED_MAX` if the exponent was clamped), so
    no product of two of them overflows and only those ~2⁻¹²⁶ below the record's largest can underflow; dividing by a
    power of two is exact except for an entry it makes subnormal (moved by less than `UNDERFLOW`).

    The tensors go in groups (`chunk_groups`: a transformer block's a and g of widths d, 3d and 4d in one, at chunks
    of d features), each laid out as its tensors' chunks one after another (`chunked`: one copy, scaled in place
    where the products read its format — a GPU, fp32 — and a CPU's bf16 copy scaled into fp32 a product's chunks at a
    time, just before their product); a tensor alone is scaled straight into its chunk layout. The scales of all of
    them come from their chunks' largest magnitudes, each tensor's the largest of its chunks', and a group's chunks
    are multiplied together (`chunk_products`): a few operations for all the tensors (on a GPU, launches) rather
    than a few per tensor and chunk. Each record is still scaled by its own power of two and each Gram matrix is its
    own record's product, with the bounds below.

    γ: each entry's rounding relative to ‖x'_it‖‖x'_is‖ (Cauchy–Schwarz on γ_n's bound, n = k + m − 1 for m chunks
    of k features). η: its underflow, absolute. Each of the d products and fewer than 2d additions behind an entry
    (padding adds exact zeros) may lose less than `UNDERFLOW`, and each product (|x'| < `SCALED_MAX` = M) reads its two
    operands moved by less than 2·`UNDERFLOW` each (their scaling and a flush): per feature less than
    (4M + 3)·`UNDERFLOW` beyond the relative rounding, which later roundings grow by at most 1 + γ < 2:
    η = 2·(4M + 3)·d·`UNDERFLOW`."""
    records, positions = xs[0].shape[:2]
    assert all(x.shape[:2] == (records, positions) for x in xs)
    groups = chunk_groups(xs)
    counts = [[math.ceil(xs[k].shape[-1] / width) for k in members] for members, width in groups]
    stacks = [chunked([xs[k] for k in members], width) if len(members) > 1 else xs[members[0]]
              for members, width in groups]
    largest = []
    for stack, (members, _), count in zip(stacks, groups, counts):
        if len(members) == 1:  # a tensor alone: itself
            largest.append(largest_magnitudes(stack).unsqueeze(0))
            continue
        per_chunk = largest_magnitudes(stack, kept=2)  # [C, B]
        if len(per_chunk) > len(members):
            owner = chunk_owner(count, stack.device)
            per_chunk = torch.empty((len(members), records), device=stack.device).scatter_reduce_(
                0, owner.view(-1, 1).expand_as(per_chunk), per_chunk, "amax", include_self=False)
        largest.append(per_chunk)
    inverses, scales = power_of_two_scales(cat(largest))  # [X, B], the groups' tensors in turn
    del largest
    matrices = []
    first = 0
    for (members, width), count in zip(groups, counts):
        rows = slice(first, first + len(members))
        first = rows.stop
        stack, inverse = stacks.pop(0), inverses[rows]
        if len(members) == 1:  # a tensor alone, scaled straight into its chunk layout
            matrices.append(chunk_products(chunked([stack], width, inverse[0]), count))
        else:
            if len(stack) > len(members):
                inverse = inverse.index_select(0, chunk_owner(count, stack.device))  # each chunk's
            in_place = product_format(stack) == stack.dtype  # scaled in place, exactly
            if in_place:
                stack.mul_(inverse.to(stack.dtype).view(*inverse.shape, 1, 1))
            # a CPU's bf16 chunks are scaled into fp32 part by part
            matrices.append(chunk_products(stack, count, None if in_place else inverse))
        del stack
    order = [k for members, _ in groups for k in members]
    grouped = Grams(cat(matrices), scales, [gamma(width + m - 1) for (_, width), count in zip(groups, counts)
                                            for m in count],
                    [2 * (4 * SCALED_MAX + 3) * xs[k].shape[-1] * UNDERFLOW for k in order])
    if order == sorted(order):
        return grouped
    back = [order.index(k) for k in range(len(xs))]
    index = constant(tuple(back), torch.long, xs[0].device)
    return Grams(grouped.matrices.index_select(0, index), grouped.scales.index_select(0, index),
                 [grouped.gammas[j] for j in back], [grouped.etas[j] for j in back])


GRAM_BATCH = 2**25
"""Entries of partial Gram products (128 MiB in fp32) that one batched product of `grams` forms: a tensor's chunks
of features go that many at a time (gpt2-small's LM head output gradients, 50 chunks: all at once at batch
1 × 256, 16 a product at 32 × 256)."""
STACK_BATCH = 2**27
"""Entries (512 MiB in fp32) beyond which `ghost_norms` starts another batch of layers, and `clipped_sums` another
run, unless one layer alone holds more (`stack_budget`). `grams` stacks the a and g that share chunks
(`chunk_groups`) and `ghost_clipped_sums` those of one shape, a copy of at most that size while their Gram matrices
or clipped sums are formed (a CPU also scales a bf16 stack into fp32, a product's chunks at a time, and upcasts a
stack of clipped sums: up to three times its bf16 bytes, for a moment); a batch of ghost norms also holds its Gram
matrices (`held_entries`). Small layers, whose operations cost more launches than arithmetic, go many to a
batch (gpt2-small at batch 1 × 256: all 49 layers' Gram matrices and each shape's clipped sums); large ones a few."""


def runs(items: list, entries: int, budget: int) -> Iterator[list]:
    """`items` of `entries` entries each, in runs of at most `budget` entries (one item at least), taken out of the
    list run by run, so that what a run let go is not held by the list."""
    run = max(1, budget // entries)
    while items:
        part, items[:run] = items[:run], []
        yield part


def held_entries(layer: GhostOperands) -> int:
    """What a ghost layer adds to its batch of `ghost_norms`: its a and g (stacked), and 4·B·T² for its two Gram
    matrices and their elementwise product in float64 (`batch_gram_sums`)."""
    records, positions = layer.a.shape[:2]
    return layer.a.numel() + layer.g.numel() + 4 * records * positions**2


def stack_budget(entries: list[int]) -> int:
    """Entries a batch of ghost layers (`entries`: each layer's) may stack and hold at once: `STACK_BATCH`, or the
    largest layer's own if it holds more. That layer's Gram matrices take a scaled copy of its a and g on their own
    (an LM head's output gradients: 412 M entries at gpt2-small's 32 × 256), so batches that hold as much add no
    memory the step does not already take, and go fewer (gpt2-small at 32 × 256: three transformer blocks a batch
    rather than five layers). The clipped sums' runs and the LayerNorms' stacks (`JOINT_RULES`) take the same
    budget."""
    return max([STACK_BATCH, *entries])


def ghost_norms(layers: list[GhostOperands]) -> list[GramSums]:
    """The sums behind upper bounds (`norm_bounds`; ρ: each layer's rounding allowance per unit of D) on ‖G̃_i‖² = ‖Σ_t g̃_it ã_itᵀ‖² = Σ_{t,s} (ã_it·ã_is)(g̃_it·g̃_is) and on D_i = Σ_t ‖ã_it‖‖g̃_it‖,
    for each layer's a [B, T, d_in] and g [B, T, d_out] as the matmuls read them (ã, g̃), without forming the
    d_out × d_in sums (Li et al. 2022's ghost clipping): B·T²·(d_in + d_out) multiply-adds, in fp32 from 16-bit
    operands. The layers go in batches (`stack_budget`) of one record and position count: their
    Gram matrices with every tensor they share chunks with at once (`grams`), and the sums below for the whole batch:
    on a GPU, launches saved (gpt2-small at batch 1 × 256: 30 operators for all 49 layers, against 749 one tensor
    and chunk at a time), and every entry still its own record's and layer's.

    Each record's a and g are first scaled by powers of two (`grams`), exactly, and the norms scaled back in float64,
    so inputs near 1e-23 and output gradients near 1e17 neither underflow nor overflow the Gram matrices. Their
    entries are then off by at most γ_a‖a'_t‖‖a'_s‖ + η_a and γ_g‖g'_t‖‖g'_s‖ + η_g (`grams`), their elementwise
    products round once more (and may underflow, by less than `UNDERFLOW`) and are summed in float64, so the
    computed Σ_{t,s} is off by at most κ·D'_i² + Λ, κ = (1 + γ_a)(1 + γ_g)(1 + 2u) − 1 and
    Λ = (1 + 2u)·(M²T²·((1 + γ_a)·d_in·η_g + (1 + γ_g)·d_out·η_a) + T²·η_a·η_g) + T²·`UNDERFLOW`
    (Σ_t ‖a'_t‖ ≤ M·T·√d_in, as |a'| < M = `SCALED_MAX`); the bound adds both. Without κ·D² a record whose position terms cancel
    (‖G_i‖ ≪ D_i) can get a norm near 0, a clipping factor of 1, and add many times C. D'_i is read off the Gram
    matrices' diagonals (‖a'_t‖² ≤ (computed + η_a)/(1 − γ_a), and √((x + η_a)(y + η_g)) ≤ √(xy) + δ with
    δ = √(2M²·(d_out·η_a + d_in·η_g) + η_a·η_g) for diagonals x ≤ 2M²·d_in, y ≤ 2M²·d_out), with its own fp32
    rounding covered."""
    out: list[GramSums] = []
    with record_function("bk.ghost_norms"):
        held = [held_entries(layer) for layer in layers]
        budget = stack_budget(held)
        batch: list[GhostOperands] = []
        entries = 0  # what the batch holds
        for k, layer in enumerate(layers):
            batch.append(layer)
            entries += held[k]
            following = layers[k + 1] if k + 1 < len(layers) else None
            if (following is None or following.a.shape[:2] != layer.a.shape[:2]
                    or entries + held[k + 1] > budget):
                out += batch_gram_sums(batch, grams([x for member in batch for x in (member.a, member.g)]))
                batch, entries = [], 0
    return out


def batch_gram_sums(batch: list[GhostOperands], matrices: Grams) -> list[GramSums]:
    """`ghost_norms`' sums and bound constants for layers whose Gram matrices (`matrices`: of a and g of each layer in
    turn) have one shape, in a few operations: the diagonals' square roots and the elementwise products written in
    float64 (each rounded once in fp32, as the bounds count) and summed there, with no float64 copy made to sum."""
    a_grams, g_grams = matrices.matrices[0::2], matrices.matrices[1::2]  # [L, B, T, T]
    wide = functools.partial(torch.empty, dtype=torch.float64, device=a_grams.device)
    roots = torch.sqrt(a_grams.diagonal(dim1=2, dim2=3) * g_grams.diagonal(dim1=2, dim2=3), out=wide(a_grams.shape[:3]))
    diagonals = roots.sum(2)
    products = torch.mul(a_grams, g_grams, out=wide(a_grams.shape)).sum((2, 3))
    scales = matrices.scales[0::2] * matrices.scales[1::2]
    out = []
    for k, (layer, product, diagonal, scale) in enumerate(zip(batch, products, diagonals, scales)):
        positions, d_in, d_out = layer.a.shape[1], layer.a.shape[2], layer.g.shape[2]
        gamma_a, gamma_g = matrices.gammas[2 * k], matrices.gammas[2 * k + 1]
        eta_a, eta_g = matrices.etas[2 * k], matrices.etas[2 * k + 1]
        underflow = ((1 + 2 * ACCUMULATION_ROUNDOFF)
                     * (SCALED_MAX**2 * positions**2 * ((1 + gamma_a) * d_in * eta_g + (1 + gamma_g) * d_out * eta_a)
                        + positions**2 * eta_a * eta_g)
                     + positions**2 * UNDERFLOW)
        out.append(GramSums(product, diagonal, scale,
                            slack=positions * math.sqrt(2 * SCALED_MAX**2 * (d_out * eta_a + d_in * eta_g) + eta_a * eta_g),
                            factor=(1 + gamma(positions + 2)) / math.sqrt((1 - gamma_a) * (1 - gamma_g)),
                            kappa=(1 + gamma_a) * (1 + gamma_g) * (1 + 2 * ACCUMULATION_ROUNDOFF) - 1,
                            underflow=underflow, rho=layer.rho))
    return out


def rounding_allowance(norms: torch.Tensor, rounding: torch.Tensor) -> torch.Tensor:
    """What the clipping factors are computed from: ‖G_i‖ + ‖(R_il)_l‖ over layers l, with R_il = ρ_l·D_il.

    A ghost layer's clipped sum multiplies c_i·a_it (or c_i·g_it), rounded to its operand format, rather than the
    a_it the norm read, and a GPU's TF32 matmuls read fp32 pieces rounded: entry by entry (1 + δ) with
    |δ| ≤ u (`read_roundoff`, `scaled_roundoff`), so its contribution differs from c_i·G_il by at most c_i·R_il,
    and by the triangle inequality the record's whole contribution has norm ≤ c_i·(‖G_i‖ + ‖R_i‖) ≤ C (up to the
    clipped sum's own fp32 accumulation, as in every mode). Without this a record whose per-position terms cancel
    could exceed C by up to R_i/‖G_i‖ of it."""
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
    if d_in * d_out <= positions * (d_in + d_out):
        with record_function("bk.instantiate"):  # as a_iᵀ g_i for both: `transposed_as_parameter`
            grads = instantiated(instantiation_product(a.transpose(1, 2), g))
        return grads if transposed else transposed_as_parameter(grads)

    pieces = [a, g]

    def clipped_sum(c: torch.Tensor) -> torch.Tensor:
        return ghost_clipped_sums([pieces], c, transposed)[0]

    def per_record() -> torch.Tensor:
        a, g = pieces
        x, y = (a.transpose(1, 2), g) if transposed else (g.transpose(1, 2), a)
        return instantiation_product(x, y)

    u_a, u_g = read_roundoff(a), read_roundoff(g)
    read = (1 + u_a) * (1 + u_g) - 1  # ‖G_i − G̃_i‖ ≤ read·D_i
    summed = (1 + scaled_roundoff(a if d_in <= d_out else g)) * (1 + u_a) * (1 + u_g) - 1
    return ParameterGradients(GhostOperands(a, g, read + summed), clipped_sum, per_record, pieces, transposed)


def ghost_clipped_sums(layers: list[list[torch.Tensor]], c: torch.Tensor, transposed: bool) -> list[torch.Tensor]:
    """Σ_i c_i·G_i of ghost layers whose pieces [a, g] have one shape and format: the narrower of a and g scaled by c
    (c in fp32, the product rounded once to the operand format: `scaled_roundoff`), then aᵀ g over all B·T positions
    ([d_in, d_out], `transposed`) or gᵀ a ([d_out, d_in]), one product per layer, accumulated in fp32. Several
    layers are stacked (one copy of their pieces, the narrower scaled in place there) and multiplied in one batched
    product: each layer's sum is its own pieces' product, as alone. The sums are views of that product's one result."""
    stacked = len(layers) > 1
    a, g = (torch.stack(x) for x in zip(*layers)) if stacked else (x.unsqueeze(0) for x in layers[0])
    scale = c.view(1, -1, 1, 1)
    if a.shape[-1] <= g.shape[-1]:
        x, y = (a.mul_(scale) if stacked else (a * scale).to(a.dtype)), g
    else:
        x, y = a, (g.mul_(scale) if stacked else (g * scale).to(g.dtype))
    x, y = x.flatten(1, 2), y.flatten(1, 2)  # [L, B·T, d]
    return list((fp32_product(x.transpose(1, 2), y) if transposed else fp32_product(y.transpose(1, 2), x)).unbind())


def clipped_sums(forms: list[ParameterGradients], c: torch.Tensor) -> list[torch.Tensor]:
    """Each form's Σ_i c_i·G_i, in order: ghost layers of one shape, format and layout together
    (`ghost_clipped_sums`, in runs whose pieces hold at most `stack_budget` entries, the copy that stacking makes),
    the others each by its own `clipped_sum`. The forms are taken over (the list is emptied) and each let go once its
    sum is formed, so that the layers' a, g and G_i that nothing else holds (`BookKeeping.bucket_shares`) are freed
    run by run as the sums proceed, not at the end."""
    pending = dict(enumerate(forms))
    forms.clear()
    out: dict[int, torch.Tensor] = {}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for k in range(len(pending)):
        if (layout := pending[k].transposed_ghost) is None:
            out[k] = pending.pop(k).clipped_sum(c)
        else:
            groups[(layout, *[(x.shape, x.dtype) for x in pending[k].pieces])].append(k)
    sizes = {key: sum(x.numel() for x in pending[members[0]].pieces) for key, members in groups.items()}
    budget = stack_budget(list(sizes.values()))
    for (transposed, *shapes), members in groups.items():
        for part in runs(members, sizes[(transposed, *shapes)], budget):
            out.update(zip(part, ghost_clipped_sums([pending.pop(k).pieces for k in part], c, transposed)))
    return [out[k] for k in range(len(out))]


def transposed_as_parameter(grads: ParameterGradients) -> ParameterGradients:
    """An `nn.Linear`'s instantiated G_i formed as G_iᵀ = a_iᵀ g_i [d_in, d_out] and read as its [d_out, d_in]
    parameter's: the norms are the same, the clipped sum is transposed once. A CPU's batched products run faster
    with the wider dimension last (gpt2-tiny's LM head in bf16: 11.4 ms against 12.5 ms for g_iᵀ a_i)."""
    return ParameterGradients(grads.bound, lambda c: grads.clipped_sum(c).T.contiguous(),
                              lambda: grads.per_record().transpose(1, 2), grads.pieces)


def affine(module: nn.Module, a: torch.Tensor, g: torch.Tensor, transposed: bool) -> LayerGradients:
    """y = a·Wᵀ + b (or a·W + b): the weight's gradients and, with a bias, its G_i = Σ_t g_it (small: fp32 [B, d]).

    A CPU's bf16 g is summed as bf16 (fp32 accumulation, the result rounded to bf16, as a bf16 step's bias gradient
    is) and then upcast, exactly: as for `instantiation_product`, the norm and the clipped sum both read these very
    numbers, so the rounding moves no record past C. Summing into fp32 directly would upcast all of g first (a CPU's
    reductions do not widen as they read), four times the time of the bf16 sum at gpt2-tiny's widths."""
    out: LayerGradients = {"weight": weight_gradients(a, g, transposed)}
    if module.bias is not None:
        with record_function("bk.small_layers"):
            low = not g.is_cuda and g.dtype == torch.bfloat16
            out["bias"] = g.sum(1).float() if low else g.sum(1, dtype=torch.float32)
    return out


def linear(module: nn.Linear, a: torch.Tensor, g: torch.Tensor) -> LayerGradients:
    return affine(module, a, g, transposed=False)


def conv1d(module: Conv1D, a: torch.Tensor, g: torch.Tensor) -> LayerGradients:
    """transformers' Conv1D (GPT-2): y = a·W + b with W [d_in, d_out]."""
    return affine(module, a, g, transposed=True)


def embedding(module: nn.Embedding, ids: torch.Tensor, g: torch.Tensor) -> LayerGradients:
    """G_i instantiated as its rows that can be nonzero: row x_it of G_i collects g_it, so record i's G_i has at most
    T such rows, one per distinct token of the record. Each record's positions are sorted by token and the g_it of
    one token summed (in fp32) into that token's slot: `rows` [B, T, d], slot k of record i holding its k-th distinct
    token (`tokens`), the slots after the last zero. ‖G_i‖² is then these rows' sum of squares (`sum_of_squares`),
    and the clipped sum adds c_i·row into the token's row — never a dense B × V × d tensor, and no Gram matrix (Li et
    al. 2022's Σ_{t,s} [x_it = x_is] (g_it·g_is) takes B·T²·d products where this takes B·T·d additions). As for
    `instantiated`, norm and clipped sum read the same fp32 numbers, so summing a token's g_it in fp32 moves no
    record past C. The padding row gets no gradient, as in torch."""
    return embeddings([(module, ids, g)])[0]


def embeddings(layers: list[tuple[nn.Module, torch.Tensor, torch.Tensor]]) -> list[LayerGradients]:
    """`embedding` for embeddings whose ids and g have one shape and format (`JOINT_RULES`: GPT-2's token and
    position embeddings), all at once: their ids stacked as the records of one tensor, whose positions are sorted,
    each layer's g summed into the rows of its records (read where it is: GPT-2's two embeddings receive one tensor,
    which a stack would copy twice), and the rows' norms bounded together, then split back by layer; only the clipped
    sums, into each layer's own weight, are formed layer by layer. Each record's rows are its own layer's."""
    with record_function("bk.embedding_norms"):
        ids = cat([layer_ids for _, layer_ids, _ in layers])
        tokens, order = ids.sort(dim=1)
        starts = torch.zeros_like(tokens, dtype=torch.bool)  # a sorted position holding another token than the last
        torch.ne(tokens[:, 1:], tokens[:, :-1], out=starts[:, 1:])
        slots = starts.cumsum(1)  # of each sorted position
        positions, features = ids.shape[1], layers[0][2].shape[-1]
        first_rows = torch.arange(0, len(ids) * positions, positions, device=ids.device).unsqueeze(1)
        row_of_position = torch.empty_like(slots).scatter_(1, order, slots + first_rows)  # b·T + its slot
        rows = torch.zeros((*ids.shape, features), dtype=torch.float32, device=ids.device)
        for (module, layer_ids, g), targets in zip(layers, row_of_position.chunk(len(layers))):
            if module.padding_idx is not None:
                g = g * (layer_ids != module.padding_idx).unsqueeze(-1)
            rows.view(-1, features).index_add_(0, targets.flatten(), g.float().reshape(-1, features))
        tokens = torch.zeros_like(tokens).scatter_(1, slots, tokens)  # each slot's token; 0 for the unused (zero rows)
        squared_norms = sum_of_squares(rows)
    return [{"weight": embedding_rows(module, *per_layer)} for (module, *_), *per_layer
            in zip(layers, rows.chunk(len(layers)), tokens.chunk(len(layers)), squared_norms.chunk(len(layers)))]


def embedding_rows(module: nn.Module, rows: torch.Tensor, tokens: torch.Tensor, squared_norms: torch.Tensor
                   ) -> ParameterGradients:
    """An embedding's G_i as its records' `rows` [B, T, d] of `tokens` [B, T] (`embedding`), with their sums of
    squares (an instantiated G_i's bound)."""
    pieces = [rows]

    def clipped_sum(c: torch.Tensor) -> torch.Tensor:
        (rows,) = pieces
        return torch.zeros_like(module.weight, dtype=torch.float32).index_add_(
            0, tokens.flatten(), (rows * c.view(-1, 1, 1)).flatten(0, 1))

    def per_record() -> torch.Tensor:
        (rows,) = pieces
        dense = torch.zeros((len(rows), *module.weight.shape), dtype=torch.float32, device=rows.device)
        return dense.scatter_add_(1, tokens.unsqueeze(-1).expand_as(rows), rows)

    return ParameterGradients(squared_norms, clipped_sum, per_record, pieces)


def layer_norm(module: nn.LayerNorm, kept: Normalization, g: torch.Tensor) -> LayerGradients:
    """y = x̂ ⊙ w + b: G_i = Σ_t g_it ⊙ x̂_it for w, Σ_t g_it for b (small: fp32 [B, d] each). The layer keeps how to
    form x̂ (`normalized_input`), which is formed here."""
    return layer_norms([(module, kept, g)])[0]


def layer_norms(layers: list[tuple[nn.Module, Normalization, torch.Tensor]]) -> list[LayerGradients]:
    """`layer_norm` for LayerNorms whose inputs and g have one shape and format (`JOINT_RULES`), all at once.

    With the statistics their forwards saved (a CPU), each layer's two sums are one compiled pass over its x and g
    (`normalized_record_sums`): no stack, no x̂ written out. Without them (a GPU), their inputs are stacked as the
    records of one tensor and normalised there (`Normalization.normalized`), their g stacked likewise, then two
    sums and a product for all of them: a few operations a run (gpt2-small's 25 LayerNorms are one run at batch
    1 × 256 and at 32 × 256), where x̂ formed layer by layer took two more a layer. The product is formed in the
    stack of x̂, which no one else reads. Each record's sums are its own layer's."""
    with record_function("bk.small_layers"):
        if all(kept.mean is not None and kept.reciprocal is not None for _, kept, _ in layers):
            sums = [normalized_record_sums(kept.x, kept.mean, kept.reciprocal, g) for _, kept, g in layers]
        else:
            x_hat = Normalization.combined([kept for _, kept, _ in layers], cat).normalized()
            g = cat([g for *_, g in layers]).float()
            sums = list(zip(x_hat.mul_(g).sum(1).chunk(len(layers)), g.sum(1).chunk(len(layers))))
        per_layer = []
        for (module, _, _), (weight, bias) in zip(layers, sums):
            per_record = {"weight": weight, "bias": bias}
            per_layer.append({name: per_record[name] for name, _ in module.named_parameters(recurse=False)})
        return per_layer


LayerGradients = dict[str, "ParameterGradients | torch.Tensor"]
"""A layer's per-record gradients by parameter name: a `ParameterGradients`, or for a small parameter (a bias, a
LayerNorm's) its G_i instantiated in fp32 ([B, *shape]), whose norms and clipped sums `jointly_instantiated` forms
with every other small parameter's at once."""
LayerRule = Callable[[nn.Module, Any, torch.Tensor], LayerGradients]  # the rule's kept input (`KEPT_INPUT`)

LAYER_RULES: dict[type[nn.Module], LayerRule] = {
    nn.Linear: linear,  # also Opacus' RNNLinear: DPLSTM's gates
    Conv1D: conv1d,
    nn.Embedding: embedding,
    nn.LayerNorm: layer_norm,
}
JOINT_RULES: dict[LayerRule, Callable[[list[tuple[nn.Module, Any, torch.Tensor]]], list[LayerGradients]]] = {
    embedding: embeddings,
    layer_norm: layer_norms,
}
"""Rules that `BookKeeping` applies to all layers whose a and g have one shape and format at once (in runs of at
most `stack_budget` entries of a and g, the copy they stack: no more than the step's largest batch of ghost norms
holds later, after these stacks are let go), with each layer's result as its own rule gives."""


@dataclass(frozen=True)
class Normalization:
    """What a LayerNorm keeps of its input, to form x̂ = (x − μ)·r in fp32 after the backward: x (which autograd
    holds for the layer's backward anyway) and, on a CPU, the mean and reciprocal deviation its forward saved for its
    backward (`NativeLayerNormBackward0`'s saved results, [B, T, 1]; `normalized_record_sums` reads them), or
    without them x alone, normalised again (`normalized`: the stack of several layers', `combined`, all at once).
    No x̂ is held through the forward."""

    x: torch.Tensor
    mean: torch.Tensor | None  # None: a GPU, or a forward that saved none (a compiled graph's node)
    reciprocal: torch.Tensor | None
    shape: tuple[int, ...]  # the layer's normalized_shape and eps, to normalise x again
    eps: float

    @property
    def layout(self) -> tuple:
        """What Normalizations that stack into one must share."""
        return self.x.shape, self.x.dtype, self.mean is None, self.shape, self.eps

    def numel(self) -> int:
        """The entries of x (what a stack of x̂ holds per layer)."""
        return self.x.numel()

    @staticmethod
    def combined(kept: list[Normalization], combine: Callable[[list[torch.Tensor]], torch.Tensor]) -> Normalization:
        """One Normalization of x, μ and r each combined across `kept` (of one layout) by `combine`."""
        first, x = kept[0], combine([k.x for k in kept])
        means = [k.mean for k in kept if k.mean is not None]
        reciprocals = [k.reciprocal for k in kept if k.reciprocal is not None]
        if len(means) < len(kept) or len(reciprocals) < len(kept):
            return Normalization(x, None, None, first.shape, first.eps)
        return Normalization(x, combine(means), combine(reciprocals), first.shape, first.eps)

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Normalization:
        """x, μ and r each passed through `fn` (a bucket's regrouping)."""
        return Normalization.combined([self], lambda xs: fn(xs[0]))

    def normalized(self) -> torch.Tensor:
        """x̂ [.., d] in fp32, x normalised again: one kernel (on a GPU, one launch). Where the forward saved its
        statistics, `normalized_record_sums` forms x̂ from them as it reads x instead."""
        return nn.functional.layer_norm(self.x.float(), self.shape, eps=self.eps)


KeptInput: TypeAlias = torch.Tensor | Normalization
"""What a layer's forward hook keeps of its input: the tensor its rule reads, or how to form it once the backward
has run (`KEPT_INPUT`)."""


def autocast_operand(module: nn.Module, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """What a matmul layer keeps: its input as the product read it. Autocast computes the product in the output's
    low precision from an input it casts (a LayerNorm's fp32 output), so that cast is kept: half the memory, and
    exactly the operand the layer used."""
    return x.to(output.dtype) if output.dtype != x.dtype and x.is_floating_point() else x


def normalized_input(module: nn.Module, x: torch.Tensor, output: torch.Tensor) -> Normalization:
    """What a LayerNorm keeps (`Normalization`): on a CPU with the statistics its forward saved, elsewhere x alone."""
    node, shape = output.grad_fn, tuple(module.normalized_shape)
    if not x.is_cuda and type(node).__name__ == "NativeLayerNormBackward0":
        return Normalization(x, node._saved_result1.detach(), node._saved_result2.detach(), shape, module.eps)
    return Normalization(x, None, None, shape, module.eps)


KEPT_INPUT: dict[LayerRule, Callable[[nn.Module, torch.Tensor, torch.Tensor], KeptInput]] = {
    linear: autocast_operand,  # also Opacus' RNNLinear
    conv1d: autocast_operand,
    layer_norm: normalized_input,
}
"""What a layer's forward hook keeps of its input (from the module, the input and the output) for its rule: the
input itself unless named here."""


def layer_rule(module: nn.Module) -> LayerRule | None:
    """The rule of the module's type or of its nearest base class in `LAYER_RULES`."""
    return next((LAYER_RULES[t] for t in type(module).__mro__ if t in LAYER_RULES), None)


def trainable_layers(model: nn.Module) -> dict[nn.Module, LayerRule]:
    """Every module holding a trainable parameter, with its rule; a `UserError` names a module type that holds a
    trainable parameter no rule covers (a parameter may also sit in a container that aliases it, as DPLSTM does)."""
    layers = {m: rule for m in model.modules()
              if (rule := layer_rule(m)) is not None and any(p.requires_grad for p in m.parameters(recurse=False))}
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


def operands(a: KeptInput, g: torch.Tensor, loss_scale: float) -> tuple[KeptInput, torch.Tensor]:
    """A layer's kept input and output gradient as its norms' and sums' matmuls read them: a bf16 pair (or token
    ids and a bf16 g) as it is, since bf16 has fp32's range (scaling by c_i underflows no sooner than in fp32);
    anything else in fp32, with fp16's loss scale divided out (a LayerNorm's x̂ is formed in fp32 later)."""
    if isinstance(a, Normalization):
        return a, unscaled(g, loss_scale)
    if g.dtype == torch.bfloat16 and a.dtype in (torch.bfloat16, torch.long, torch.int):
        return a, g
    return (a.float() if a.is_floating_point() else a), unscaled(g, loss_scale)


class BoundedNormClipping(DPOptimizer):
    """Opacus' flat clipping of per-sample gradients (`DPOptimizer.clip_and_accumulate`: c_i = min(1, C/‖G_i‖) from
    all parameters' `p.grad_sample`, Σ_i c_i·G_i as one einsum per parameter) with ‖G_i‖ from `sum_of_squares`, the
    proven upper bound `bk` takes for an instantiated G_i, instead of torch's fp32 norms: on a tensor the size of
    gpt2-small's embedding those can come out 1 % low, and a record then adds more than C. Placed before an Opacus
    DP optimizer class in a subclass's bases (`noise.dp_optimizer_class`, hooks mode), it replaces that step only."""

    def clip_and_accumulate(self) -> None:
        grad_samples = self.grad_samples
        if len(grad_samples[0]) == 0:  # an empty batch
            factors = torch.zeros((0,), device=grad_samples[0].device)
        else:
            norms = torch.stack([sum_of_squares(g.to(grad_samples[0].device)) for g in grad_samples]).sum(0).sqrt()
            factors = clip_factors(norms, self.max_grad_norm)
        for p, grad_sample in zip(self.params, grad_samples):
            _check_processed_flag(p.grad_sample)
            grad = torch.einsum("i,i...", factors.to(grad_sample.device, p.dtype), grad_sample.to(p.dtype))
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)


class BookKeeping:
    """Book-keeping clipping (Bu et al. 2023) with per-layer mixed ghost norms (Bu et al. 2022); see the module
    docstring. Forward hooks keep each trainable layer's input and the autograd edge of its output; `backward`
    asks autograd for the output gradients only, then clips and sums into `p.grad`, layers of one shape together."""

    optimizer_mode = "ghost"  # Opacus' DP optimizer that takes the clipped sum in p.grad

    def __init__(self, model: nn.Module, max_grad_norm: float, loss_scale: float = 1.0):
        self.module, self.max_grad_norm, self.loss_scale = model, max_grad_norm, loss_scale
        self.layers = trainable_layers(model)
        self.calls: dict[nn.Module, list[tuple[KeptInput, GradientEdge]]] = defaultdict(list)
        self.capturing = True
        self.handles = [m.register_forward_hook(self.keep) for m in self.layers]
        retrace_if_compiled(model)

    @torch.compiler.disable
    def keep(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        """Forward hook: what the layer's rule reads of its input (`KEPT_INPUT`) and where its output's gradient
        arrives (a forward under no_grad or `paused` keeps nothing). The edge is the output's own: a later in-place
        change of the output cannot move it.
        Under `torch.compile` the hook runs eagerly, on the real tensors at a graph break after the layer: traced,
        it would keep a graph's intermediate, whose autograd edge does not exist outside the graph."""
        if self.capturing and output.requires_grad:
            kept = KEPT_INPUT.get(self.layers[module])
            a = inputs[0].detach() if kept is None else kept(module, inputs[0].detach(), output)
            self.calls[module].append((a, get_gradient_edge(output)))

    def backward(self, losses: torch.Tensor, optimizer: DPOptimizer, records: torch.Tensor) -> None:
        """One backward of Σ_i L_i to the layer outputs (exact per-row gradients), then Σ_i c_i·G_i in `p.grad`,
        G_i the gradient of record i's rows together (`records`), bucket by bucket (`record_buckets`). Each layer's
        inputs and output gradients are released as soon as its parameters' sums in the last bucket are formed."""
        calls, self.calls = self.calls, defaultdict(list)
        edges = [edge for layer_calls in calls.values() for _, edge in layer_calls]
        with record_function("bk.output_gradients"):
            grads = deque(torch.autograd.grad(losses.sum() * self.loss_scale, edges, allow_unused=True))  # call order
        with torch.no_grad():
            kept = {module: pair for module in list(calls)
                    if (pair := self.layer_operands(calls.pop(module), grads, len(losses))) is not None}
            buckets = record_buckets(records)
            sums: dict[nn.Parameter, torch.Tensor] = {}
            for k, bucket in enumerate(buckets):
                last = k == len(buckets) - 1  # the last bucket lets each layer go
                shares = self.bucket_shares(kept, bucket, last)
                per_param = {p: share[0] if len(share) == 1 else shared(share) for p, share in shares.items()}
                del shares  # a shared parameter's per-layer tensors
                small = [p for p, grads_of in per_param.items() if isinstance(grads_of, torch.Tensor)]
                with record_function("bk.small_layers"):
                    joint, sizes = jointly_instantiated([per_param.pop(p) for p in small]) if small else (None, [])
                forms = [grads_of for grads_of in [*per_param.values(), joint] if isinstance(grads_of, ParameterGradients)]
                squared, rounding = norm_bounds([grads_of.bound for grads_of in forms])
                clip = clip_factors(rounding_allowance(squared.sqrt(), rounding), self.max_grad_norm)
                if self.loss_scale != 1.0:  # fp16: a record's pieces can overflow, and none of its inf may be summed
                    keep = clip > 0
                    if not keep.all():  # a host sync, which a GPU pays only here: it stops launches running ahead
                        for k in range(len(forms)):  # no loop variable left holding a form's pieces
                            forms[k].drop_records(keep)
                del forms
                with record_function("bk.clipped_sums"):
                    if joint is not None:
                        for p, part in zip(small, joint.clipped_sum(clip).split(sizes)):
                            sums[p] = sums[p] + part.view_as(p) if p in sums else part.view_as(p)
                    params = [p for p in optimizer.params if p in per_param]
                    for p, part in zip(params, clipped_sums([per_param.pop(p) for p in params], clip)):
                        part = part.view_as(p)
                        sums[p] = sums[p] + part if p in sums else part
            for p in optimizer.params:
                p.grad = sums.pop(p).to(p.dtype) if p in sums else torch.zeros_like(p)

    def bucket_shares(self, kept: dict[nn.Module, tuple[KeptInput, torch.Tensor]], bucket: RecordBucket, last: bool
                      ) -> dict[nn.Parameter, list[ParameterGradients | torch.Tensor]]:
        """Each parameter's per-layer shares of G_i for one bucket of records. The last bucket takes each layer's
        a and g out of `kept`, so that only the shares hold them from then on (and they go as the sums are formed)."""
        shares: dict[nn.Parameter, list[ParameterGradients | torch.Tensor]] = defaultdict(list)
        joint: dict[tuple, list[tuple[nn.Module, KeptInput, torch.Tensor]]] = defaultdict(list)
        for module in list(kept):
            a, g = kept.pop(module) if last else kept[module]
            a, g = a.map(bucket.regrouped) if isinstance(a, Normalization) else bucket.regrouped(a), bucket.regrouped(g)
            if (rule := self.layers[module]) in JOINT_RULES:
                layout = a.layout if isinstance(a, Normalization) else (a.shape, a.dtype)
                joint[(rule, layout, g.shape, g.dtype)].append((module, a, g))
            else:
                self.add_shares(shares, module, rule(module, a, g))
            del a, g
        budget = stack_budget([held_entries(form.bound) for forms in shares.values() for form in forms
                               if isinstance(form, ParameterGradients) and isinstance(form.bound, GhostOperands)])
        for (rule, *_), layers in joint.items():
            for part in runs(layers, layers[0][1].numel() + layers[0][2].numel(), budget):
                for (module, *_), grads in zip(part, JOINT_RULES[rule](part)):
                    self.add_shares(shares, module, grads)
        return shares

    @staticmethod
    def add_shares(shares: dict[nn.Parameter, list[ParameterGradients | torch.Tensor]], module: nn.Module,
                   grads: LayerGradients) -> None:
        """A layer's per-record gradients added to its trained parameters' shares."""
        for name, grads_of in grads.items():
            if (param := module.get_parameter(name)).requires_grad:
                shares[param].append(grads_of)

    def layer_operands(self, calls: list[tuple[KeptInput, GradientEdge]], grads: deque[torch.Tensor | None],
                       batch: int) -> tuple[KeptInput, torch.Tensor] | None:
        """One layer's calls' kept inputs and their output gradients (the next ones in `grads`; None: an output the
        loss does not use) as [rows, positions, d] operands; None when the loss uses none of its outputs."""
        kept = [(a, g) for a, g in ((a, grads.popleft()) for a, _ in calls) if g is not None]
        if not kept:
            return None
        inputs = [a for a, _ in kept]
        a = (Normalization.combined(inputs, lambda xs: stacked(xs, batch)) if isinstance(inputs[0], Normalization)
             else stacked(inputs, batch))
        return operands(a, stacked([g for _, g in kept], batch), self.loss_scale)

    def empty_batch(self, optimizer: DPOptimizer) -> None:
        """An empty Poisson batch's clipped sum, in `p.grad`: zero, so the step adds noise only."""
        for p in optimizer.params:
            p.grad = torch.zeros_like(p)

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


def retrace_if_compiled(model: nn.Module) -> None:
    """Dynamo does not guard on a module's hooks (`torch._dynamo.config.skip_nnmodule_hook_guards`): code it compiled
    before bk's hooks were added (a public phase's steps, or another instance of the model's class) runs without
    them, and the forward keeps nothing. So adding them to a model with a compiled part drops Dynamo's compiled code,
    and the next forward is traced with the hooks on its layers."""
    if any(isinstance(m, torch._dynamo.eval_frame.OptimizedModule) or getattr(m, "_compiled_call_impl", None)
           for m in model.modules()):
        torch._dynamo.reset()


CLIPPING: dict[str, Callable[[nn.Module, float, float], PerRecordClipping]] = {
    "hooks": OpacusHooks,
    "bk": BookKeeping,
}
"""`training.grad_sample_mode` -> how the private step clips: built from the model, the clipping norm C and the
loss scale (fp16; 1 otherwise) that the pieces carry."""
