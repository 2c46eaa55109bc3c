"""Policy names -> factories, and `get_policy` for names, user patterns and unions `a,b`.

Named policies:
- every built-in regex of `regex.BUILTIN_PATTERNS` and every spaCy tier of `spacy_tiers.TIERS`;
- `customersim`: the recommended CustomerSim policy (Shi et al. 2022 §5 treat name, address, phone, order and
  tracking number as secret): the regexes for those formats plus email, `low_entity` and `proper_nouns` for names.
  On 300 dialogs it finds every secret of every label (token recall 1.0, precision 0.93); with `high_entity`
  instead of `low_entity ∪ proper_nouns` name recall drops to 0.987 and precision to 0.91;
- `general`: the default for any data but CustomerSim (`config.default_policy`): `identifier` (the shapes of
  identifiers, no format assumed; not calendar dates or bug numbers) ∪ `credit_card` (Luhn) ∪ `username` (a handle
  after `@` or a `user:` cue) ∪ `facility` (hospitals by their head noun) ∪ `person_name` (NER's PERSON widened,
  RFC 5322 display names, names after titles, credits and copyright years, name lists, names where business text
  puts people: "approved by", "ticket from", "cc:"; `names.py`) ∪ `address_tagger` (postal addresses a CRF tags in
  lines with a digit, `address_tagger.py`: shapes the address rules of `identifier` miss). It flags no proper noun,
  organisation, place or date as such: on real text no one here wrote (`sdp_core.data.realtext`) that took token precision from
  0.11–0.26 to 0.79–0.86 and the masked share of characters from 32–40 % to 5–13 % (gold 3–11 %), while name
  recall rose to ≥ 0.995; on clinic notes precision 0.61 -> 0.99 at the same recall; on generated bank / HR notes
  name recall is 1.0 at precision 0.96 (`benchmarks/detect_real.py`, `docs/detection.md`);
- `strict`: `general` ∪ `strict_extra` (dates with a day, card endings, URLs, IP addresses) ∪ `general_entity`
  (NER's PERSON, ORG, DATE, GPE, LOC, FAC entities): HIPAA Safe Harbor's identifiers (45 CFR 164.514(b)(2)),
  for data that must meet it; it masks far more than `general` (places, organisations and dates as such), but
  claims neither cities nor organisations: it finds fewer than 95 % of them on held-out data (`POLICY_TYPES`);
- `conservative`: π_c of Zhao et al. 2022 (CRT, §3.2 and A.4), high recall at the price of false positives; it
  flags a superset of every other named policy except the contextual tiers (which flag nearly every sentence and
  would leave CRT no public set): `high_entity` ∪ `proper_nouns` ∪ `person_name` ∪ every built-in regex
  (including `digits`) ∪ every user pattern.

User patterns (`DetectorConfig.patterns`, name -> regex) become regex policies of that name, shadowing a
built-in of the same name; they are compiled up front, so a bad one fails before any detection runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sdp_core.config import DetectorConfig
from sdp_core.detectors.address_tagger import AddressTaggerPolicy
from sdp_core.detectors.base import Policy, union
from sdp_core.detectors.identifiers import LibraryIdentifierPolicy
from sdp_core.detectors.names import PersonNamePolicy
from sdp_core.detectors.regex import BUILTIN_PATTERNS, RegexPolicy, builtin_regex_policy
from sdp_core.detectors.spacy_tiers import TIERS, SpacyTierPolicy
from sdp_core.errors import UserError

PolicyFactory = Callable[[DetectorConfig], Policy]

CUSTOMERSIM_POLICY = "phone,email,order_number,tracking_number,address,low_entity,proper_nouns"
GENERAL_POLICY = "identifier,library_id,credit_card,username,facility,person_name,address_tagger"
STRICT_POLICY = f"{GENERAL_POLICY},strict_extra,general_entity"

# The secret types each named policy claims to mask, those it masks where it finds them without claiming them, and
# those it leaves in the clear (gold labels of the evaluation sets and the types of the recall estimate). `general`:
# direct identifiers; `strict`: HIPAA Safe Harbor's identifiers too (45 CFR 164.514(b)(2): every date tied to a
# person but the year, places smaller than a state, organisations a person belongs to, fragments of card and account
# numbers, URLs and IP addresses). A type is claimed only where the policy finds at least `CLAIM_RECALL` of its
# secrets on held-out data (`docs/detection.md`): `strict` and `conservative` find cities (0.898, 0.949) and
# organisations (0.789, 0.855) below that on the held-out business messages, so they mask them but claim neither.
CLAIM_RECALL = 0.95
DIRECT_TYPES = ("name", "email", "phone", "address", "username", "card", "iban", "account_number", "national_id",
                "vat", "mrn", "date_of_birth", "order_number", "tracking_number", "doctor", "hospital")
SAFE_HARBOR_TYPES = ("date", "city", "organisation", "card_fragment", "url", "ip_address")
UNMET_TYPES = ("city", "organisation")  # Safe Harbor types no named policy finds at `CLAIM_RECALL`


@dataclass(frozen=True)
class PolicyTypes:
    """What a named policy says of each secret type: it `masks` it (claimed: users may trust it), masks it only
    `partly` (where it finds it, measured below `CLAIM_RECALL`: not claimed), or leaves it in the `clear`."""

    masks: tuple[str, ...]
    partly: tuple[str, ...]
    clear: tuple[str, ...]

    def to_dict(self, policy: str) -> dict:
        return {"policy": policy, "masks": list(self.masks), "partly": list(self.partly), "clear": list(self.clear),
                "claim_recall": CLAIM_RECALL}


_SAFE_HARBOR_MET = tuple(t for t in SAFE_HARBOR_TYPES if t not in UNMET_TYPES)
POLICY_TYPES: dict[str, PolicyTypes] = {
    "general": PolicyTypes(DIRECT_TYPES, (), SAFE_HARBOR_TYPES),
    "strict": PolicyTypes(DIRECT_TYPES + _SAFE_HARBOR_MET, UNMET_TYPES, ()),
    "conservative": PolicyTypes(DIRECT_TYPES + _SAFE_HARBOR_MET, UNMET_TYPES, ()),  # a superset of strict's detectors
}


def policy_types(name: str) -> PolicyTypes | None:
    """What policy `name` says of each type; None for a policy that declares none (a single detector, a union, a
    user pattern, `customersim`)."""
    return POLICY_TYPES.get(name.strip())


def _conservative(config: DetectorConfig) -> Policy:
    names = ["high_entity", "proper_nouns", "person_name", "library_id", "address_tagger", *BUILTIN_PATTERNS,
             *config.patterns]
    return union([get_policy(n, config) for n in names])


def _regex_factory(name: str) -> PolicyFactory:
    return lambda config: builtin_regex_policy(name)


def _tier_factory(name: str) -> PolicyFactory:
    return lambda config: SpacyTierPolicy(name, config.spacy_model)


POLICIES: dict[str, PolicyFactory] = {
    **{name: _regex_factory(name) for name in BUILTIN_PATTERNS},
    **{name: _tier_factory(name) for name in TIERS},
    "person_name": lambda config: PersonNamePolicy(config.spacy_model),
    "library_id": lambda config: LibraryIdentifierPolicy(),
    "address_tagger": lambda config: AddressTaggerPolicy(),
    "customersim": lambda config: get_policy(CUSTOMERSIM_POLICY, config),
    "general": lambda config: get_policy(GENERAL_POLICY, config),
    "strict": lambda config: get_policy(STRICT_POLICY, config),
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
    policies: list[Policy] = []
    for part in parts:
        if part in user:
            policies.append(user[part])
        elif part in POLICIES:
            policies.append(POLICIES[part](config))
        else:
            known = ", ".join(sorted({*POLICIES, *user}))
            raise UserError(f"unknown policy {part!r} (known: {known}; unions as a,b)")
    return union(policies)
