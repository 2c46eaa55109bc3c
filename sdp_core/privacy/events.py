"""Privacy events: what a training run did that costs privacy, in the style of `dp_accounting.DpEvent`.

Every private step of every mechanism is a Poisson-subsampled Gaussian mechanism (DP-SGD, Abadi et al. 2016):
each record enters the batch independently with probability `sample_rate`, the clipped sum gets Gaussian noise
of standard deviation `noise_multiplier` × clip norm. A schedule is a list of events, so heterogeneous training
(ATDP's σ per epoch, JFT's two phases, S-DPSGD's hidden-state releases) is exact composition of the list.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping

from sdp_core.errors import PrivacyError

TOUCHES = ("all", "private", "public")
"""Which records an event reads: every record, only the private part (CRT's D_pri, S-DPSGD's private segments),
or only the public part (a step that never reads a secret; free under the selective notions)."""


@dataclass(frozen=True)
class GaussianEvent:
    """`steps` Poisson-subsampled Gaussian mechanisms with the same sampling rate q and noise multiplier σ."""

    sample_rate: float
    noise_multiplier: float
    steps: int
    phase: str = ""
    mechanism: str = ""
    touches: str = "all"

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_rate <= 1.0:
            raise PrivacyError(f"sample_rate must be in [0, 1], got {self.sample_rate}")
        if not (self.noise_multiplier >= 0.0 and math.isfinite(self.noise_multiplier)):
            raise PrivacyError(f"noise_multiplier must be finite and >= 0, got {self.noise_multiplier}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0:
            raise PrivacyError(f"steps must be an integer >= 0, got {self.steps!r}")
        if self.touches not in TOUCHES:
            raise PrivacyError(f"touches must be one of {', '.join(TOUCHES)}, got {self.touches!r}")

    @property
    def is_free(self) -> bool:
        """Nothing is released about any record: no step, or a record is never sampled."""
        return self.steps == 0 or self.sample_rate == 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GaussianEvent":
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise PrivacyError(f"unknown event field(s): {', '.join(sorted(unknown))}")
        try:
            return cls(**data)
        except TypeError as e:  # a missing required field
            raise PrivacyError(f"bad event {dict(data)}: {e}") from None


def events_to_dicts(events: Iterable[GaussianEvent]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


def events_from_dicts(items: Iterable[Mapping[str, Any]]) -> list[GaussianEvent]:
    return [GaussianEvent.from_dict(d) for d in items]


def merge_events(events: Iterable[GaussianEvent]) -> list[tuple[float, float, int]]:
    """Distinct (q, σ) pairs with their total step count, free events dropped.

    Composition is commutative, so this is exact; it is what lets every accountant build each distinct
    mechanism once (one RDP curve, one PLD, one PRV) and self-compose it by its count.
    """
    counts: dict[tuple[float, float], int] = defaultdict(int)
    for e in events:
        if not e.is_free:
            counts[(e.sample_rate, e.noise_multiplier)] += e.steps
    return [(q, sigma, n) for (q, sigma), n in counts.items()]


def joint_noise_multiplier(*noise_multipliers: float) -> float:
    """σ of the one Gaussian equivalent to several Gaussian releases computed on the *same* sampled batch.

    Releases sharing one Poisson sample (S-DPSGD's gradient and hidden-state noise in one step) are a single
    subsampled mechanism of the composed Gaussian, whose σ_eff = (Σ σ_i⁻²)^(-1/2) (each σ_i relative to its
    own sensitivity). Counting them as separately subsampled events instead under-states ε, because
    amplification by sampling would then be applied once per release.
    """
    if not noise_multipliers or any(s <= 0 for s in noise_multipliers):
        raise PrivacyError("joint_noise_multiplier needs one or more noise multipliers > 0")
    return sum(s**-2 for s in noise_multipliers) ** -0.5
