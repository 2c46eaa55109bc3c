"""Selective-DPSGD (Shi et al. 2022, Algorithm 1 and §4.1) for the recurrent language model.

Which positions are private
    Input position t of a row reads token t and its loss predicts token t+1 (weight `weights[t+1]`). It is
    private when it reads a secret or predicts one:

        private[t] = sensitive[t] or sensitive[t+1]

    so a private segment starts at the token *before* its first sensitive token (L_{i-1} needs the secret x_i as
    its target) and ends at its last sensitive token. A row's sequence is its tokens 0..n-1, where n-1 is its last
    token of weight > 0 (the closing `<eos>`); padding belongs to no segment. The maximal runs of equal `private`
    alternate public / private and concatenate back to the sequence. Each segment's loss covers its own input
    positions, so the last loss of a segment predicts the first token of the next one.

Slots
    Row r with m_r private segments is laid out as slots 0..2K (K = max_r m_r, fixed before training): slot 2i is
    its i-th public segment, slot 2i+1 its i-th private segment; a slot the row does not have is empty (public
    slot 0 when the row starts private, every slot past 2·m_r).

One Poisson batch (Algorithm 1, batched)
    Every sampled row starts from the zero state. For slot j = 0, 1, ..., 2K, the rows whose slot j is non-empty
    run that segment together as one packed sequence (`pack_padded_sequence`), from their carried state, so each
    row's final (h, c) is taken at its own segment end; rows without slot j keep their state. Then
      - public slot: one regular optimizer step on the mean segment loss (no noise, not accounted: it reads no
        secret, and its input state is already noised);
      - private slot: one DP-SGD step (Opacus: per-record gradient clipped to C, N(0, σ_g²C²) added to the sum,
        divided by the expected batch size q·N), then each record's final states — h and c of all its rows
        together as one vector — are clipped to C_h and get N(0, σ_h²C_h²) per coordinate. The carried state is
        always detached. A record longer than a row is several rows (its windows), each walked as above; in each
        slot they are one record to the clipping, whose gradient and hidden states are their rows' together.
    A private slot that no sampled row has still takes a noise-only step, so every batch takes exactly K private
    steps whatever its sample.
    Packed rows are sorted by descending segment length first: the clipping (Opacus' hooks, book-keeping) indexes
    the LSTM cells' per-sample gradients in packed order and the embedding's and head's in batch order, which then
    coincide.

Accounting
    Every release of a batch is computed on the same Poisson sample of records (rate q = B/N): each private slot
    releases the noised gradient sum (sensitivity C, noise σ_g·C) and the noised hidden states (a record's rows
    hold its clipped states: sensitivity C_h, noise σ_h·C_h); a record takes at most K private slots. The 2K adaptive
    Gaussian releases of one batch compose to one Gaussian with σ_batch = (K·(σ_g⁻² + σ_h⁻²))^(-1/2)
    (`joint_noise_multiplier`; Gaussian mechanisms compose by adding their inverse variances, Dong, Roth & Su
    2019, Cor. 3.3), and that composed mechanism is subsampled *once*: one ledger step = one Poisson batch,
    one event. Charging K separately subsampled events instead would apply amplification by sampling K times to
    the same sample and under-state ε several-fold. `calibrate` scales σ_batch to the ε target; σ_g and
    σ_h = `hidden_noise_ratio`·σ_g of each slot are derived from it (`split_sigma`). Public steps are free under
    the SDP notion (Shi et al., Theorem 2), so the ledger's notion is "SDP" and its events touch "private" data
    only.

    K and the slot layout come from the policy's masks (which are treated as public structure, as in the paper);
    the divisor q·N of the DP step is a data-independent constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from sdp_core.config.mechanism import SDPSGDConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.mechanisms.base import MechanismPlan, calibrate, within_token_budget
from sdp_core.mechanisms.registry import register_mechanism
from sdp_core.preparation import TrialData
from sdp_core.privacy import PrivacyLedger
from sdp_core.tensors import LMData, record_groups, run_starts
from sdp_core.train.loop import BatchStep, DPStep, Phase, StepContext
from sdp_core.train.randomness import NoiseSource


PHASE_NAME = "sdpsgd_gradient+hidden"
"""Ledger phase of S-DPSGD: each step is one Poisson batch — every gradient and hidden-state release of it."""

State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each [num_layers, rows, hidden]


# ----------------------------------------------------------------------------------------- segmentation


def private_positions(sensitive: torch.Tensor) -> torch.Tensor:
    """private[..., t] = sensitive[..., t] or sensitive[..., t+1]: position t reads or predicts a secret."""
    nxt = torch.zeros_like(sensitive)
    nxt[..., :-1] = sensitive[..., 1:]
    return sensitive | nxt


def row_lengths(weights: torch.Tensor) -> torch.Tensor:
    """n per row: one past its last token of weight > 0 (0 for a row with none)."""
    t = weights.shape[-1]
    last = torch.where(weights > 0, torch.arange(t), -1).max(dim=-1).values
    return last + 1


def split_segments(private: torch.Tensor, length: int) -> list[tuple[int, int, bool]]:
    """Maximal runs (start, end, is_private) of `private[:length]`, in order."""
    p = private[:length].tolist()
    out, start = [], 0
    for t in range(1, length + 1):
        if t == length or p[t] != p[start]:
            out.append((start, t, bool(p[start])))
            start = t
    return out


@dataclass(frozen=True)
class SegmentTable:
    """Segment slots of every row: `bounds[r, j] = (start, end)` of slot j (2i public, 2i+1 private); empty
    slots have start = end."""

    bounds: torch.Tensor  # [N, 2K+1, 2] long

    @property
    def private_segments(self) -> int:
        """K: the most private segments of any row, i.e. the private steps of every batch."""
        return (self.bounds.shape[1] - 1) // 2

    def private_fraction(self) -> float:
        """Share of all rows' sequence positions that lie in private segments."""
        lengths = self.bounds[..., 1] - self.bounds[..., 0]
        return float(lengths[:, 1::2].sum() / lengths.sum().clamp_min(1))

    def private_counts(self) -> torch.Tensor:
        """m_r: private segments of each row."""
        b = self.bounds[:, 1::2]
        return (b[..., 1] > b[..., 0]).sum(1)


def segment_table(data: LMData, private_segments: int | None = None) -> SegmentTable:
    """The slots of every row; K = `private_segments` when given (a batch laid out like its whole phase), else
    the most private segments of any row."""
    private = private_positions(data.sensitive.cpu())
    rows = [split_segments(p, int(n)) for p, n in zip(private, row_lengths(data.weights.cpu()))]
    slotted = []
    for segs in rows:
        slots: list[tuple[int, int]] = []
        for start, end, is_private in segs:
            if is_private and len(slots) % 2 == 0:  # starts private: public slot 0 is empty
                slots.append((start, start))
            slots.append((start, end))
        slotted.append(slots)
    k = max((len(s) // 2 for s in slotted), default=0) if private_segments is None else private_segments
    bounds = torch.zeros(len(rows), 2 * k + 1, 2, dtype=torch.long)
    for r, slots in enumerate(slotted):
        if slots:
            bounds[r, : len(slots)] = torch.tensor(slots)
            bounds[r, len(slots):] = slots[-1][1]  # empty slots past the row's end
    return SegmentTable(bounds)


@dataclass(frozen=True)
class SegmentSummary:
    """What the slots of every row add up to (`segment_summary`), without the slots themselves: what a phase needs
    (K) and what a trial reports, the same as its `SegmentTable` gives."""

    private_segments: int  # K: the most private segments of any row
    mean_private_segments: float  # m_r averaged over the rows
    private_fraction: float  # share of all rows' sequence positions in private segments


def segment_summary(data: LMData) -> SegmentSummary:
    """`segment_table(data)`'s K, mean private segments per row and private fraction, counted block by block
    (`LMData.blocks`) with the same arithmetic: row r's private segments are the maximal runs of
    `private_positions` before its length `row_lengths`."""
    k = segments = private = positions = 0
    for block in data.blocks():
        lengths = row_lengths(block.valid)
        inside = torch.arange(block.sensitive.shape[1]) < lengths[:, None]
        marked = private_positions(block.sensitive) & inside
        counts = run_starts(marked).sum(1)
        k = max(k, int(counts.max()))
        segments, private = segments + int(counts.sum()), private + int(torch.count_nonzero(marked))  # no wide copy
        positions += int(lengths.sum())
    return SegmentSummary(k, segments / len(data) if len(data) else 0.0,
                          float(torch.tensor(private) / torch.tensor(max(positions, 1))))  # float32, as the table's


# ------------------------------------------------------------------------------------------------ phase


@dataclass(frozen=True)
class SelectivePhase(Phase):
    """An S-DPSGD phase. A step is one Poisson batch, whose K private slots are one composed event: `sigmas` hold
    that event's noise multiplier σ_batch of each epoch (see `split_sigma`)."""

    segments: SegmentTable | SegmentSummary | None = None  # K, from the whole table or its summary
    hidden_clip: float = 1.0
    hidden_noise_ratio: float = 1.0  # σ_h / σ_g; the paper adds σC to both (Algorithm 1, lines 17 and 23)

    def batch_step(self, ctx: StepContext) -> BatchStep:
        """Algorithm 1's walk over segments; plain steps when the policy flags nothing (no private slot)."""
        return SelectiveStep(ctx, self) if self.private else super().batch_step(ctx)


def split_sigma(sigma_batch: float, private_segments: int, hidden_noise_ratio: float) -> tuple[float, float]:
    """(σ_g, σ_h) of each private slot, with σ_h = ratio·σ_g, such that the K slots' 2K Gaussian releases on one
    Poisson sample compose to one Gaussian of multiplier σ_batch: joint_noise_multiplier(*[σ_g, σ_h] * K)."""
    sigma_slot = sigma_batch * math.sqrt(private_segments)
    sigma_grad = sigma_slot * math.sqrt(1 + hidden_noise_ratio**-2)
    return sigma_grad, hidden_noise_ratio * sigma_grad


# ----------------------------------------------------------------------------------------------- pieces


@dataclass(frozen=True)
class SegmentBatch:
    """Slot j of some rows, padded to the longest: inputs, next-token targets and their loss weights."""

    ids: torch.Tensor  # [b, L]
    lengths: torch.Tensor  # [b], descending
    targets: torch.Tensor  # [b, L]
    weights: torch.Tensor  # [b, L]: 0 past each row's segment end
    records: torch.Tensor  # [b]: each row's record, 0 .. R−1 (`tensors.record_groups`): clipped together


def gather_segments(data: LMData, rows: torch.Tensor, start: torch.Tensor, end: torch.Tensor,
                    device: torch.device | str = "cpu") -> SegmentBatch:
    """The rows' [start, end) segments, left-aligned and padded, on `device` (lengths stay on the host)."""
    lengths = end - start
    t = data.input_ids.shape[1]
    offset = torch.arange(int(lengths.max()))
    pos = start[:, None] + offset
    inside = offset < lengths[:, None]
    nxt = (pos + 1).clamp(max=t - 1)
    ids = data.input_ids[rows[:, None], pos.clamp(max=t - 1)]
    weights = data.weights[rows[:, None], nxt].float() * (inside & (pos + 1 < t))
    targets = data.input_ids[rows[:, None], nxt]
    return SegmentBatch(ids.to(device, torch.long), lengths, targets.to(device, torch.long), weights.to(device),
                        record_groups(data.record_index[rows]).to(device))


def segment_forward(lm: nn.Module, seg: SegmentBatch, state: State) -> tuple[torch.Tensor, State]:
    """`LSTMLM.forward_with_state` on packed segments: logits [b, L, V] and each row's state at its own end."""
    x = lm.dropout(lm.embedding(seg.ids))
    packed = pack_padded_sequence(x, seg.lengths.cpu(), batch_first=True, enforce_sorted=True)
    out, state = lm.lstm(packed, state)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=seg.ids.shape[1])
    return lm.head(lm.dropout(out)), state


def segment_loss(logits: torch.Tensor, seg: SegmentBatch) -> torch.Tensor:
    """`per_record_loss` of each row's segment: Σ_t w_t·CE_t / #{t : w_t > 0}."""
    b, length, v = logits.shape
    ce = nn.functional.cross_entropy(logits.reshape(-1, v), seg.targets.reshape(-1), reduction="none").view(b, length)
    return (ce * seg.weights).sum(1) / (seg.weights > 0).sum(1).clamp_min(1)


def release_state(state: State, clip: float, sigma: float, noise: NoiseSource, records: torch.Tensor,
                  secure: bool = False) -> State:
    """Clip each record's (h, c) — of all its rows (`records`, as `SegmentBatch.records`), as one vector — to norm
    `clip`; add N(0, σ²·clip²) per coordinate (lines 20–23), in `privacy.secure_mode` if `secure`, as the
    gradient's noise."""
    h, c = state
    layers = h.shape[0]
    both = torch.cat([h, c]).detach().float()  # [2·layers, b, H]; clipped and noised in fp32 at any precision
    squares = both.transpose(0, 1).flatten(1).square().sum(1)
    norms = squares.new_zeros(int(records.max()) + 1).index_add_(0, records, squares).sqrt()
    both = both * (clip / (norms + 1e-6)).clamp(max=1.0)[records][None, :, None]
    if sigma > 0:
        both = both + noise.normal(both.numel(), sigma * clip, secure).view_as(both)
    return both[:layers], both[layers:]


class SelectiveStep:
    """One Poisson batch of Algorithm 1, slot by slot (see the module docstring); the phase's step in the loop.

    Private slots are DP steps (`DPStep`, `hooks` or `bk` clipping), public slots regular steps with the clipping
    paused. Under data parallelism (`world_size` > 1) every rank walks the same 2K+1 slots: the DP optimizer
    all-reduces private slots (noise once, on rank 0) and public slots all-reduce their summed gradients and row
    counts, so a rank with no row in a slot still joins the collective. Each row's hidden state is noised by the
    rank holding it.
    """

    def __init__(self, ctx: StepContext, phase: SelectivePhase):
        from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP  # as DPStep's Opacus

        self.phase, self.noise, self.world_size, self.secure_mode = phase, ctx.noise, ctx.world_size, ctx.secure_mode
        self.dp = DPStep(ctx, phase)
        self.lm = ctx.model.module if isinstance(ctx.model, DPDDP) else ctx.model

    def __call__(self, batch: LMData, sigma: float) -> None:
        assert self.phase.segments is not None, "a selective phase has its segment table"
        k = self.phase.segments.private_segments
        sigma_grad, sigma_hidden = split_sigma(sigma, k, self.phase.hidden_noise_ratio)
        bounds = segment_table(batch, k).bounds
        device = batch.input_ids.device
        shape = (self.lm.lstm.num_layers, len(batch), self.lm.lstm.hidden_size)
        h, c = torch.zeros(shape, device=device), torch.zeros(shape, device=device)
        for slot in range(bounds.shape[1]):
            start, end = bounds[:, slot, 0], bounds[:, slot, 1]
            lengths = end - start
            active = torch.nonzero(lengths > 0).flatten()
            active = active[torch.argsort(lengths[active], descending=True, stable=True)]
            seg = gather_segments(batch, active, start[active], end[active], device) if len(active) else None
            on_device = active.to(device)
            carried = (h[:, on_device], c[:, on_device])
            if slot % 2 == 1:
                out = self.private(seg, carried, sigma_grad)
                if out is not None and seg is not None:  # a slot with no active row releases nothing
                    out = release_state(out, self.phase.hidden_clip, sigma_hidden, self.noise, seg.records,
                                        self.secure_mode)
            else:
                out = self.public(seg, carried)
            if out is not None:
                h[:, on_device], c[:, on_device] = out[0].detach(), out[1].detach()

    def private(self, seg: SegmentBatch | None, state: State, sigma: float) -> State | None:
        """Algorithm 1, lines 11–19: per-row gradients of the segment, clipped, summed, noised (Opacus). A slot no
        sampled row has still takes its noise-only step: every batch takes exactly K, whatever its sample."""
        optimizer = self.dp.optimizer
        optimizer.noise_multiplier = sigma
        optimizer.zero_grad(set_to_none=True)
        if seg is None:
            self.dp.empty_batch()
            optimizer.step()
            return None
        with self.dp.precision.autocast(self.dp.device):
            logits, state = segment_forward(self.lm, seg, state)
            losses = segment_loss(logits, seg)
        self.dp.clipping.backward(losses, optimizer, seg.records)
        optimizer.step()
        return state

    def public(self, seg: SegmentBatch | None, state: State) -> State | None:
        """Algorithm 1, lines 8–9: a regular step on the segments' mean loss over every rank's rows, clipping paused."""
        optimizer = self.dp.optimizer
        optimizer.zero_grad(set_to_none=True)
        rows = torch.tensor(0.0 if seg is None else float(len(seg.lengths)), device=self.noise.device)
        scale = self.dp.precision.loss_scale  # fp16: kept fixed, as in the private slots
        if seg is not None:
            with self.dp.clipping.paused():
                with self.dp.precision.autocast(self.dp.device):
                    logits, state = segment_forward(self.lm, seg, state)
                    loss = segment_loss(logits, seg).sum()
                (loss * scale).backward()
        if self.world_size > 1:
            for p in optimizer.params:
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad
                torch.distributed.all_reduce(p.grad)
            torch.distributed.all_reduce(rows)
        if rows.item() == 0:
            return None
        for p in optimizer.params:
            if p.grad is not None:
                p.grad /= rows * scale
        optimizer.original_optimizer.step()
        return state if seg is not None else None

    def close(self) -> nn.Module:
        return self.dp.close()


# -------------------------------------------------------------------------------------------- mechanism


def selective_phase(name: str, data: LMData, segments: SegmentTable | SegmentSummary, cfg: TrialConfig, epochs: int
                    ) -> SelectivePhase:
    """The uncalibrated phase: relative σ_batch multipliers 1.0; private only if some row has a private segment."""
    t, m = cfg.training, cfg.mechanism
    assert isinstance(m, SDPSGDConfig)
    return SelectivePhase(name, data, private=segments.private_segments > 0, epochs=epochs,
                          batch_size=t.batch_size, sigmas=(1.0,) * epochs, max_grad_norm=cfg.privacy.max_grad_norm,
                          max_steps=t.private_max_steps or t.max_steps, segments=segments,
                          hidden_clip=m.hidden_clip or cfg.privacy.max_grad_norm, hidden_noise_ratio=m.hidden_noise_ratio)


def sdpsgd(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    """Selective-DPSGD on the policy's sensitive tokens: (F, ε, δ)-S-DP (notion "SDP")."""
    segments = d.train.statistic(segment_summary)  # every row's slots, counted once: each batch lays out its own
    phase = selective_phase(PHASE_NAME, d.train, segments, cfg, cfg.training.epochs)
    k = segments.private_segments
    if k:
        phases, ledger = calibrate([phase], cfg, notion="SDP", held_out=d.validation, touches="private")
    else:  # the policy flags nothing: plain training, nothing to account
        phases = within_token_budget([phase], cfg.training.max_tokens, "SDP", d.validation)
        ledger = PrivacyLedger("SDP", cfg.privacy.delta, cfg.privacy.accountant)
    sigma_batch = phases[0].sigmas[0] if k else 0.0
    sigma_grad, sigma_hidden = split_sigma(sigma_batch, k, phase.hidden_noise_ratio) if k else (0.0, 0.0)
    details = {
        "private_steps_per_batch": k,
        "mean_private_segments": segments.mean_private_segments,
        "private_position_fraction": segments.private_fraction,
        "sigma_batch": sigma_batch,
        "sigma_gradient": sigma_grad,
        "sigma_hidden": sigma_hidden,
        "hidden_clip": phase.hidden_clip,
        "ledger_step": f"one step of phase {PHASE_NAME!r} = one Poisson batch: its K = {k} private slots' noised "
                       "gradients and hidden states, 2K Gaussian releases on one sample, composed to one "
                       "subsampled Gaussian with σ_batch = (K·(σ_gradient⁻² + σ_hidden⁻²))^(-1/2)",
    }
    derived = [f"K = {k}, the most private segments of any training row, and each row's segment layout: the "
               "policy's masks, treated as public structure (Shi et al. 2022), and what is counted from them "
               "(`mechanism.private_steps_per_batch`, `mechanism.mean_private_segments`, "
               "`mechanism.private_position_fraction`, `mechanism.sigma_gradient`, `mechanism.sigma_hidden`, "
               "`mechanism.ledger_step`)"]
    return MechanismPlan(phases, ledger, details, derived)


register_mechanism("sdpsgd", sdpsgd)
