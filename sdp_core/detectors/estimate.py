"""Recall of a policy on data without gold spans, estimated by insertion: secrets of each type the policy claims,
drawn from many locales, are put into copies of the data's own records, and the share the policy masks whole is the
estimate, with its 95 % Wilson interval.

Method (`METHOD`): for each type, seeded records of the data are copied, and into each copy a secret of that type (a
name, phone, address, IBAN, ... from one of the 27 Faker locales of `sdp_core.data.business`) is put at the start
of one of its lines, in a short carrier phrase of that type ("Contact: ...", "... wrote:"). A secret counts as
found only when redaction leaves none of its characters. Secrets are inserted in rounds of `ROUND` per type, and a
type takes another round until its 95 % Wilson interval's half-width is at most `HALF_WIDTH` (two points) or it
holds `PER_TYPE` secrets (where the half-width at any recall is at most 0.02). The cost is one detection per
inserted secret: 100 per type where the policy finds every one (a half-width of 0.0185), about 460 at a recall of
0.95, 870 at 0.90, 2,400 at 0.50. Stopping when the interval is narrow enough is the fixed-width sequential rule
of Chow & Robbins (1965); its coverage tends to the nominal 95 % as the width shrinks and is not guaranteed at
a given width.

What it cannot see: secrets written as the data writes them when that differs from the carriers and locales drawn
(a format no generator knows, a name in a script the lexicon lacks), types the policy does not claim, and secrets
that are not values of a type at all (a diagnosis, a salary). The trustworthy measure is a person's review of
sampled records (`sdp-sweep detect --review`); this estimate says how the policy does on the secrets it was meant
for, inside the data's own text.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from sdp_core.config.detector import ESTIMATE_PER_TYPE
from sdp_core.data.business import LOCALES, VALUES, _fakes, _person
from sdp_core.data.records import Record, Span
from sdp_core.detectors.base import Policy
from sdp_core.detectors.cache import texts_of
from sdp_core.detectors.evaluation import Rate, _masked

WARN_BELOW = 0.95
HALF_WIDTH = 0.02  # the 95 % interval an estimate runs until: ±2 points
ROUND = 100  # secrets per type per round: 100 found of 100 is already within ±0.0185
PER_TYPE = ESTIMATE_PER_TYPE  # at most, per type, unless a trial's `detector.estimate_per_type` says otherwise
METHOD = (f"insertion: seeded secrets of each type from 27 locales, put at a line start of copies of the data's "
          f"records, in rounds of {ROUND} per type until the 95 % interval is within ±{HALF_WIDTH}")
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


@dataclass(frozen=True)
class TypeEstimate:
    type: str
    recall: Rate

    @property
    def half_width(self) -> float:
        return (self.recall.high - self.recall.low) / 2

    def to_dict(self) -> dict:
        r = self.recall
        return {"value": r.value, "low": r.low, "high": r.high, "k": r.k, "n": r.n, "half_width": self.half_width,
                "warn": r.value < WARN_BELOW}


def _secrets(kind: str, seed: int) -> Iterator[str]:
    """Values of one type from the locales of both business splits that write that type, without end."""
    from sdp_core.data.business import NEEDS

    fakes = {**_fakes("dev", f"estimate-{seed}"), **_fakes("heldout", f"estimate-{seed}")}
    rng = random.Random(f"estimate-{kind}-{seed}")
    field = GENERATOR[kind]
    locales = sorted({loc for split in LOCALES.values() for group in split.values() for loc in group
                      if loc in NEEDS.get(field, (loc,)) and loc in fakes})
    while True:
        value = VALUES[field](_person(fakes, rng.choice(locales), "en"))
        yield value[0] if isinstance(value, tuple) else value


def _insert(text: str, carrier: str, secret: str, rng: random.Random) -> tuple[str, Span]:
    """The text with the carrier put at the start of one of its lines, and the secret's span."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    at = rng.choice(starts)
    prefix, _, suffix = carrier.partition("{}")
    start = at + len(prefix)
    return text[:at] + prefix + secret + suffix + text[at:], Span(start, start + len(secret), "secret")


def estimate_recall(texts: Sequence[str], policy: Policy, per_type: int = PER_TYPE, seed: int = 0,
                    types: Sequence[str] = tuple(CARRIERS), half_width: float = HALF_WIDTH
                    ) -> dict[str, TypeEstimate]:
    """Per type, the share of inserted secrets the policy masks whole, with its Wilson interval, inserted in rounds
    until the interval's half-width is at most `half_width` or the type holds `per_type` secrets (see above). Each
    type's secrets, records and carriers come from its own seeded streams, so its estimate does not depend on the
    other types asked for."""
    if not texts:
        return {}
    streams = {kind: (_secrets(kind, seed), random.Random(f"estimate-{kind}-{seed}-insert")) for kind in types}
    found: dict[str, list[bool]] = {kind: [] for kind in types}
    running = list(types)
    while running:
        copies, spans, kinds = [], [], []
        for kind in running:
            secrets, rng = streams[kind]
            for _ in range(min(ROUND, per_type - len(found[kind]))):
                text, span = _insert(rng.choice(texts), rng.choice(CARRIERS[kind]), next(secrets), rng)
                copies.append(text)
                spans.append(span)
                kinds.append(kind)
        for text, span, kind, det in zip(copies, spans, kinds, policy.detect(copies)):
            found[kind].append(_masked(text, [span], det)[0])
        running = [kind for kind in running if len(found[kind]) < per_type
                   and TypeEstimate(kind, Rate.of(sum(found[kind]), len(found[kind]))).half_width > half_width]
    return {k: TypeEstimate(k, Rate.of(sum(v), len(v))) for k, v in found.items()}


def estimable_types(claimed: Sequence[str] | None) -> tuple[str, ...]:
    """The types to estimate for a policy that claims `claimed` (every type the estimate knows when it declares
    none): a type the policy leaves in the clear is not one it can miss."""
    return tuple(t for t in CARRIERS if claimed is None or t in claimed)


def estimate_summary(records: Sequence[Record], policy: Policy, seed: int = 0,
                     types: Sequence[str] = tuple(CARRIERS), per_type: int = PER_TYPE) -> dict:
    """What a trial stores: the method, its cost (secrets inserted and detected, seconds), what it cannot see, and
    per type the estimate (counts and rates only)."""
    started = time.perf_counter()
    estimates = estimate_recall(texts_of(records), policy, per_type=per_type, seed=seed, types=types)
    return {"method": METHOD, "half_width_target": HALF_WIDTH, "max_per_type": per_type,
            "cost": {"inserted": sum(e.recall.n for e in estimates.values()),
                     "seconds": round(time.perf_counter() - started, 1)},
            "cannot_see": "secrets in formats or scripts the generators lack, types the policy "
            "does not claim, and secrets that are no value of a type; a person's review is the measure to trust",
            "warn_below": WARN_BELOW, "per_type": {k: e.to_dict() for k, e in estimates.items()}}
