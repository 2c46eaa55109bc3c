"""Privacy-loss-distribution accountant, backed by `dp_accounting.pld`.

- Each distinct Poisson-subsampled Gaussian gets its PLD from the "connect the dots" construction
  (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022), a pessimistic discretisation, so the result is an
  upper bound on ε for the discretised loss values.
- Under replace-one neighbours the pair is dp_accounting's REPLACE adjacency, (1−q)N(0,σ²) + qN(1,σ²) against
  (1−q)N(0,σ²) + qN(−1,σ²); under add/remove, its ADD and REMOVE pairs.
- Composition is the convolution of PLDs, done with the FFT (Koskela, Jälkö & Honkela 2020; Koskela et al.
  2021), self-composing each distinct mechanism by its step count; ε at δ is read off the hockey-stick
  divergence of the composed PLD (Sommer, Meiser & Mohammadi 2019).
"""

from __future__ import annotations

import dp_accounting
from dp_accounting import pld

from sdp_core.privacy.accountants.base import Accountant, Pairs, register_accountant
from sdp_core.privacy.relations import ADD_REMOVE, REPLACE_ONE

VALUE_DISCRETIZATION_INTERVAL = 1e-3
"""Width of the privacy-loss grid. dp_accounting's default 1e-4 is ~10x slower to build and tightens ε by
~0.4 % (2.382 vs 2.391 on the reference DP-SGD run); both are valid upper bounds."""
NEIGHBOURING = {
    ADD_REMOVE: dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    REPLACE_ONE: dp_accounting.NeighboringRelation.REPLACE_ONE,
}


@register_accountant("pld")
class PLDAccountant(Accountant):
    """PLD accounting (Koskela et al. 2020; Doroshenko et al. 2022) through `dp_accounting.pld.PLDAccountant`."""

    def _epsilon(self, pairs: Pairs, delta: float, relation: str) -> float:
        event = dp_accounting.ComposedDpEvent(
            [
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
                )
                for q, sigma, steps in pairs
            ]
        )
        accountant = pld.PLDAccountant(NEIGHBOURING[relation], value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)
        return accountant.compose(event).get_epsilon(delta)
