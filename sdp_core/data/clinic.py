"""Clinic notes: seeded free-text visit notes with gold secret spans, a generator unlike CustomerSim.

Prose rather than dialog: each note is one visit written up in a handful of sentences (the opening sentence first,
the rest shuffled), by US, UK and German practices, with the formats each would use. Values come from Faker.
Gold labels: `name` (the patient, full or by surname), `doctor`, `hospital`, `mrn`, `national_id`, `phone`,
`email`, `address`, `date_of_birth`. A span covers the value only, never its cue ("MRN ", "DOB: ", "Dr. ").

The formats are deliberately not CustomerSim's (which are US phone numbers, `ddd-ddddd-dddd` order numbers and
10-character tracking numbers): record numbers such as `00123456`, `MRN-7788123`, `A12-99-331`, `KH482910`;
national IDs of seven countries; international and trunk-prefixed phone numbers; UK and German addresses beside
US ones; dates of birth in six formats.

Not secrets, and there to measure precision on: visit dates, durations, doses, vitals, lab values, years, counts
and ICD-10 codes.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from datetime import date
from typing import Callable

from faker import Faker

from sdp_core.data.records import Part, Record, Span, Splits

LOCALES = ("en_US", "en_GB", "de_DE")
LABELS = ("name", "doctor", "hospital", "mrn", "national_id", "phone", "email", "address", "date_of_birth")

@dataclass(frozen=True)
class Patient:
    """Who a note is about, and the Faker of the practice's locale."""

    fake: Faker
    locale: str
    title: str
    first: str
    last: str
    pronoun: str
    possessive: str


def _digits(fake: Faker, pattern: str) -> str:
    """`#` -> a digit, `?` -> an upper-case letter."""
    return fake.bothify(pattern, letters=string.ascii_uppercase)


# (cue, value pattern): the cue stays readable, the value is the secret.
MRN_FORMATS = (
    ("MRN ", "########"),
    ("", "MRN-#######"),
    ("record #", "?##-##-###"),
    ("MRN: ", "## ### ###"),
    ("hospital number ", "??######"),
    ("chart no. ", "####.####"),
)
NATIONAL_ID_FORMATS = (
    ("NI number ", "?? ## ## ## ?"),  # UK National Insurance number
    ("SIN ", "### ### ###"),  # Canadian Social Insurance Number
    ("DNI ", "########?"),  # Spanish national identity document
    ("codice fiscale ", "??????##?##?###?"),  # Italian tax code
    ("tax ID ", "## ### ### ###"),  # German Steuer-ID
    ("SSN ", "###-##-####"),  # US Social Security number
    ("BSN ", "#########"),  # Dutch citizen service number
)
PHONE_FORMATS = {
    "en_US": ("+1 ### ### ####", "(###) ###-####", "###.###.####"),
    "en_GB": ("+44 20 #### ####", "+44 (0)161 ### ####", "07700 ######", "0113 ### ####"),
    "de_DE": ("+49 30 #######", "+49 (0)89 ########", "(0####) ######", "030/#######"),
}
# Fixed ranges, not relative to today: the same seed gives the same notes on any day.
BIRTHS = (date(1930, 1, 1), date(2020, 12, 31))
VISITS = (date(2021, 1, 1), date(2024, 12, 31))
DOB_FORMATS = ("%m/%d/%Y", "%d.%m.%Y", "%Y-%m-%d", "%d %B %Y", "%B %d, %Y", "%d-%b-%Y")
DOB_CUES = ("DOB ", "DOB: ", "born ", "date of birth ", "D.O.B. ")
VISIT_DATE_FORMATS = ("%d %B %Y", "%B %d, %Y", "%d/%m/%Y")
HOSPITAL_FORMATS = {
    "en_US": ("{last} Memorial Hospital", "{city} Medical Center", "Mount {last} Hospital"),
    "en_GB": ("St {first}'s Hospital", "{city} General Hospital", "Royal {city} Infirmary"),
    "de_DE": ("Klinikum {city}", "St. {first}-Krankenhaus", "Universitätsklinikum {city}"),
}
ICD_CODES = (("type 2 diabetes", "E11.9"), ("hypertension", "I10"), ("asthma", "J45.909"),
             ("low back pain", "M54.5"), ("reflux", "K21.9"), ("anxiety", "F41.1"), ("hyperlipidaemia", "E78.5"))
DRUGS = ("metformin", "lisinopril", "atorvastatin", "omeprazole", "sertraline", "amlodipine", "ibuprofen")
SYMPTOMS = ("headaches", "a dry cough", "fatigue", "dizziness", "lower back pain", "poor sleep", "heartburn")


def _mrn(p: Patient) -> list[Part]:
    cue, pattern = p.fake.random_element(MRN_FORMATS)
    return [cue, (_digits(p.fake, pattern), "mrn")]


def _national_id(p: Patient) -> list[Part]:
    cue, pattern = p.fake.random_element(NATIONAL_ID_FORMATS)
    return [cue, (_digits(p.fake, pattern), "national_id")]


def _phone(p: Patient) -> list[Part]:
    return [(_digits(p.fake, p.fake.random_element(PHONE_FORMATS[p.locale])), "phone")]


TRANSLITERATION = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss"})


def _email(p: Patient) -> list[Part]:
    number = p.fake.random_int(1, 99)
    user = p.fake.random_element([f"{p.first}.{p.last}", f"{p.first[0]}{p.last}", f"{p.last}{number}"])
    user = re.sub(r"[^a-z0-9.]|\.(?=\.)", "", user.lower().translate(TRANSLITERATION))  # O'Neill, H.-Dieter
    return [(f"{user}@{p.fake.free_email_domain()}", "email")]


def _uk_address(fake: Faker) -> str:
    flat = f"Flat {fake.random_int(1, 40)}, " if fake.boolean(30) else ""
    return f"{flat}{fake.building_number()} {fake.street_name()}, {fake.city()} {fake.postcode()}"


ADDRESS_FORMATS: dict[str, Callable[[Faker], str]] = {
    "en_US": lambda fake: f"{fake.street_address()}, {fake.city()}, {fake.state_abbr()} {fake.zipcode()}",
    "en_GB": _uk_address,
    "de_DE": lambda fake: f"{fake.street_name()} {fake.random_int(1, 180)}, {fake.postcode()} {fake.city()}",
}


def _address(p: Patient) -> list[Part]:
    return [(ADDRESS_FORMATS[p.locale](p.fake), "address")]


def _date_of_birth(p: Patient) -> list[Part]:
    born = p.fake.date_between_dates(*BIRTHS)
    return [p.fake.random_element(DOB_CUES), (born.strftime(p.fake.random_element(DOB_FORMATS)), "date_of_birth")]


def _doctor(p: Patient) -> list[Part]:
    return ["Dr. ", (f"{p.fake.first_name()} {p.fake.last_name()}", "doctor")]


def _hospital(p: Patient) -> list[Part]:
    template = p.fake.random_element(HOSPITAL_FORMATS[p.locale])
    return [(template.format(last=p.fake.last_name(), first=p.fake.first_name(), city=p.fake.city()), "hospital")]


def _full_name(p: Patient) -> list[Part]:
    return [f"{p.title} ", (f"{p.first} {p.last}", "name")]


def _surname(p: Patient) -> list[Part]:
    return [f"{p.title} ", (p.last, "name")]


# Placeholders of the sentence templates: each renders to literal text and gold secrets.
FIELDS: dict[str, Callable[[Patient], list[Part]]] = {
    "patient": _full_name,
    "surname": _surname,
    "mrn": _mrn,
    "national_id": _national_id,
    "phone": _phone,
    "email": _email,
    "address": _address,
    "dob": _date_of_birth,
    "doctor": _doctor,
    "hospital": _hospital,
    "pronoun": lambda p: [p.pronoun],
    "Pronoun": lambda p: [p.pronoun.capitalize()],
    "possessive": lambda p: [p.possessive],
    "visit_date": lambda p: [p.fake.date_between_dates(*VISITS).strftime(p.fake.random_element(VISIT_DATE_FORMATS))],
    "days": lambda p: [str(p.fake.random_int(2, 14))],
    "weeks": lambda p: [str(p.fake.random_int(2, 12))],
    "symptom": lambda p: [p.fake.random_element(SYMPTOMS)],
    "drug": lambda p: [p.fake.random_element(DRUGS)],
    "dose": lambda p: [str(p.fake.random_element([5, 10, 20, 40, 250, 500, 850, 1000]))],
    "tablets": lambda p: [str(p.fake.random_int(1, 3))],
    "vitals": lambda p: [f"BP {p.fake.random_int(105, 165)}/{p.fake.random_int(60, 100)}, "
                         f"HR {p.fake.random_int(52, 110)}, temperature {p.fake.random_int(360, 389) / 10} °C, "
                         f"SpO2 {p.fake.random_int(92, 100)} %"],
    "labs": lambda p: [f"HbA1c {p.fake.random_int(50, 110) / 10} %, eGFR {p.fake.random_int(35, 110)}, "
                       f"LDL {p.fake.random_int(15, 55) / 10} mmol/L"],
    "body": lambda p: [f"Weight {p.fake.random_int(480, 1300) / 10} kg, height {p.fake.random_int(150, 198)} cm"],
    "diagnosis": lambda p: ["{} ({})".format(*p.fake.random_element(ICD_CODES))],
    "year": lambda p: [str(p.fake.random_int(2005, 2023))],
    "steps": lambda p: [f"{p.fake.random_int(2, 12)},{p.fake.random_int(0, 9)}00"],
}

OPENINGS = (
    "Seen on {visit_date}: {patient} ({mrn}, {dob}) attended {hospital} for a review with {doctor}.",
    "{patient}, {dob}, {mrn}, was seen by {doctor} at {hospital} on {visit_date}.",
    "Clinic letter from {doctor}, {hospital}, {visit_date}. Patient: {patient}, {mrn}, {dob}.",
    "{doctor} reviewed {patient} ({dob}) at {hospital} on {visit_date}; {mrn}.",
)
CONTACT = (
    "{Pronoun} can be reached on {phone} or at {email}.",
    "Contact details: {phone}, {email}.",
    "Home address: {address}.",
    "{surname} lives at {address} with {possessive} partner.",
    "{Pronoun} gave {possessive} {national_id} for the referral.",
    "Identity checked against {national_id}.",
    "Please send the results to {email} or call {phone}.",
)
CLINICAL = (
    "{Pronoun} reports {symptom} for {days} days.",
    "On examination: {vitals}.",
    "Results: {labs}.",
    "Current medication: {drug} {dose} mg, {tablets} tablets twice daily.",
    "Assessment: {diagnosis}, first diagnosed in {year}.",
    "{body}.",
    "{surname} walks about {steps} steps a day and stopped smoking in {year}.",
)
CLOSINGS = (
    "Plan: continue {drug} and review in {weeks} weeks.",
    "Follow-up with {doctor} in {weeks} weeks.",
    "Discussed with {surname}; repeat bloods in {weeks} weeks.",
)


class _NoteBuilder:
    """Appends rendered sentences to a note and records where each secret lands."""

    def __init__(self, patient: Patient) -> None:
        self.patient = patient
        self.text = ""
        self.spans: list[Span] = []

    def sentence(self, template: str) -> None:
        self.text += " " if self.text else ""
        for literal, field, _, _ in string.Formatter().parse(template):
            self.text += literal
            for part in FIELDS[field](self.patient) if field is not None else ():
                value, label = (part, None) if isinstance(part, str) else part
                if label is not None:
                    self.spans.append(Span(len(self.text), len(self.text) + len(value), label))
                self.text += value

    def record(self) -> Record:
        return Record(text=self.text, spans=tuple(self.spans))


def generate_note(fakes: dict[str, Faker], rng: random.Random) -> Record:
    """One visit note: an opening, two contact and two or three clinical sentences (shuffled), a closing."""
    locale = rng.choice(LOCALES)
    fake = fakes[locale]
    female = rng.random() < 0.5
    patient = Patient(
        fake=fake,
        locale=locale,
        title=rng.choice(["Mrs", "Ms"] if female else ["Mr"]),
        first=fake.first_name_female() if female else fake.first_name_male(),
        last=fake.last_name(),
        pronoun="she" if female else "he",
        possessive="her" if female else "his",
    )
    body = rng.sample(CONTACT, 2) + rng.sample(CLINICAL, rng.randint(2, 3))
    rng.shuffle(body)
    note = _NoteBuilder(patient)
    for template in [rng.choice(OPENINGS), *body, rng.choice(CLOSINGS)]:
        note.sentence(template)
    return note.record()


def generate_clinic(n: int, seed: int | str) -> list[Record]:
    """`n` notes, the same for the same seed."""
    fakes = {}
    for i, locale in enumerate(LOCALES):
        fakes[locale] = Faker(locale)
        fakes[locale].seed_instance(f"{seed}-{i}")
    rng = random.Random(f"clinic-{seed}")
    return [generate_note(fakes, rng) for _ in range(n)]


def clinic_splits(n_train: int = 10_000, n_validation: int = 1_000, n_test: int = 1_000, seed: int = 0) -> Splits:
    """Train / validation / test from independent seeds, so resizing one split leaves the others unchanged."""
    return Splits(
        train=generate_clinic(n_train, seed * 3 + 0),
        validation=generate_clinic(n_validation, seed * 3 + 1),
        test=generate_clinic(n_test, seed * 3 + 2),
    )
