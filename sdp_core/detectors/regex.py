"""Regular-expression policies: digits (Shi et al. 2022's WikiText-2 policy), US PII formats, user patterns.

A pattern may contain a named group `secret`; then only that group is the span, so context can anchor a match
without being redacted (`tracking number is (?P<secret>[A-Z0-9]{10})`). A policy may hold several patterns and
an optional validator (the Luhn check for card numbers). The span label is the policy name, which is also the
gold label CustomerSim uses (`phone`, `order_number`, `address`, `tracking_number`).

Built-in patterns and their decisions:

| name            | matches                                                                                   |
| --------------- | ----------------------------------------------------------------------------------------- |
| digits          | every run of digits (a token holding a digit becomes sensitive)                            |
| phone           | US numbers with separators: `(555) 123-4567`, `555-123-4567`, `555.123.4567`, `+1-…`, `x123` extensions; bare 10-digit runs are left to `id` (they are as often order or account numbers) |
| email           | `local@domain.tld`                                                                         |
| ssn             | `ddd-dd-dddd` / `ddd dd dddd` without the never-issued 000, 666, 9xx areas                 |
| credit_card     | 13–19 digits, optionally grouped by spaces or dashes, passing the Luhn check              |
| order_number    | `ddd-ddddd-dddd` (CustomerSim)                                                             |
| tracking_number | 10 × `[A-Z0-9]` holding both a letter and a digit (an all-caps word has no digit, a bare number no letter), or any 10 × `[A-Z0-9]` right after "tracking number" |
| id              | 6 or more digits standing alone (not part of a decimal or a grouped number)                |
| address         | US street address: building number, one to four capitalised words, a USPS street suffix (plural allowed), optional Apt/Suite/Unit, optional `City, ST 12345`; PO boxes; APO/FPO/DPO military addresses |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from sdp_core.data.records import Span
from sdp_core.detectors.base import Policy, normalise_spans, version_hash
from sdp_core.errors import UserError

REGEX_CODE_VERSION = "1"  # bump when RegexPolicy's matching semantics change


def luhn_valid(candidate: str) -> bool:
    """The Luhn checksum every payment card number satisfies (rules out ~90 % of random digit runs)."""
    digits = [int(c) for c in candidate if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


@dataclass(frozen=True)
class PatternSpec:
    """One built-in policy: its patterns and an optional validator of the matched string."""

    patterns: tuple[str, ...]
    validator: Callable[[str], bool] | None = None


# Boundaries: a secret must not continue into a word character or a dash (so `604-87647-5938` is one order
# number, not a phone number inside it).
_L = r"(?<![\w-])"
_R = r"(?![\w-])"

# USPS Publication 28, appendix C1 primary street suffix names and common abbreviations.
_STREET_SUFFIXES = (
    "Alley Annex Arcade Avenue Bayou Beach Bend Bluff Bottom Boulevard Branch Bridge Brook Burg Bypass Camp Canyon "
    "Cape Causeway Center Circle Cliff Club Common Corner Course Court Cove Creek Crescent Crest Crossing Crossroad "
    "Curve Dale Dam Divide Drive Estate Expressway Extension Fall Ferry Field Flat Ford Forest Forge Fork Fort "
    "Freeway Garden Gateway Glen Green Grove Harbor Haven Heights Highway Hill Hollow Inlet Island Isle Junction Key "
    "Knoll Lake Land Landing Lane Light Loaf Lock Lodge Loop Mall Manor Meadow Mews Mill Mission Motorway Mount "
    "Mountain Neck Orchard Oval Overpass Park Parkway Pass Passage Path Pike Pine Place Plain Plaza Point Port "
    "Prairie Radial Ramp Ranch Rapid Rest Ridge River Road Route Row Rue Run Shoal Shore Skyway Spring Spur Square "
    "Station Stravenue Stream Street Summit Terrace Throughway Trace Track Trafficway Trail Trailer Tunnel Turnpike "
    "Underpass Union Valley Viaduct View Village Ville Vista Walk Wall Way Well"
).split()
_SUFFIX_ABBREVIATIONS = "St Ave Av Blvd Rd Dr Ln Ct Pl Sq Hwy Pkwy Ter Cir Trl Way Expy Fwy Cres".split()

_WORD = r"(?:[A-Z]\.|[A-Z][A-Za-z'-]*)"  # no dots inside: a sentence end must stop an address
_STREET = (
    r"\d{1,6}[A-Z]?"
    rf"(?:\s+(?:{_WORD}|\d+(?:st|nd|rd|th))){{1,4}}"
    rf"\s+(?:(?:{'|'.join(_STREET_SUFFIXES)})s?|(?:{'|'.join(_SUFFIX_ABBREVIATIONS)})\.?)(?![\w'-])"
    r"(?:\s+(?:N|S|E|W|NE|NW|SE|SW)\b)?"
    r"(?:,?\s+(?:Apt\.?|Apartment|Suite|Ste\.?|Unit|Fl\.?|Floor|Room|Rm\.?|\#)\s*[\w-]+)?"
)
_CITY_STATE_ZIP = rf"(?:,?\s+{_WORD}(?:\s+{_WORD}){{0,3}},?\s+[A-Z]{{2}}\s+\d{{5}}(?:-\d{{4}})?(?!\d))"

BUILTIN_PATTERNS: dict[str, PatternSpec] = {
    "digits": PatternSpec((r"\d+",)),
    "phone": PatternSpec(
        (rf"(?<![\w+-])(?:(?:\+1|001)[-.\s]?)?(?:\(\d{{3}}\)\s?|\d{{3}}[-.\s])\d{{3}}[-.\s]\d{{4}}"
         rf"(?:\s?(?:x|ext\.?\s?)\d{{1,5}})?{_R}",)
    ),
    "email": PatternSpec((r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",)),
    "ssn": PatternSpec((rf"{_L}(?!000|666|9\d\d)\d{{3}}(?P<sep>[- ])(?!00)\d{{2}}(?P=sep)(?!0000)\d{{4}}{_R}",)),
    "credit_card": PatternSpec((rf"{_L}\d(?:[ -]?\d){{12,18}}{_R}",), luhn_valid),
    "order_number": PatternSpec((rf"{_L}\d{{3}}-\d{{5}}-\d{{4}}{_R}",)),
    "tracking_number": PatternSpec(
        (
            rf"{_L}(?=[A-Z0-9]{{0,9}}\d)(?=[A-Z0-9]{{0,9}}[A-Z])[A-Z0-9]{{10}}{_R}",
            rf"(?i:tracking\s+(?:number|no\.?|code|id|\#))\s*[:,]?\s*(?i:is\s+)?(?P<secret>[A-Z0-9]{{10}}){_R}",
        )
    ),
    "id": PatternSpec((r"(?<![\w.,])\d{6,}(?!\w|[.,]\d)",)),
    "address": PatternSpec(
        (
            # Two alternatives, not an optional tail, so the engine backtracks into the street to reach a tail.
            rf"{_L}(?:{_STREET}{_CITY_STATE_ZIP}|{_STREET})",
            rf"\bP\.?\s?O\.?\s+Box\s+\d+{_CITY_STATE_ZIP}?",
            r"\b(?:PSC\s+\d{4},?\s+Box\s+\d{4}|Unit\s+\d{4}\s+Box\s+\d{4}|(?:USNS|USS|USNV|USCGC)\s+[A-Z][a-z]+)"
            r"\s+[AFD]PO\s+A[AEP]\s+\d{5}\b",
        )
    ),
}


class RegexPolicy(Policy):
    """Spans matched by any of `patterns` (the `secret` group when present), labelled with the policy name."""

    def __init__(self, name: str, patterns: Sequence[str], validator: Callable[[str], bool] | None = None):
        self.name = name
        self._validator = validator
        try:
            self._compiled = tuple(re.compile(p) for p in patterns)
        except re.error as e:
            raise UserError(f"invalid regex for policy {name!r}: {e}") from None
        self.version = version_hash(REGEX_CODE_VERSION, *patterns, validator.__name__ if validator else "")

    def _spans(self, text: str) -> list[Span]:
        out = []
        for pattern in self._compiled:
            group = "secret" if "secret" in pattern.groupindex else 0
            for m in pattern.finditer(text):
                start, end = m.span(group)
                if end > start and (self._validator is None or self._validator(text[start:end])):
                    out.append(Span(start, end, self.name))
        return normalise_spans(out)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self._spans(t) for t in texts]


def builtin_regex_policy(name: str) -> RegexPolicy:
    spec = BUILTIN_PATTERNS[name]
    return RegexPolicy(name, spec.patterns, spec.validator)
