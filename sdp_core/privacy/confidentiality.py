"""CRT's guarantees (Zhao et al. 2022, "Provably Confidential Language Modelling", Theorem 1).

- (ε, δ)-confidentiality (Def. 2, Thm 1.1): the DP-SGD part of CRT runs on D_pri only, with sampling rate
  q = B/|D_pri|; its (ε, δ) is the accountant's composition of those events (the public epochs on D_pub are
  free: their events carry `touches="public"`).
- Bayesian confidentiality (Def. 4, Thm 1.3): with policy π of recall 1−γ and conservative policy π_c of
  recall 1−δ₂ on the secret distribution μ, CRT is (log(1 + γ(e^ε − 1)), γδ + δ₂)-Bayesian confidential.
  Redaction acts like sampling: a secret survives it with probability γ (Prop. 6, Balle et al. 2018's
  advanced joint convexity), and a secret both policies miss is charged to δ₂.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from sdp_core.errors import PrivacyError
from sdp_core.privacy.events import GaussianEvent
from sdp_core.privacy.report import account, privacy_report


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise PrivacyError(f"{name} must be in [0, 1], got {value}")


def crt_gamma_delta2(recall_policy: float, recall_conservative: float) -> tuple[float, float]:
    """(γ, δ₂) = (1 − recall(π), 1 − recall(π_c)), recalls measured on the secret distribution μ."""
    _check_probability("recall_policy", recall_policy)
    _check_probability("recall_conservative", recall_conservative)
    return 1.0 - recall_policy, 1.0 - recall_conservative


def bayesian_confidentiality(epsilon: float, delta: float, gamma: float, delta2: float) -> tuple[float, float]:
    """(ε_b, δ_b) = (log(1 + γ(e^ε − 1)), γδ + δ₂) of Zhao et al. 2022, Theorem 1.3."""
    _check_probability("gamma", gamma)
    _check_probability("delta2", delta2)
    epsilon_b = 0.0 if gamma == 0.0 else math.log1p(gamma * math.expm1(epsilon))  # γ = 0: nothing survives redaction
    return epsilon_b, gamma * delta + delta2


def confidentiality_report(
    events: Sequence[GaussianEvent], delta: float, accountant: str = "rdp", relation: str | None = None
) -> dict[str, Any]:
    """(ε, δ)-confidentiality of CRT's DP-SGD epochs on D_pri."""
    return account(events, delta, "confidentiality", accountant, relation=relation)


def bayesian_confidentiality_report(
    events: Sequence[GaussianEvent], delta: float, accountant: str, gamma: float, delta2: float, *,
    relation: str | None = None
) -> dict[str, Any]:
    """Bayesian confidentiality of CRT, with the (ε, δ)-confidentiality it is derived from under `confidentiality`.

    `delta` is the δ of the confidentiality part; the report's `delta` is δ_b = γδ + δ₂.
    """
    base = confidentiality_report(events, delta, accountant, relation)
    epsilon_b, delta_b = bayesian_confidentiality(base["epsilon"], delta, gamma, delta2)
    return privacy_report(
        epsilon_b, delta_b, "bayesian_confidentiality", accountant, events, gamma=gamma, delta2=delta2, confidentiality=base,
        relation=relation,
    )
