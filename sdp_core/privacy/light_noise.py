"""JFT's lightly-noised phase 1 (Shi et al. 2022, "Just Fine-tune Twice", §3.1): amplification by the
detector's missing rate.

Phase 1 trains on redacted data, where only the secrets the detector missed can leak. With a missing rate m
(missed sensitive tokens / all tokens), a step that samples records at rate q reaches a missed secret with
probability p = q·m, so phase 1 is accounted as DP-SGD at sampling rate p (privacy amplification by
subsampling, Balle et al. 2018). m is only *estimated* (m̃, from an audit), and amplification assumes every
batch holds the same number of missed tokens, so the result is an empirical estimate, not a formal
guarantee; it is reported at both ends of m̃'s 95 % interval, tagged `guarantee: "empirical estimate"`, with
its `formal` bound beside it: the same steps with phase 1 at its real sampling rate q, composed with phase 2 under
the same notion, δ and accountant (the only guarantee that holds whatever the detector missed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from scipy.stats import beta

from sdp_core.errors import PrivacyError
from sdp_core.privacy.events import GaussianEvent
from sdp_core.privacy.report import account

ESTIMATE = "empirical estimate"
REAL_SAMPLE_RATES = "real_sample_rates"
"""Key of a saved light-noise ledger: the real sampling rate q of each amplified (phase-1) ledger phase."""
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


def upper_confidence_bound(missed: int, total: int, confidence: float = 0.95) -> float:
    """One-sided Clopper–Pearson upper bound on a rate from `missed` of `total`: the true rate is below it with
    probability at least `confidence` (the high end of the two-sided interval at 2·confidence − 1)."""
    if not 0.5 < confidence < 1:
        raise PrivacyError(f"confidence must be in (0.5, 1), got {confidence}")
    return missing_rate_interval(missed, total, 2 * confidence - 1)[1]


def amplify(events: Sequence[GaussianEvent], missing_rate: float) -> list[GaussianEvent]:
    """The events as seen by a missed secret: sampling rate q·m."""
    if not 0.0 <= missing_rate <= 1.0:
        raise PrivacyError(f"missing rate must be in [0, 1], got {missing_rate}")
    return [replace(e, sample_rate=e.sample_rate * missing_rate) for e in events]


def at_real_rates(events: Sequence[GaussianEvent], real_sample_rates: Mapping[str, float]) -> list[GaussianEvent]:
    """The events with each amplified phase (a key of `real_sample_rates`) back at its real sampling rate q."""
    return [replace(e, sample_rate=real_sample_rates[e.phase]) if e.phase in real_sample_rates else e for e in events]


def with_formal_bound(estimate: Mapping[str, Any], formal_events: Sequence[GaussianEvent]) -> dict[str, Any]:
    """`estimate` (a report with phase 1 amplified by m̃) tagged as an empirical estimate, with `formal`: the
    report of `formal_events` (the same steps at their real sampling rates) under the estimate's notion, δ and
    accountant."""
    formal = account(formal_events, estimate["delta"], estimate["notion"], estimate["accountant"])
    return {**estimate, "guarantee": ESTIMATE, "caveat": CAVEAT, "formal": formal}


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
    `guarantee` / `caveat` say it is an empirical estimate, and `formal` is the bound without amplification.
    """
    low, high = missing_rate_interval
    if not 0.0 <= low <= high <= 1.0:
        raise PrivacyError(f"missing-rate interval must satisfy 0 <= low <= high <= 1, got ({low}, {high})")
    at = {m: account(amplify(events, m) + list(other_events), delta, "SDP", accountant, missing_rate=m) for m in (low, high)}
    return {
        **with_formal_bound(at[high], list(events) + list(other_events)),
        "missing_rate_interval": [low, high],
        "at_low": at[low],
        "at_high": at[high],
    }
