"""What `sdp-sweep epsilon` computes: ε of a DP-SGD run, or the σ that meets a target ε."""

from __future__ import annotations

from typing import Any

from sdp_core.errors import UserError
from sdp_core.privacy.calibration import calibrate_noise
from sdp_core.privacy.events import GaussianEvent
from sdp_core.privacy.relations import ADD_REMOVE
from sdp_core.privacy.report import account


def epsilon_command(
    sample_rate: float,
    sigma: float | None,
    steps: int,
    delta: float,
    accountant: str = "rdp",
    target_epsilon: float | None = None,
    relation: str = ADD_REMOVE,
) -> dict[str, Any]:
    """Either ε of `steps` DP-SGD steps at (`sample_rate`, `sigma`), or (σ = None) the σ calibrated to
    `target_epsilon` with the ε it actually spends, both for `relation` neighbours: add/remove (unbounded DP, as
    most DP-SGD papers) or replace-one (bounded DP, the relation of the selective notions).

    Returns the privacy report (`epsilon, delta, notion="DP", accountant, neighbouring, events`) plus `sigma`,
    `sample_rate`, `steps` and `target_epsilon`.
    """
    if (sigma is None) == (target_epsilon is None):
        raise UserError("give exactly one of --sigma (to compute ε) or --target-epsilon (to calibrate σ)")
    if sigma is None:
        assert target_epsilon is not None  # exactly one of the two is given
        sigma = calibrate_noise([(sample_rate, steps)], target_epsilon, delta, accountant, relation=relation)
    event = GaussianEvent(sample_rate, sigma, steps, phase="dpsgd", mechanism="dpsgd")
    return account(
        [event], delta, "DP", accountant, relation=relation, sigma=sigma, sample_rate=sample_rate, steps=steps,
        target_epsilon=target_epsilon,
    )
