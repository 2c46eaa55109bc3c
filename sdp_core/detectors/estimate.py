"""Recall of a policy on data without gold spans, estimated by insertion: secrets of each type the policy claims,
drawn from many locales, are put into copies of the data's own records, and the share the policy masks whole is the
estimate, with its 95 % Wilson interval.

Method (`METHOD`): for each type, `per_type` seeded records of the data are copied, and into each copy a secret of
that type (a name, phone, address, IBAN, ... from one of the 27 Faker locales of `sdp_core.data.business`) is put
at the start of one of its lines, in a short carrier phrase of that type ("Contact: ...", "... wrote:"). A secret
counts as found only when redaction leaves none of its characters.

What it cannot see: secrets written as the data writes them when that differs from the carriers and locales drawn
(a format no generator knows, a name in a script the lexicon lacks), types the policy does not claim, and secrets
that are not values of a type at all (a diagnosis, a salary). The trustworthy measure is a person's review of
sampled records (`sdp-sweep detect --review`); this estimate says how the policy does on the secrets it was meant
for, inside the data's own text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from sdp_core.data.business import LOCALES, VALUES, _fakes, _person
from sdp_core.data.records import Record, Span
from sdp_core.detectors.base import Policy
from sdp_core.detectors.evaluation import Rate, _masked

METHOD = "insertion: seeded secrets of each type from 27 locales, put at a line start of copies of the data's records"
WARN_BELOW = 0.95
# The estimated types, with the carriers a secret is put in (`{}` is the secret).
CARRIERS: dict[str, tuple[str, ...]] = {
    "name": ("{} wrote: ", "Dear {}, ", "{} called about this. ", "From: {}\n"),
    "email": ("Contact: {}\n", "Reply to {} please. "),
    "phone": ("Phone: {}\n", "Call me on {} today. "),
    "address": ("Address: {}\n", "Ship to {}. "),
    "iban": ("IBAN: {}\n", "Pay to {} this week. "),
    "national_id": ("ID number: {}\n", "My ID is {}. "),
    "date_of_birth": ("Date of birth: {}\n", "born {}, "),
    "card": ("Card: {}\n", "Paid with {} yesterday. "),
    "username": ("user: {}\n", "Thanks @{} for the fix. "),
}
GENERATOR = {"name": "name", "email": "email", "phone": "phone", "address": "address", "iban": "iban",
             "national_id": "national_id", "date_of_birth": "dob", "card": "card", "username": "username"}
PER_TYPE = 40


@dataclass(frozen=True)
class TypeEstimate:
    type: str
    recall: Rate

    def to_dict(self) -> dict:
        r = self.recall
        return {"value": r.value, "low": r.low, "high": r.high, "k": r.k, "n": r.n, "warn": r.value < WARN_BELOW}


def _secrets(kind: str, n: int, seed: int) -> list[str]:
    """n values of one type from the locales of both business splits that write that type."""
    from sdp_core.data.business import NEEDS

    fakes = {**_fakes("dev", f"estimate-{seed}"), **_fakes("heldout", f"estimate-{seed}")}
    rng = random.Random(f"estimate-{kind}-{seed}")
    field = GENERATOR[kind]
    locales = sorted({loc for split in LOCALES.values() for group in split.values() for loc in group
                      if loc in NEEDS.get(field, (loc,)) and loc in fakes})
    out = []
    for _ in range(n):
        value = VALUES[field](_person(fakes, rng.choice(locales), "en"))
        out.append(value[0] if isinstance(value, tuple) else value)
    return out


def _insert(text: str, carrier: str, secret: str, rng: random.Random) -> tuple[str, Span]:
    """The text with the carrier put at the start of one of its lines, and the secret's span."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    at = rng.choice(starts)
    prefix, _, suffix = carrier.partition("{}")
    start = at + len(prefix)
    return text[:at] + prefix + secret + suffix + text[at:], Span(start, start + len(secret), "secret")


def estimate_recall(texts: Sequence[str], policy: Policy, per_type: int = PER_TYPE, seed: int = 0,
                    types: Sequence[str] = tuple(CARRIERS)) -> dict[str, TypeEstimate]:
    """Per type, the share of inserted secrets the policy masks whole, with its Wilson interval (see above)."""
    if not texts:
        return {}
    rng = random.Random(f"estimate-{seed}")
    copies, spans, kinds = [], [], []
    for kind in types:
        for secret in _secrets(kind, per_type, seed):
            text, span = _insert(rng.choice(texts), rng.choice(CARRIERS[kind]), secret, rng)
            copies.append(text)
            spans.append(span)
            kinds.append(kind)
    detected = policy.detect(copies)
    found: dict[str, list[bool]] = {k: [] for k in types}
    for text, span, kind, det in zip(copies, spans, kinds, detected):
        found[kind].append(_masked(text, [span], det)[0])
    return {k: TypeEstimate(k, Rate.of(sum(v), len(v))) for k, v in found.items()}


def estimable_types(claimed: Sequence[str] | None) -> tuple[str, ...]:
    """The types to estimate for a policy that claims `claimed` (every type the estimate knows when it declares
    none): a type the policy leaves in the clear is not one it can miss."""
    return tuple(t for t in CARRIERS if claimed is None or t in claimed)


def estimate_summary(records: Sequence[Record], policy: Policy, seed: int = 0,
                     types: Sequence[str] = tuple(CARRIERS), per_type: int = PER_TYPE) -> dict:
    """What a trial stores: the method, what it cannot see, and per type the estimate (counts and rates only)."""
    estimates = estimate_recall([r.text for r in records], policy, per_type=per_type, seed=seed, types=types)
    return {"method": METHOD, "cannot_see": "secrets in formats or scripts the generators lack, types the policy "
            "does not claim, and secrets that are no value of a type; a person's review is the measure to trust",
            "warn_below": WARN_BELOW, "per_type": {k: e.to_dict() for k, e in estimates.items()}}
