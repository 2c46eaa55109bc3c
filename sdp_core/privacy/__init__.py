"""Privacy accounting: every privacy number the framework prints comes from here.

- `events`: `GaussianEvent`, one Poisson-subsampled Gaussian mechanism repeated `steps` times.
- `relations`: the neighbouring relations, add/remove and replace-one; each notion fixes its own.
- `accountants`: `get_accountant("rdp" | "prv" | "pld").epsilon(events, delta, relation)`, exact composition
  of heterogeneous events under either relation (RDP: own numpy code; PLD: dp_accounting; PRV: Opacus' PRVs
  and our replace-one PRV).
- `calibration`: `calibrate_noise` (σ scale of a schedule for a target ε), `calibrate_two_phase`.
- `ledger`: `PrivacyLedger` (plan, spent steps, refusal to overspend, reports, save / reload).
- `light_noise`: JFT's phase 1 amplified by the detector's missing rate; Clopper–Pearson interval.
- `confidentiality`: CRT's confidentiality and Bayesian confidentiality.
- `sweep_cost`: the cost of the sweep's own trials (basic, composed, Papernot–Steinke random search).
- `report`: the report shape (ε always with δ, notion, accountant, neighbouring relation, events) and
  `assert_no_bare_epsilon`.
"""

from sdp_core.privacy.accountants import ACCOUNTANTS, Accountant, get_accountant, register_accountant
from sdp_core.privacy.calibration import (
    MAX_NOISE_MULTIPLIER,
    Segment,
    calibrate_noise,
    calibrate_two_phase,
    schedule_events,
)
from sdp_core.privacy.commands import epsilon_command
from sdp_core.privacy.confidentiality import (
    bayesian_confidentiality,
    bayesian_confidentiality_report,
    confidentiality_report,
    crt_gamma_delta2,
)
from sdp_core.privacy.events import GaussianEvent, events_from_dicts, events_to_dicts, joint_noise_multiplier
from sdp_core.privacy.ledger import PrivacyLedger, epsilon_from_ledger
from sdp_core.privacy.light_noise import amplify, light_noise_epsilon, missing_rate_interval
from sdp_core.privacy.relations import ADD_REMOVE, RELATIONS, REPLACE_ONE
from sdp_core.privacy.report import (
    NOTIONS,
    account,
    assert_no_bare_epsilon,
    counted_events,
    get_notion,
    privacy_report,
)
from sdp_core.privacy.sweep_cost import basic_composition, composed_sweep_cost, random_search_cost

__all__ = [
    "ACCOUNTANTS",
    "ADD_REMOVE",
    "Accountant",
    "GaussianEvent",
    "MAX_NOISE_MULTIPLIER",
    "NOTIONS",
    "PrivacyLedger",
    "RELATIONS",
    "REPLACE_ONE",
    "Segment",
    "account",
    "amplify",
    "assert_no_bare_epsilon",
    "basic_composition",
    "bayesian_confidentiality",
    "bayesian_confidentiality_report",
    "calibrate_noise",
    "calibrate_two_phase",
    "composed_sweep_cost",
    "confidentiality_report",
    "counted_events",
    "crt_gamma_delta2",
    "epsilon_command",
    "epsilon_from_ledger",
    "events_from_dicts",
    "events_to_dicts",
    "get_accountant",
    "get_notion",
    "joint_noise_multiplier",
    "light_noise_epsilon",
    "missing_rate_interval",
    "privacy_report",
    "random_search_cost",
    "register_accountant",
    "schedule_events",
]
