"""What a mechanism is: a function from the trial's prepared data to calibrated phases and a privacy ledger.

A mechanism first lays out its phases with *relative* noise multipliers (1.0 for a constant σ; ATDP's schedule
for ATDP), then `calibrate` finds the one σ scale that spends exactly the trial's ε target over every private
step of every phase, and writes the planned events into the ledger. The loop then refuses any step beyond them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

from sdp_core.config.trial import TrialConfig
from sdp_core.privacy import GaussianEvent, PrivacyLedger, calibrate_noise, get_notion
from sdp_core.tensors import LMData, row_counts
from sdp_core.train.loop import Phase, ledger_key


@dataclass
class MechanismPlan:
    phases: list[Phase]
    ledger: PrivacyLedger
    details: dict  # mechanism-specific facts for the result (split sizes, ATDP weight w, ...)
    not_covered: list[str] = field(default_factory=list)  # data-dependent choices the ε does not cover


def private_phase(name: str, data: LMData, cfg: TrialConfig, epochs: int, multipliers: tuple[float, ...] | None = None
                  ) -> Phase:
    """A DP-SGD phase whose `sigmas` still hold relative multipliers (one per epoch) until `calibrate`."""
    t = cfg.training
    return Phase(name, data, private=True, epochs=epochs, batch_size=t.batch_size,
                 sigmas=multipliers or (1.0,) * epochs, max_grad_norm=cfg.privacy.max_grad_norm,
                 max_steps=t.private_max_steps or t.max_steps)


def public_phase(name: str, data: LMData, cfg: TrialConfig, epochs: int) -> Phase:
    t = cfg.training
    return Phase(name, data, private=False, epochs=epochs, batch_size=t.batch_size, max_steps=t.max_steps)


def flagged_runs(data: LMData) -> tuple[int, int]:
    """How many runs of flagged tokens (`LMData.sensitive`, among the positions a loss reads) `data` holds, and how
    many tokens they hold (`tensors.row_counts`, counted once for the rows)."""
    counts = data.statistic(row_counts)
    return counts.flagged_runs, counts.flagged


def tokens_per_unit(phase: Phase, notion: str, held_out: LMData) -> float:
    """The mean number of positions a loss reads (`LMData.valid`: its tokens trained on) in one of what `phase`
    samples (`Phase.units`: a record, with all its rows, in a private phase; a row in a public one), counted from
    what neighbouring datasets under `notion` share, and estimated on the held-out records `held_out` where they
    share nothing, so that neither the steps `training.max_tokens` allows (hence σ) nor the tokens a trial reports
    depend on what its ε protects:

    - a public phase, or any phase of a trial without a guarantee (notion `none`): its own rows;
    - a private phase under a notion whose neighbours differ only in flagged tokens (SDP, confidentiality: their
      public tokens are free): its own rows' unflagged tokens, and each run of flagged tokens at the held-out
      records' mean tokens per run (a replaced secret keeps its run, not its length);
    - a private phase under DP, whose neighbours differ in a whole record: the held-out records' mean per record.
    """
    n = get_notion(notion)
    if phase.private and n.guarantee and not n.free_touches:
        return float(held_out.statistic(row_counts).valid) / max(held_out.records, 1)
    valid = phase.data.statistic(row_counts).valid
    if phase.private and n.guarantee:
        runs, flagged = flagged_runs(phase.data)
        held_out_runs, held_out_flagged = flagged_runs(held_out)
        per_run = held_out_flagged / held_out_runs if held_out_runs else 1.0
        return (valid - flagged + runs * per_run) / max(phase.units, 1)
    return valid / max(phase.units, 1)


def tokens_per_step(phase: Phase, notion: str, held_out: LMData) -> float:
    """Tokens one step of `phase` trains on, in expectation: its batch (q·N records for a private phase, B rows for
    a public one, both min(B, N)) times `tokens_per_unit`."""
    return min(phase.batch_size, phase.units) * tokens_per_unit(phase, notion, held_out)


def within_token_budget(phases: list[Phase], max_tokens: int | None, notion: str, held_out: LMData) -> list[Phase]:
    """The phases capped so that together they train on at most `max_tokens` tokens (`training.max_tokens`), each
    phase's tokens counted from what neighbours under `notion` share (`tokens_per_unit`; under DP, a private
    record at the held-out records' mean length).

    Every phase keeps the same share of its planned steps (at least one), so a mechanism's layout (JFT's public
    phase 1 before its private phase 2, CRT's alternating epochs) is kept and only its length shrinks. Phases
    already within the budget are returned unchanged, so applying it twice changes nothing.
    """
    planned = sum(ph.total_steps * tokens_per_step(ph, notion, held_out) for ph in phases)
    if max_tokens is None or planned <= max_tokens:
        return phases
    share = max_tokens / planned
    return [replace(ph, max_steps=max(1, math.floor(ph.total_steps * share))) for ph in phases]


def phase_events(phase: Phase, mechanism: str, touches: str, sample_rate_factor: float = 1.0) -> list[GaussianEvent]:
    """One event per epoch of a private phase (its σ, its sample rate of records q = B/N times an amplification
    factor such as JFT's missing rate, its number of steps), keyed in the ledger as `ledger_key(phase, epoch)`."""
    q = phase.sample_rate * sample_rate_factor
    return [GaussianEvent(sample_rate=q, noise_multiplier=sigma, steps=steps, phase=ledger_key(phase.name, epoch),
                          mechanism=mechanism, touches=touches)
            for epoch, (sigma, steps) in enumerate(zip(phase.sigmas, phase.epoch_steps())) if steps > 0]


def calibrate(phases: list[Phase], cfg: TrialConfig, notion: str, held_out: LMData, touches: str = "all",
              fixed: Sequence[GaussianEvent] = (), target_epsilon: float | None = None, sample_rate_factor: float = 1.0
              ) -> tuple[list[Phase], PrivacyLedger]:
    """Scale every private phase's relative σ so the whole trial spends `target_epsilon` (default: the config's).

    `fixed` events (e.g. an already-calibrated phase 1) are composed with the scaled ones and join the plan.
    The phases are first held to the compute budget (`within_token_budget`: under DP a private record counts at the
    held-out records' (`held_out`) mean length), so σ is calibrated for the steps that will run.
    """
    p = cfg.privacy
    phases = within_token_budget(phases, cfg.training.max_tokens, notion, held_out)
    events = lambda phs: [e for ph in phs if ph.private  # noqa: E731
                          for e in phase_events(ph, cfg.mechanism.name, touches, sample_rate_factor)]
    shape = [(e.sample_rate, e.steps, e.noise_multiplier, e.phase, e.mechanism, e.touches) for e in events(phases)]
    scale = calibrate_noise(shape, target_epsilon or p.target_epsilon, p.delta, p.accountant, fixed_events=list(fixed),
                            relation=get_notion(notion).relation)
    scaled = [replace(ph, sigmas=tuple(scale * m for m in ph.sigmas)) if ph.private else ph for ph in phases]
    return scaled, PrivacyLedger(notion, p.delta, p.accountant, plan=[*fixed, *events(scaled)],
                                 compare_add_remove=p.compare_add_remove)
