"""CRT's guarantees (Zhao et al. 2022, "Provably Confidential Language Modelling", Theorem 1).

- (ε, δ)-confidentiality (Def. 2, Thm 8.1): the DP-SGD part of CRT runs on D_pri only, with sampling rate
  q = B/|D_pri|; its (ε, δ) is the accountant's composition of those events (the public epochs on D_pub are
  free: their events carry `touches="public"`). It holds only if the conservative policy π_c flags every secret
  the policy π misses: a secret both miss stays in D_pub, which trains without noise. `confidentiality_claim`
  says whether gold spans show that condition met.
- Bayesian confidentiality (Def. 4, Thm 8.3): with policy π missing a share γ of the secrets drawn from μ, and
  π and π_c together missing a share δ₂, CRT is (log(1 + γ(e^ε − 1)), γδ + δ₂)-Bayesian confidential.
  Redaction acts like sampling: a secret survives it with probability γ (Prop. 6, Balle et al. 2018's
  advanced joint convexity), and a secret both policies miss is charged to δ₂. γ and δ₂ are shares of
  *secrets* (a secret is caught only when redaction masks every one of its non-space characters), estimated on
  gold spans; the guarantee uses their one-sided Clopper–Pearson upper bounds (`crt_gamma_delta2`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from sdp_core.errors import PrivacyError
from sdp_core.privacy.events import GaussianEvent
from sdp_core.privacy.light_noise import upper_confidence_bound
from sdp_core.privacy.report import account, privacy_report

CONDITION = "π_c flags every secret π misses (Zhao et al. 2022, Thm 8.1)"


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise PrivacyError(f"{name} must be in [0, 1], got {value}")


def crt_gamma_delta2(missed_by_policy: int, missed_by_both: int, secrets: int, confidence: float = 0.95
                     ) -> dict[str, Any]:
    """γ and δ₂ of Thm 8.3 from gold secrets: `missed_by_policy` of `secrets` not fully masked by π, and
    `missed_by_both` not fully masked by π and π_c together.

    `gamma` and `delta2` are one-sided Clopper–Pearson upper bounds at `confidence` (what the guarantee uses:
    μ's true shares are below them with that probability); `gamma_estimate` and `delta2_estimate` are the
    observed shares.
    """
    if not 0 <= missed_by_both <= missed_by_policy <= secrets:
        raise PrivacyError(f"need 0 <= missed_by_both <= missed_by_policy <= secrets, got {missed_by_both}, "
                           f"{missed_by_policy}, {secrets}")
    return {
        "gamma": upper_confidence_bound(missed_by_policy, secrets, confidence),
        "delta2": upper_confidence_bound(missed_by_both, secrets, confidence),
        "gamma_estimate": missed_by_policy / secrets,
        "delta2_estimate": missed_by_both / secrets,
        "secrets": secrets,
        "missed_by_policy": missed_by_policy,
        "missed_by_both": missed_by_both,
        "confidence": confidence,
        "bound": "one-sided Clopper–Pearson upper bound",
    }


def bayesian_confidentiality(epsilon: float, delta: float, gamma: float, delta2: float) -> tuple[float, float]:
    """(ε_b, δ_b) = (log(1 + γ(e^ε − 1)), γδ + δ₂) of Zhao et al. 2022, Theorem 1.3."""
    _check_probability("gamma", gamma)
    _check_probability("delta2", delta2)
    epsilon_b = 0.0 if gamma == 0.0 else math.log1p(gamma * math.expm1(epsilon))  # γ = 0: nothing survives redaction
    return epsilon_b, gamma * delta + delta2


def confidentiality_report(
    events: Sequence[GaussianEvent], delta: float, accountant: str = "rdp", relation: str | None = None
) -> dict[str, Any]:
    """(ε, δ)-confidentiality of CRT's DP-SGD epochs on D_pri (Thm 8.1, assuming its condition holds)."""
    return account(events, delta, "confidentiality", accountant, relation=relation)


def confidentiality_claim(events: Sequence[GaussianEvent], delta: float, accountant: str,
                          missed_by_both: int | None) -> dict[str, Any]:
    """The (ε, δ)-confidentiality report with whether its condition holds: `holds` is False when gold spans show
    `missed_by_both` > 0 secrets that neither π nor π_c masks, True when they show none, None without gold."""
    holds = None if missed_by_both is None else missed_by_both == 0
    observed = {None: "not checked: the data has no gold spans",
                True: "met on the gold spans of the training data",
                False: f"not met: {missed_by_both} gold secret(s) masked by neither π nor π_c train without noise"}
    return {**confidentiality_report(events, delta, accountant), "holds": holds,
            "condition": f"holds only if {CONDITION}; {observed[holds]}"}


def bayesian_confidentiality_report(
    events: Sequence[GaussianEvent], delta: float, accountant: str, gamma: float, delta2: float, *,
    relation: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Bayesian confidentiality of CRT, with the (ε, δ)-confidentiality it is derived from under `confidentiality`.

    `delta` is the δ of the confidentiality part; the report's `delta` is δ_b = γδ + δ₂; `extra` keys (the
    estimates behind γ and δ₂) join the report.
    """
    base = confidentiality_report(events, delta, accountant, relation)
    epsilon_b, delta_b = bayesian_confidentiality(base["epsilon"], delta, gamma, delta2)
    return privacy_report(epsilon_b, delta_b, "bayesian_confidentiality", accountant, events, gamma=gamma,
                          delta2=delta2, confidentiality=base, relation=relation, **extra)
