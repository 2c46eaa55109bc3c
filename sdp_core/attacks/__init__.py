"""Privacy attacks on trained language models: canary exposure (exact by trie enumeration, or skew-normal
estimate, with its random-rank floor and an interval of the mean), membership inference on secrets, and the
one-run empirical lower bound on ε from inserted vs held-out canaries.

Results hold counts, ranks, exposures and rates, never secret values.
"""

from sdp_core.attacks.audit import empirical_epsilon
from sdp_core.attacks.canaries import canary_exposures, mean_interval
from sdp_core.attacks.estimate import estimate_exposures, exposure_estimate
from sdp_core.attacks.exposure import (exposure_exact, exposure_floor, exposure_naive, rank_secrets, score_candidates,
                                       score_space, space_summary)
from sdp_core.attacks.mia import membership_inference

__all__ = [
    "canary_exposures",
    "empirical_epsilon",
    "estimate_exposures",
    "exposure_estimate",
    "exposure_exact",
    "exposure_floor",
    "exposure_naive",
    "mean_interval",
    "membership_inference",
    "rank_secrets",
    "score_candidates",
    "score_space",
    "space_summary",
]
