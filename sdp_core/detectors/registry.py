"""Policy names -> factories, and `get_policy` for names, user patterns and unions `a,b`.

Named policies:
- every built-in regex of `regex.BUILTIN_PATTERNS` and every spaCy tier of `spacy_tiers.TIERS`;
- `customersim`: the recommended CustomerSim policy (Shi et al. 2022 §5 treat name, address, phone, order and
  tracking number as secret): the regexes for those formats plus email, `low_entity` and `proper_nouns` for names.
  On 300 dialogs it finds every secret of every label (token recall 1.0, precision 0.93); with `high_entity`
  instead of `low_entity ∪ proper_nouns` name recall drops to 0.987 and precision to 0.91;
- `general`: the default for any data but CustomerSim (`config.default_policy`): `identifier` (the shapes of
  identifiers, no format assumed) ∪ `general_entity` (`low_entity`'s entities and FAC) ∪ `proper_nouns`. On 500
  clinic notes it fully masks 0.998 of the secrets, where `customersim` masks 0.770 (its regexes miss most record
  numbers, national IDs and non-US phones), at token precision 0.61 (spaCy flags titles, lab abbreviations and
  durations); on 500 CustomerSim dialogs it finds every secret at `customersim`'s precision (0.94)
  (`benchmarks/detect_general.py`);
- `conservative`: π_c of Zhao et al. 2022 (CRT, §3.2 and A.4), high recall at the price of false positives; it
  flags a superset of every other named policy except the contextual tiers (which flag nearly every sentence and
  would leave CRT no public set): `high_entity` ∪ `proper_nouns` ∪ every built-in regex (including `digits`) ∪
  every user pattern.

User patterns (`DetectorConfig.patterns`, name -> regex) become regex policies of that name, shadowing a
built-in of the same name; they are compiled up front, so a bad one fails before any detection runs.
"""

from __future__ import annotations

from typing import Callable

from sdp_core.config import DetectorConfig
from sdp_core.detectors.base import Policy, union
from sdp_core.detectors.names import PersonNamePolicy
from sdp_core.detectors.regex import BUILTIN_PATTERNS, RegexPolicy, builtin_regex_policy
from sdp_core.detectors.spacy_tiers import TIERS, SpacyTierPolicy
from sdp_core.errors import UserError

PolicyFactory = Callable[[DetectorConfig], Policy]

CUSTOMERSIM_POLICY = "phone,email,order_number,tracking_number,address,low_entity,proper_nouns"
GENERAL_POLICY = "identifier,credit_card,username,facility,person_name"


def _conservative(config: DetectorConfig) -> Policy:
    names = ["high_entity", "proper_nouns", "person_name", *BUILTIN_PATTERNS, *config.patterns]
    return union([get_policy(n, config) for n in names])


POLICIES: dict[str, PolicyFactory] = {
    **{name: (lambda config, name=name: builtin_regex_policy(name)) for name in BUILTIN_PATTERNS},
    **{name: (lambda config, name=name: SpacyTierPolicy(name, config.spacy_model)) for name in TIERS},
    "person_name": lambda config: PersonNamePolicy(config.spacy_model),
    "customersim": lambda config: get_policy(CUSTOMERSIM_POLICY, config),
    "general": lambda config: get_policy(GENERAL_POLICY, config),
    "conservative": _conservative,
}


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Add a named policy (a factory receiving the `DetectorConfig`)."""
    if "," in name or not name.strip():
        raise ValueError(f"policy name {name!r} must be non-empty and hold no comma")
    POLICIES[name] = factory


def _user_policies(config: DetectorConfig) -> dict[str, RegexPolicy]:
    out = {}
    for name, pattern in config.patterns.items():
        if "," in name or not name.strip():
            raise UserError(f"pattern name {name!r} must be non-empty and hold no comma")
        out[name] = RegexPolicy(name, (pattern,))
    return out


def get_policy(name: str, config: DetectorConfig | None = None) -> Policy:
    """Resolve a policy name, a user pattern name, or a comma-separated union of them."""
    config = config or DetectorConfig()
    user = _user_policies(config)
    parts = [p.strip() for p in name.split(",")]
    if not all(parts):
        raise UserError(f"policy {name!r} has an empty name in its union")
    policies = []
    for part in parts:
        if part in user:
            policies.append(user[part])
        elif part in POLICIES:
            policies.append(POLICIES[part](config))
        else:
            known = ", ".join(sorted({*POLICIES, *user}))
            raise UserError(f"unknown policy {part!r} (known: {known}; unions as a,b)")
    return union(policies)
