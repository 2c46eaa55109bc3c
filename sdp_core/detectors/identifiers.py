"""Identifiers found and checked by the libraries made for them, labelled with their type (`library_id`).

- `phone`: `phonenumbers` (Google's libphonenumber) finds phone numbers in text: international numbers of every
  country, and national numbers as the default region writes them, at leniency POSSIBLE (the number has a length
  some number of its country can have; random test numbers are not assigned, so VALID would miss them), with
  seven digits or more and not written as a calendar date;
- `iban`: an IBAN whose country format and ISO 7064 mod 97-10 check digits `python-stdnum` accepts;
- `national_id`: a digit-bearing token that one of `python-stdnum`'s validators of national identity and tax
  numbers accepts (`NATIONAL_ID_MODULES`: CPF, PESEL, NIR, codice fiscale, DNI/NIE, BSN, personnummer, rodné
  číslo, T.C. Kimlik, Aadhaar, Steuer-IdNr, AHV, HETU, CPR, fødselsnummer, rijksregisternummer, SSN, SIN, CNP,
  OIB, ...), each with its check digits;
- `vat`: the value after a VAT cue (`VAT`, `USt-IdNr.`, `TVA`, `P. IVA`, `BTW`, `NIF`), whatever its format, or
  any token `stdnum.eu.vat` accepts;
- `email`: an address (`regex.EMAIL`); a number inside one (`0301234567@example.de`) is part of the address, not a
  phone or an identity number of its own.

Nothing inside a Message-ID is any of these (`regex.IDENTIFIER_CLEAR`: `15090.61304.110929.45684` is no phone).

The `identifier` shapes mask most of these already; this policy adds what shapes miss (national phone formats
such as `74/092-4466`, VAT numbers with a prefix) and the type of each value, which the `strict` policy, the
recall estimate and `sdp-sweep detect` report by.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Sequence

from sdp_core.data.records import Span
from sdp_core.detectors.base import Policy, normalise_spans, version_hash
from sdp_core.detectors.regex import EMAIL, IDENTIFIER_CLEAR

_CLEAR = tuple(re.compile(p) for p in IDENTIFIER_CLEAR)  # bug references, zone offsets, standards: as `identifier`

IDENTIFIERS_CODE_VERSION = "4"
PHONE_REGION = "DE"  # national numbers are read as this region writes them; international ones need no region
NATIONAL_ID_MODULES = (
    "br.cpf", "pl.pesel", "fr.nir", "it.codicefiscale", "es.dni", "es.nie", "nl.bsn", "se.personnummer", "cz.rc",
    "tr.tckimlik", "in_.aadhaar", "de.idnr", "ch.ssn", "fi.hetu", "dk.cpr", "no.fodselsnummer", "be.nn", "us.ssn",
    "ca.sin", "ar.cuit", "ro.cnp", "hr.oib", "pt.nif", "gb.nhs",
)  # fmt: skip
# Calendar dates and years (`2001-2003`, `1998, 2022`) are not identifiers, whatever a validator accepts.
_DATE = re.compile(r"\d{1,4}[-./]\d{1,2}[-./]\d{1,4}|(?:(?:19|20)\d\d(?:[ \t]*[-–,/][ \t]*|[ \t]+)?)+")
_EMAIL = re.compile(EMAIL)
# What no phone number holds, though the matcher joins it into one: a `#` (issue references: "#9494, #9456"), a tab,
# a line break or two spaces (columns: "8646  9.0.0045"), an ISO date ("[0.11.0] - 2022-10-12"), a version ("37.0.3").
_NOT_A_PHONE = re.compile(r"[#\t\n]|  |(?:19|20)\d\d-\d\d-\d\d|(?<![\d.])(?:0|[1-9]\d{0,2})\.(?:0|[1-9]\d?)\.\d")
# A number that continues a word is no phone: digits inside a commit hash (`a167bd6474522a709`) or a name (`Cyan4973`).
_LETTER = re.compile(r"[^\W\d_]")
_IBAN = re.compile(r"(?<![\w-])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,30}(?![\w-])")
# A token with six digits or more, none more than 24 characters after the one before (found lazily and without
# backtracking: the earliest next digit is always a valid choice, so the atomic group loses no match).
_TOKEN = re.compile(r"(?<![\w.+/-])(?=(?>[\w./ -]{0,24}?\d){6})[A-Za-z0-9](?:[A-Za-z0-9]|[./-](?=\w)|[ ](?=\d)){5,24}"
                    r"(?![\w-])")
_VAT = re.compile(r"(?:\bVAT(?:[ \t]+(?:ID|id|number|no\.?|reg\.?(?:[ \t]+no\.?)?))?|\bUSt-?Id(?:Nr)?\.?|\bTVA"
                  r"|\bP\.?[ \t]?IVA|\bBTW|\bMwSt-?Nr\.?|\bNIF|\bCIF|\bMOMS)[ \t]*[:#]?[ \t]*"
                  r"(?P<secret>[A-Za-z]{0,3}[ -]?\d[0-9A-Za-z]*(?:[ .-][0-9A-Za-z]+){0,4})")


# The only module of `NATIONAL_ID_MODULES` that accepts three letters in a row (an Italian codice fiscale starts with
# six). Every other one takes digits alone once its separators are removed, but for one or two letters in set places
# (an NIE's first and last, a DNI's last, a NIR's `2A`, a HETU's century sign and check letter, an `HR` or `PT`
# prefix), so none of them accepts a value with three letters in a row ("Hospital", "call 07700 733228").
LETTER_RUN_MODULES = ("it.codicefiscale",)
_LETTER_RUN = re.compile(r"[A-Za-z]{3}")


@functools.cache
def _validators(letter_run: bool = False) -> list:
    """python-stdnum's modules of `NATIONAL_ID_MODULES` (those of `LETTER_RUN_MODULES` when the value holds three
    letters in a row), imported once per process (a policy holds no module, so it pickles into the detection
    pool's workers)."""
    modules = []
    for name in (LETTER_RUN_MODULES if letter_run else NATIONAL_ID_MODULES):
        try:
            modules.append(importlib.import_module(f"stdnum.{name}"))
        except ImportError:  # a module a newer python-stdnum renamed: the others still check
            continue
    return modules


def is_national_id(value: str) -> bool:
    """Whether one of the validators of `NATIONAL_ID_MODULES` accepts `value`."""
    return any(module.is_valid(value) for module in _validators(bool(_LETTER_RUN.search(value))))


class LibraryIdentifierPolicy(Policy):
    """Phones (phonenumbers), IBANs, national identity and VAT numbers (python-stdnum), email addresses, labelled by
    type."""

    name = "library_id"

    def __init__(self, phone_region: str = PHONE_REGION):
        import phonenumbers
        import stdnum

        self.phone_region = phone_region
        self.version = version_hash(IDENTIFIERS_CODE_VERSION, phone_region, phonenumbers.__version__,
                                    stdnum.__version__, NATIONAL_ID_MODULES, _EMAIL.pattern, _IBAN.pattern, _TOKEN.pattern,
                                    _VAT.pattern, *(p.pattern for p in _CLEAR))

    def _spans(self, text: str) -> list[Span]:
        from phonenumbers import Leniency, PhoneNumberMatcher
        from stdnum import iban
        from stdnum.eu import vat

        emails = [Span(*m.span(), "email") for m in _EMAIL.finditer(text)] if "@" in text else []
        digits = sum(c.isdigit() for c in text)
        if digits < 6:
            return self._clear(text, emails)
        # seven digits at least: a short number (emergency, service codes) is no one's, and the matcher reads times
        # and amounts as short numbers
        out = [Span(m.start, m.end, "phone")
               for m in (PhoneNumberMatcher(text, self.phone_region, leniency=Leniency.POSSIBLE) if digits >= 7 else ())
               if sum(c.isdigit() for c in m.raw_string) >= 7 and not _DATE.fullmatch(m.raw_string)
               and not _NOT_A_PHONE.search(m.raw_string)
               and not (m.start and _LETTER.match(text, m.start - 1)) and not _LETTER.match(text, m.end)]
        out += [Span(*m.span(), "iban") for m in _IBAN.finditer(text) if iban.is_valid(m.group())]
        out += [Span(*m.span("secret"), "vat") for m in _VAT.finditer(text)]
        for m in _TOKEN.finditer(text):
            value = m.group().strip()
            # every number checked holds 8 to 16 letters and digits (a Dutch BSN of 8 digits is padded to 9; a
            # shorter one padded would pass one check in eleven by chance)
            if not 8 <= sum(c.isalnum() for c in value) <= 16 or _DATE.fullmatch(value):
                continue
            if is_national_id(value):
                out.append(Span(m.start(), m.start() + len(value), "national_id"))
            elif value[:2].isalpha() and vat.is_valid(value):  # an EU VAT number starts with its country
                out.append(Span(m.start(), m.start() + len(value), "vat"))
        out = [s for s in out if not any(e.start <= s.start and s.end <= e.end for e in emails)]
        return self._clear(text, emails + out)

    @staticmethod
    def _clear(text: str, spans: list[Span]) -> list[Span]:
        """`spans` but those inside a bug reference, zone offset, standard or Message-ID."""
        if not spans:
            return []
        clear = [m.span() for pattern in _CLEAR for m in pattern.finditer(text)]
        return normalise_spans(s for s in spans if not any(a <= s.start and s.end <= b for a, b in clear))

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self._spans(t) for t in texts]
