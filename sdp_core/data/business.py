"""Business messages of banks, HR departments and support desks, in many locales and four languages, with gold
secret spans: evaluation sets for the detectors, in two splits that share no template and no Faker locale.

- `dev`: the set detection rules are written against (`generate_business(n, seed, "dev")`);
- `heldout`: the set they are reported on and never tuned on (`"heldout"`): other templates, other locales
  (de_DE fr_FR es_ES it_IT pl_PL cs_CZ tr_TR sv_SE en_IN pt_BR nl_NL), other phrasing;
- `extra`: more development data: the `dev` templates about people of locales neither other split has (en_AU
  en_CA en_NZ en_IE en_BD en_MS zu_ZA es_MX es_CL fr_CA fr_BE id_ID lv_LV lt_LT et_EE is_IS ga_IE de_LI de_LU),
  to check that a rule written on `dev` holds beyond its locales before the held-out set is measured.

Each split has English messages written by international teams about people of its locales, and messages in
French, Spanish, Italian and German. Values come from Faker in the person's locale: names (hyphens, particles,
accents, two surnames), phone numbers, addresses, IBANs, national identity numbers and VAT numbers as that
locale's Faker provider writes them (CPF, PESEL, NIR, codice fiscale, BSN, rodné číslo, personnummer, Aadhaar,
...), dates of birth in the locale's order. Gold labels are the secret *types* of `sdp_core.detectors.types`:

- direct identifiers (what `general` claims): `name`, `email`, `phone`, `address`, `username`, `iban`,
  `national_id`, `vat`, `card`, `date_of_birth`;
- what only the `strict` policy (HIPAA Safe Harbor) claims: `date` (a date tied to the person), `city`,
  `organisation` (the person's employer), `card_fragment` ("card ending 4821").

Not secrets, and there to measure precision on: amounts, times, version numbers, ticket numbers, percentages,
counts, years, time-zone offsets.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from datetime import date
from typing import Callable, Literal

from faker import Faker

from sdp_core.data.records import Part, Record, Span

Split = Literal["dev", "heldout", "extra"]
Language = Literal["en", "fr", "es", "it", "de"]

# Locales (Faker) by split and language of the text: English text is about people of every locale of the split.
LOCALES: dict[Split, dict[Language, tuple[str, ...]]] = {
    "dev": {"en": ("da_DK", "fi_FI", "hu_HU", "ro_RO", "pt_PT", "nl_BE", "hr_HR", "sk_SK", "sl_SI", "no_NO",
                   "en_GB", "es_AR", "es_CO", "fr_CH", "de_AT", "de_CH"),
            "fr": ("fr_CH",), "es": ("es_AR", "es_CO"), "it": ("it_CH",), "de": ("de_AT", "de_CH")},
    "heldout": {"en": ("de_DE", "fr_FR", "es_ES", "it_IT", "pl_PL", "cs_CZ", "tr_TR", "sv_SE", "en_IN", "pt_BR",
                       "nl_NL"),
                "fr": ("fr_FR",), "es": ("es_ES",), "it": ("it_IT",), "de": ("de_DE",)},
    "extra": {"en": ("en_AU", "en_CA", "en_NZ", "en_IE", "en_BD", "en_MS", "zu_ZA", "es_MX", "es_CL", "fr_CA",
                     "id_ID", "lv_LV", "lt_LT", "et_EE", "is_IS", "ga_IE"),
              "fr": ("fr_CA", "fr_BE"), "es": ("es_MX", "es_CL"), "it": ("it_CH",), "de": ("de_LI", "de_LU")},
}
# it_CH has no Italian address or name provider of its own: its people are it_IT's, its places Swiss.
NAME_LOCALE = {"it_CH": "it_IT"}
# Locales whose Faker address is that country's format (others write US-style addresses).
ADDRESS_LOCALES = frozenset(
    "da_DK fi_FI hu_HU ro_RO pt_PT nl_BE hr_HR sk_SK sl_SI no_NO en_GB es_AR es_CO fr_CH de_AT de_CH de_DE fr_FR "
    "es_ES it_IT pl_PL cs_CZ sv_SE en_IN pt_BR nl_NL en_AU en_CA en_NZ en_IE en_BD en_MS zu_ZA es_MX es_CL fr_CA id_ID".split()
)
# The national identity number each locale's Faker writes (a method name), where it has one.
NATIONAL_IDS = {
    "fr_FR": "ssn", "es_ES": "nif", "it_IT": "ssn", "pl_PL": "pesel", "cs_CZ": "birth_number", "tr_TR": "ssn",
    "sv_SE": "ssn", "en_IN": "aadhaar_id", "pt_BR": "cpf", "nl_NL": "ssn", "fi_FI": "ssn", "ro_RO": "ssn",
    "nl_BE": "ssn", "fr_CH": "ssn", "de_CH": "ssn", "de_AT": "ssn", "no_NO": "ssn", "en_GB": "ssn",
    "es_AR": "ssn", "sk_SK": "birth_number", "hu_HU": "ssn", "hr_HR": "ssn",
}  # fmt: skip
VAT_LOCALES = frozenset("de_DE fr_FR es_ES it_IT pl_PL cs_CZ sv_SE nl_NL fi_FI hu_HU pt_PT nl_BE fr_CH de_CH de_AT "
                        "en_GB sk_SK sl_SI hr_HR es_AR".split())
DOB_FORMATS = {"en": ("%d %B %Y", "%d/%m/%Y", "%Y-%m-%d"), "fr": ("%d/%m/%Y",), "es": ("%d/%m/%Y",),
               "it": ("%d/%m/%Y", "%d.%m.%Y"), "de": ("%d.%m.%Y",)}
BIRTHS = (date(1940, 1, 1), date(2005, 12, 31))
EVENTS = (date(2022, 1, 1), date(2025, 12, 31))

@dataclass(frozen=True)
class Person:
    """Who a message is about: their locale's Faker (for their numbers and places) and their name."""

    fake: Faker
    locale: str
    language: Language
    first: str
    last: str


def _grouped_card(fake: Faker) -> str:
    number = fake.credit_card_number()
    return fake.random_element([number, " ".join(number[i:i + 4] for i in range(0, len(number), 4))])


def _address(p: Person) -> str:
    return ", ".join(line.strip(" ,") for line in p.fake.address().splitlines() if line.strip(" ,"))


def _national_id(p: Person) -> str:
    return str(getattr(p.fake, NATIONAL_IDS[p.locale])())


def _date(p: Person, span: tuple[date, date]) -> str:
    return p.fake.date_between_dates(*span).strftime(p.fake.random_element(DOB_FORMATS[p.language]))


# Placeholders: each renders to (value, gold label) or to plain text.
VALUES: dict[str, Callable[[Person], Part]] = {
    "name": lambda p: (f"{p.first} {p.last}", "name"),
    "first": lambda p: (p.first, "name"),
    "last": lambda p: (p.last, "name"),
    "email": lambda p: (p.fake.email(), "email"),
    "phone": lambda p: (p.fake.phone_number(), "phone"),
    "address": lambda p: (_address(p), "address"),
    "username": lambda p: (p.fake.user_name(), "username"),
    "iban": lambda p: (p.fake.iban(), "iban"),
    "national_id": lambda p: (_national_id(p), "national_id"),
    "vat": lambda p: (p.fake.vat_id(), "vat"),
    "card": lambda p: (_grouped_card(p.fake), "card"),
    "dob": lambda p: (_date(p, BIRTHS), "date_of_birth"),
    "date": lambda p: (_date(p, EVENTS), "date"),
    "city": lambda p: (p.fake.city(), "city"),
    "company": lambda p: (p.fake.company(), "organisation"),
    "last4": lambda p: (p.fake.numerify("####"), "card_fragment"),
    # not secrets
    "amount": lambda p: f"{p.fake.random_int(20, 9000)},{p.fake.random_int(0, 99):02d}",
    "time": lambda p: f"{p.fake.random_int(7, 19)}:{p.fake.random_element(['00', '15', '30', '45'])}",
    "version": lambda p: f"{p.fake.random_int(1, 12)}.{p.fake.random_int(0, 20)}.{p.fake.random_int(0, 9)}",
    "ticket": lambda p: p.fake.numerify("#####"),
    "percent": lambda p: str(p.fake.random_int(1, 99)),
    "count": lambda p: str(p.fake.random_int(2, 40)),
    "year": lambda p: str(p.fake.random_int(2015, 2025)),
    "offset": lambda p: p.fake.random_element(["+0100", "+0200", "-0500", "+0530", "+0000"]),
}
# What a template needs of the person's locale to be rendered.
NEEDS = {"address": ADDRESS_LOCALES, "national_id": frozenset(NATIONAL_IDS), "vat": VAT_LOCALES}

TEMPLATES: dict[Split, dict[Language, tuple[str, ...]]] = {
    "dev": {
        "en": (
            "{name} phoned to dispute a charge of EUR {amount}; call back on {phone} before {time}.",
            "Please update the file of {name}: new address {address}.",
            "{name} ({username}) cannot open the app since version {version}; ticket #{ticket}.",
            "Transfer to {iban} for {name} is on hold until compliance clears it.",
            "Onboarding: {name}, date of birth {dob}, ID {national_id}, starts at {company} on {date}.",
            "Spoke with {first} today. {last} wants the statement sent to {email}.",
            "Invoice for {company}, VAT {vat}, was approved; {percent} % discount applies.",
            "{name} lost the card ending {last4} in {city} and asked for a replacement.",
            "New card {card} issued to {name}; the old one is cancelled.",
            "Meeting with {name} moved to {time} (server log stamped {offset}); {count} items on the agenda.",
            "Reminder: {name} from {city} is off until {date}.",
        ),
        "fr": (
            "Bonjour, {name} a appelé au sujet d'un prélèvement de {amount} EUR. Merci de rappeler au {phone}.",
            "Nouvelle adresse de {name} : {address}.",
            "Le virement vers {iban} au nom de {name} est bloqué.",
            "Dossier de {name}, né(e) le {dob}, numéro {national_id}.",
        ),
        "es": (
            "Hola, {name} llamó por un cargo de {amount} EUR. Por favor, devolver la llamada al {phone}.",
            "Nueva dirección de {name}: {address}.",
            "La transferencia a {iban} a nombre de {name} está retenida.",
            "Expediente de {name}, nacido el {dob}, documento {national_id}.",
        ),
        "it": (
            "Buongiorno, {name} ha chiamato per un addebito di {amount} EUR. Richiamare al {phone}.",
            "Nuovo indirizzo di {name}: {address}.",
            "Il bonifico verso {iban} intestato a {name} è sospeso.",
            "Pratica di {name}, nato il {dob}, email {email}.",
        ),
        "de": (
            "Guten Tag, {name} hat wegen einer Abbuchung von {amount} EUR angerufen. Bitte unter {phone} zurückrufen.",
            "Neue Anschrift von {name}: {address}.",
            "Die Überweisung an {iban} für {name} ist angehalten.",
            "Akte {name}, geboren am {dob}, Kennung {national_id}.",
        ),
    },
    "heldout": {
        "en": (
            "{name} rang this morning about the direct debit; best number is {phone}.",
            "Hi all, {name} has relocated. Post goes to {address} from now on.",
            "Escalation: {name} ({username}) says the portal logs them out after {count} seconds.",
            "Salary for {name} should go to {iban} from next month.",
            "{first} {last} joined {company} on {date}; born {dob}; personal number {national_id}.",
            "I met {name} at the {city} office. She asked us to write to {email} instead.",
            "{company} sent their VAT ID {vat} with the signed order (release {version}).",
            "Customer reports card ending {last4} was swallowed by an ATM; {name} needs a new one.",
            "{name} paid {amount} EUR with {card} at {time}.",
            "Thanks {first}! {name} will review ticket {ticket} tomorrow; {percent}% done.",
            "Log: {name} signed in at {time} {offset}, {year} records exported.",
        ),
        "fr": (
            "{name} souhaite recevoir ses relevés à l'adresse {address}.",
            "Madame, Monsieur, veuillez verser le salaire de {name} sur le compte {iban}.",
            "{name} est joignable au {phone} ou par courriel à {email}.",
            "{name}, né le {dob} à {city}, numéro de sécurité sociale {national_id}.",
        ),
        "es": (
            "{name} quiere recibir la correspondencia en {address}.",
            "Por favor, abonen la nómina de {name} en la cuenta {iban}.",
            "Se puede contactar con {name} en el {phone} o en {email}.",
            "{name}, con fecha de nacimiento {dob}, NIF {national_id}.",
        ),
        "it": (
            "{name} desidera ricevere la posta in {address}.",
            "Si prega di accreditare lo stipendio di {name} sul conto {iban}.",
            "{name} è raggiungibile al {phone} o via email a {email}.",
            "{name}, nato il {dob} a {city}, codice fiscale {national_id}.",
        ),
        "de": (
            "{name} möchte die Post künftig an {address} erhalten.",
            "Bitte das Gehalt von {name} auf das Konto {iban} überweisen.",
            "{name} ist unter {phone} oder per E-Mail an {email} erreichbar.",
            "{name}, geboren am {dob} in {city}, USt-IdNr. der Firma {vat}.",
        ),
    },
}


TEMPLATES["extra"] = TEMPLATES["dev"]  # the extra development data is phrased as dev, about other people


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def _render(template: str, person: Person) -> Record:
    text, spans = "", []
    for literal, field, _, _ in string.Formatter().parse(template):
        text += literal
        if field is None:
            continue
        part = VALUES[field](person)
        if isinstance(part, tuple):
            value, label = part
            spans.append(Span(len(text), len(text) + len(value), label))
            text += value
        else:
            text += part
    return Record(text, tuple(spans), meta={"locale": person.locale, "language": person.language})


def _ordered(fake: Faker) -> Faker:
    """`fake` with every list of words its providers draw from sorted: some build one from a set (it_IT's cities),
    in an order that changes with the process's hash seed, so a seed would not give the same messages in every
    process."""
    for provider in fake.providers:
        for name in {name for klass in type(provider).__mro__ for name in vars(klass)}:
            value = getattr(provider, name, None)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                setattr(provider, name, sorted(value))
    return fake


def _fakes(split: Split, seed: int | str) -> dict[str, Faker]:
    locales = sorted({loc for group in LOCALES[split].values() for loc in group} | set(NAME_LOCALE.values()))
    fakes = {}
    for i, loc in enumerate(locales):
        fakes[loc] = _ordered(Faker(loc))
        fakes[loc].seed_instance(f"{split}-{seed}-{i}")
    return fakes


def _person(fakes: dict[str, Faker], locale: str, language: Language) -> Person:
    names = fakes[NAME_LOCALE.get(locale, locale)]
    return Person(fakes[locale], locale, language, names.first_name(), names.last_name())


def generate_business(n: int, seed: int | str, split: Split = "heldout") -> list[Record]:
    """`n` messages of `split`, the same for the same seed: half in English about people of every locale of the
    split, the rest in French, Spanish, Italian and German; each record's `meta` names its locale and language."""
    fakes = _fakes(split, seed)
    rng = random.Random(f"business-{split}-{seed}")
    records: list[Record] = []
    while len(records) < n:
        language: Language = "en" if rng.random() < 0.5 else rng.choice(("fr", "es", "it", "de"))
        locale = rng.choice(LOCALES[split][language])
        usable = [t for t in TEMPLATES[split][language]
                  if all(locale in NEEDS.get(f, (locale,)) for f in _fields(t))]
        records.append(_render(rng.choice(usable), _person(fakes, locale, language)))
    return records
