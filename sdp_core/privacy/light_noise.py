"""JFT's lightly-noised phase 1 (Shi et al. 2022, "Just Fine-tune Twice", §3.1): amplification by the
detector's missing rate.

Phase 1 trains on redacted data, where only the secrets the detector missed can leak. With a missing rate m
(missed sensitive tokens / all tokens), a step that samples records at rate q reaches a missed secret with
probability p = q·m, so phase 1 is accounted as DP-SGD at sampling rate p (privacy amplification by
subsampling, Balle et al. 2018). m is only *estimated* (m̃, from an audit), and amplification assumes every
batch holds the same number of missed tokens, so the result is an empirical estimate, not a formal
guarantee; it is reported at both ends of m̃'s 95 % interval.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from scipy.stats import beta

from sdp_core.errors import PrivacyError
from sdp_core.privacy.events import GaussianEvent
from sdp_core.privacy.report import account

CAVEAT = (
    "empirical estimate, not a formal guarantee: the detector's missing rate is estimated from an audit, and "
    "amplification by the missing rate assumes every batch holds the same number of missed tokens (JFT §3.1)"
)


def missing_rate_interval(missed: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper–Pearson (exact binomial) interval for a missing rate from an audit: `missed` of `total` tokens.

    Conservative: its coverage is at least `confidence` for every true rate (Wilson's can fall below it).
    """
    if total <= 0 or not 0 <= missed <= total:
        raise PrivacyError(f"need 0 <= missed <= total and total > 0, got missed={missed}, total={total}")
    if not 0 < confidence < 1:
        raise PrivacyError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1 - confidence) / 2
    low = 0.0 if missed == 0 else float(beta.ppf(tail, missed, total - missed + 1))
    high = 1.0 if missed == total else float(beta.ppf(1 - tail, missed + 1, total - missed))
    return low, high


def amplify(events: Sequence[GaussianEvent], missing_rate: float) -> list[GaussianEvent]:
    """The events as seen by a missed secret: sampling rate q·m."""
    if not 0.0 <= missing_rate <= 1.0:
        raise PrivacyError(f"missing rate must be in [0, 1], got {missing_rate}")
    return [replace(e, sample_rate=e.sample_rate * missing_rate) for e in events]


def light_noise_epsilon(
    events: Sequence[GaussianEvent],
    missing_rate_interval: tuple[float, float],
    delta: float,
    accountant: str = "rdp",
    other_events: Sequence[GaussianEvent] = (),
) -> dict[str, Any]:
    """SDP ε of the light-noise phase-1 `events` amplified by m̃, composed with `other_events` (e.g. JFT's
    phase 2, not amplified), at both ends of m̃'s interval.

    The report's `epsilon` is the high end's (the conservative one); `at_low` / `at_high` are full reports,
    and `guarantee` / `caveat` say it is an empirical estimate.
    """
    low, high = missing_rate_interval
    if not 0.0 <= low <= high <= 1.0:
        raise PrivacyError(f"missing-rate interval must satisfy 0 <= low <= high <= 1, got ({low}, {high})")
    at = {m: account(amplify(events, m) + list(other_events), delta, "SDP", accountant, missing_rate=m) for m in (low, high)}
    return {
        **at[high],
        "guarantee": "empirical estimate",
        "caveat": CAVEAT,
        "missing_rate_interval": [low, high],
        "at_low": at[low],
        "at_high": at[high],
    }
