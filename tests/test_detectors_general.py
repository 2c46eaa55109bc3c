"""The generic `identifier` regex, the `general` policy, and which policy a trial gets by default."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from benchmarks.detect_real import generate_accounts
from sdp_core.config import DataConfig, DetectorConfig, default_policy
from sdp_core.config.loading import load_trial_config
from sdp_core.config.trial import TrialConfig
from sdp_core.data.business import generate_business
from sdp_core.data.clinic import MRN_FORMATS, NATIONAL_ID_FORMATS, PHONE_FORMATS, generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.detectors import evaluate, get_policy
from sdp_core.detectors.identifiers import NATIONAL_ID_MODULES, is_national_id
from sdp_core.detectors.names import ROLE_CUES, role_cues
from sdp_core.detectors.registry import GENERAL_POLICY

STRUCTURED = ("mrn", "national_id", "phone", "email", "address", "date_of_birth")


def found(text: str) -> list[str]:
    [spans] = get_policy("identifier").detect([text])
    return [text[s.start : s.end] for s in spans]


def shape(value: str) -> str:
    """Digits as `#`, capitals as `?`: a value's format, comparable with a generator pattern."""
    return re.sub(r"[A-Z]", "?", re.sub(r"\d", "#", value))


@pytest.fixture(scope="module")
def notes():
    return generate_clinic(600, seed=11)


@pytest.fixture(scope="module")
def identifier_eval(notes):
    return evaluate(notes, get_policy("identifier").detect([n.text for n in notes]))


@pytest.mark.parametrize("label", STRUCTURED)
def test_identifier_masks_every_structured_clinic_secret(identifier_eval, label):
    lr = identifier_eval.per_label[label]
    assert lr.secrets.n > 100
    assert lr.secrets.k == lr.secrets.n, label
    assert lr.tokens.k == lr.tokens.n, label


@pytest.mark.parametrize(("label", "patterns"), [
    ("mrn", [p for _, p in MRN_FORMATS]),
    ("national_id", [p for _, p in NATIONAL_ID_FORMATS]),
    ("phone", [p for formats in PHONE_FORMATS.values() for p in formats]),
])
def test_every_format_is_emitted(notes, label, patterns):
    """The notes above hold every format of the generator, so the recall test covers each one."""
    emitted = {shape(v) for n in notes for s, v in zip(n.spans, n.secrets()) if s.label == label}
    assert emitted == {shape(p) for p in patterns}


def test_identifier_precision_on_clinic_notes(identifier_eval):
    """Doses, vitals, lab values, counts, years, visit dates and ICD-10 codes in the notes stay unflagged."""
    assert identifier_eval.precision > 0.97


@pytest.mark.parametrize(("text", "secret"), [
    ("Patient's NHS number is 943 476 5919.", "943 476 5919"),
    ("Reach her at 01 42 68 53 00 (home).", "01 42 68 53 00"),
    ("Passport C01X00T47 was checked.", "C01X00T47"),
    ("IBAN DE89 3704 0044 0532 0130 00 for refunds.", "DE89 3704 0044 0532 0130 00"),
    ("AHV number 756.1234.5678.97 on file.", "756.1234.5678.97"),
    ("CPF 123.456.789-09 given.", "123.456.789-09"),
    ("Driver licence S530-4128-7193.", "S530-4128-7193"),
    ("Call +61 2 9876 5432 today.", "+61 2 9876 5432"),
    ("Fax: 1-800-555-0199.", "1-800-555-0199"),
    ("Case ref 2023/004512.", "2023/004512"),
    ("Lives at Apt 5B, 300 East 57th Street.", "Apt 5B, 300 East 57th Street"),
    ("Praxis: Kaiserring 5, 68161 Mannheim.", "Kaiserring 5, 68161 Mannheim"),
    ("Your tracking number is FH6F6GMMF4.", "FH6F6GMMF4"),
])
def test_identifier_formats_beyond_the_generators(text, secret):
    assert secret in found(text)


PROSE = [
    "She took 2 tablets twice a day for 3 days and felt better after 48 hours.",
    "BP 120/80 mmHg, HR 72, temperature 37.2 °C, SpO2 97 %, weight 82.5 kg, height 176 cm.",
    "In 2019 she moved to the coast; between 2019 and 2021 she worked nights, and the 2019-2020 season was hard.",
    "He walks about 10,000 steps a day and has lost 3.5 kg since March.",
    "Metformin 500 mg, increasing to 500-1000 mg daily over 4-6 weeks; vitamin B12 and vitamin D3 added.",
    "HbA1c 7.4 % (was 8.1 % in 2022); LDL 3.1 mmol/L; eGFR 74 mL/min/1.73m2; platelets 250 x10^9/L.",
    "Assessment: type 2 diabetes (E11.9), asthma (J45.909) and hypertension (I10); COVID-19 in 2021.",
    "MMSE 28/30, PHQ-9 score 12, GAD-7 score 8; follow up in 6 weeks at 10:30 am on 12/05/2024.",
    "The trial enrolled 1,250 patients aged 18-65; p < 0.001, 95 % CI 1.2-3.4, NNT 14.",
    "Pi is 3.14159, the dose was 0.00125 mg/kg, and the bill came to $1,250.00 in total.",
    "Chapter 11 of version 2.1.3 covers room 12 on floor 3, page 123, line 45.",
    "Infusion at 150 mL/h for 24 hours, then 1.5-2.0 L over 8.5 h; 3 x 500 mg doses; 500mg at night.",
    "She was treated in the 1990s and again in mid-2020, on 12 May and 3 June. During 3 weeks she rested.",
    "G6PD deficiency, HLA-B27 positive, CYP2D6 poor metaboliser, SARS-CoV-2 negative, T2DM for 10 years.",
    "Scores fell from 24 to 18 over 2 years; 3 of 5 siblings are affected; 1 in 250 carriers.",
]


@pytest.mark.parametrize("text", PROSE)
def test_identifier_leaves_ordinary_numbers(text):
    assert found(text) == []


def test_general_is_identifiers_cards_usernames_facilities_names_and_addresses():
    general = get_policy("general")
    assert general.key == get_policy(GENERAL_POLICY).key
    members = {m.name for m in general.members}
    assert members == {"identifier", "library_id", "credit_card", "username", "facility", "person_name",
                       "address_tagger"}
    assert members <= {m.name for m in get_policy("conservative").members}  # π_c flags a superset of `general`


def general_found(text: str) -> list[str]:
    [spans] = get_policy("general").detect([text])
    return [text[s.start : s.end] for s in spans]


@pytest.mark.parametrize(("text", "secret"), [
    # usernames: a handle after `@`, or after a user / login cue
    ("Thanks to @octocat for the fix.", "octocat"),
    ("Reported by Corey Girard (gh: @coreygirard).", "coreygirard"),
    ("Login: j.doe42 (last seen Monday)", "j.doe42"),
    ("user: mkowalski", "mkowalski"),
    ("Her username=anna_k-1987 was locked.", "anna_k-1987"),
    ("Account handle: payroll.admin", "payroll.admin"),
    # card numbers, grouped or not, of several lengths and brands (all pass the Luhn check)
    ("Card 4111 1111 1111 1111 was declined.", "4111 1111 1111 1111"),
    ("Charge 5500-0055-5555-5559 today.", "5500-0055-5555-5559"),
    ("Amex 3782 822463 10005 on file.", "3782 822463 10005"),
    ("Visa 4012888888881881.", "4012888888881881"),
    ("Card number 6011000990139424, exp 04/27.", "6011000990139424"),
    # names the NER model does not know, from what the text says
    ("Copyright (c) 1995-2017 Jean-loup Gailly and Mark Adler", "Jean-loup Gailly"),
    ("Copyright (c) 1995-2017 Jean-loup Gailly and Mark Adler", "Mark Adler"),
    ("Maintainer-email: Bernát Gábor <gaborjbernat@gmail.com>", "Bernát Gábor"),
    ("- abdul rawoof <abdul@example.org>", "abdul rawoof"),
    ("Discussed with Mr O'Neill today.", "O'Neill"),
    ("Dear Siobhán, thank you.", "Siobhán"),
    ("SYS: What is your full name?\nUSR: Sure, Dalton Price.", "Dalton Price"),
    ("Seen at St Daniel's Hospital on Monday.", "St Daniel's Hospital"),
    # names of the development sets: capitals beyond Latin-1, a common or stop word beside a name, particles
    ("Lorena Špralja phoned to dispute a charge.", "Lorena Špralja"),
    ("Please update the file of Žigmund Juráš today.", "Žigmund Juráš"),
    ("Meeting with Galina Moor moved to 10:45.", "Galina Moor"),
    ("An Goossens phoned to dispute a charge of EUR 7776,34.", "An Goossens"),
    ("La transferencia a nombre de Claudia San Martín está retenida.", "Claudia San Martín"),
])
def test_general_finds_what_the_text_says(text, secret):
    assert any(secret in f for f in general_found(text)), general_found(text)


@pytest.mark.parametrize("text", [
    "Released 2024-03-12 as version 2.1.3; see bug #18423 and PEP 621.",
    "Project-URL: Documentation, https://numpy.org/doc",
    "Install with pip install scikit-learn or conda install -c conda-forge pandas.",
    "Copyright 2016 The Apache Software Foundation",
    "Author: Explosion",
    "@property\ndef name(self): return self._name",
    "Write to support@example.org for help.",  # an address, but no username inside it
    "USR: Hello, I would like to check my order.",
    "We met at Victoria Station, then at Grace Church.",
])
def test_general_leaves_dates_versions_products_and_organisations(text):
    found = general_found(text)
    assert all("@" in f for f in found), found  # at most the address itself


def person_names(text: str) -> list[str]:
    [spans] = get_policy("person_name").detect([text])
    return [text[s.start : s.end] for s in spans if s.label == "PERSON"]


@pytest.mark.parametrize(("text", "names"), [
    # where bank, HR and help-desk text puts people; the small NER model labels most of these ORG, GPE or DATE
    ("Ticket from Crystal Frank: login is locked after 3 attempts.", ["Crystal Frank"]),
    ("Payroll update for Krystal Farley (user: kfarley): new card from May.", ["Krystal Farley"]),
    ("Refund of $120.00 approved by Amber Padilla.", ["Amber Padilla"]),
    ("Message from Daniel Day: please call back.", ["Daniel Day"]),
    ("Call from Hayden Mclean regarding the declined card.", ["Hayden Mclean"]),
    ("Submitted by Drew Johnston on 2024-03-01.", ["Drew Johnston"]),
    ("Access was approved by Priya Natarajan and Li Wei today.", ["Priya Natarajan", "Li Wei"]),
    ("Incident escalated to Maria Gonzalez in Payroll.", ["Maria Gonzalez"]),
    ("cc: Jane Doe, Help Desk", ["Jane Doe"]),
    ("Employee: Sarah O'Connor\nDepartment: Finance", ["Sarah O'Connor"]),
    ("Assigned to: Oluwaseun Adeyemi", ["Oluwaseun Adeyemi"]),
    ("Thanks for your patience.\n\nKind regards,\nSiobhan Kelly", ["Siobhan Kelly"]),
    # departments, companies, products and times stand in the same places
    ("Ticket from Customer Service: login is locked.", []),
    ("Invoice sent to Accounts Payable on Friday.", []),
    ("The form must be approved by Friday.", []),
    ("Leave approved by Human Resources.", []),
    ("Ticket assigned to IT Support.", []),
    ("Message from Red Hat engineers about the patch.", []),
    ("Request from New York office.", []),
    ("Refund approved by the Finance Team.", []),
    ("Email from Google Cloud about billing.", []),
    ("Email from All Staff Mailing List.", []),
    ("Regards,\nThe Payroll Team", []),
])
def test_names_where_business_text_puts_people(text, names):
    assert person_names(text) == names


def test_general_policy_on_help_desk_notes():
    """Every name, username and card of the generated bank / HR notes, most of the names without a PERSON label."""
    records = generate_accounts(200, seed=5)
    ev = evaluate(records, get_policy("general").detect([r.text for r in records]))
    assert set(ev.per_label) == {"name", "username", "card"}
    for label, lr in ev.per_label.items():
        assert lr.secrets.value >= 0.99, (label, lr.secrets)
    assert ev.precision >= 0.9, ev.precision


def test_general_policy_on_clinic_notes(notes):
    sample = notes[:60]
    ev = evaluate(sample, get_policy("general").detect([n.text for n in sample]))
    for label, lr in ev.per_label.items():
        assert lr.secrets.value >= 0.95, (label, lr.secrets)
    assert ev.recall.value > 0.99


@pytest.mark.parametrize(("data", "policy"), [
    ({}, "customersim"),
    ({"source": "customersim"}, "customersim"),
    ({"source": "clinic"}, "general"),
    ({"source": "file", "path": "records.jsonl"}, "general"),
    ({"source": "hf", "hf_name": "wikitext-2-raw-v1"}, "general"),
    ({"source": "synthetic_classification"}, "general"),
])
def test_default_policy_follows_the_data_source(data, policy):
    assert TrialConfig.model_validate({"data": data}).detector.policy == policy
    assert default_policy(data.get("source", "customersim")) == policy


def test_an_explicit_policy_wins():
    clinic = {"source": "clinic"}
    assert TrialConfig.model_validate({"data": clinic, "detector": {"policy": "phone"}}).detector.policy == "phone"
    assert TrialConfig.model_validate({"detector": {"policy": "general"}}).detector.policy == "general"
    named = TrialConfig(data=DataConfig(**clinic), detector=DetectorConfig(policy="customersim"))
    assert named.detector.policy == "customersim"
    unnamed = TrialConfig(data=DataConfig(**clinic), detector=DetectorConfig(miss_rate=0.1))
    assert unnamed.detector.policy == "general" and unnamed.detector.miss_rate == 0.1
    assert load_trial_config(None, ["data.source=file", "data.path=x.jsonl"]).detector.policy == "general"
    cfg = load_trial_config(None, ["data.source=clinic", "detector.policy=conservative"])
    assert cfg.detector.policy == "conservative"
    assert TrialConfig.model_validate(cfg.model_dump(mode="json")) == cfg


CHANGELOG = ("pkg (1.2-3) unstable; urgency=medium\n\n  [ Tomás Pinheiro ]\n  * Fix the build (Closes: #1075123).\n\n"
             "  [ eliane sansonnens ]\n  * Add autopkgtest; thanks to Ellert Manfreðsdóttir for the review.\n\n"
             "  [ Debian ]\n  * Rebuild.\n\n -- Ellert Manfreðsdóttir <ellert@example.org>  Mon, 04 Mar 2024 10:11:12 +0100\n")


@pytest.mark.parametrize(("text", "names"), [
    # a block of changes credited to a person, in any case; one word is no such name
    (CHANGELOG, ["Tomás Pinheiro", "eliane sansonnens", "Ellert Manfreðsdóttir"]),
    # a lower-case or caseless sign-off name
    ("  * New upstream release.\n\n -- gregor herrmann <gregoa@example.org>  Mon, 04 Mar 2024 10:11:12 +0100",
     ["gregor herrmann"]),
    ("  * New upstream release.\n\n -- 莉 宗 <li@example.org>  Mon, 04 Mar 2024 10:11:12 +0100", ["莉 宗"]),
])
def test_names_of_changelog_structure(text, names):
    """Every occurrence of each name masked (a re-mention too: "thanks to Ellert ..." above the sign-off), and
    nothing but the names and the address."""
    [spans] = get_policy("person_name").detect([text])
    masked = {i for s in spans for i in range(s.start, s.end)}
    for name in names:
        at = [m.start() for m in re.finditer(re.escape(name), text)]
        assert at and all(all(i in masked for i in range(a, a + len(name)) if not text[i].isspace()) for a in at), name
    assert {text[s.start : s.end] for s in spans} <= set(names), [text[s.start : s.end] for s in spans]


@pytest.mark.parametrize("text", [
    "Ann Lee fixed it. -- Ann Lee <ann@example.org>",  # at the text's start
    "Thanks, Ann Lee", "Ann Leeds and Ann Lee's patch; O'Ann Lee, .Ann Lee, Ann Lee-Smith, _Ann Lee, Ann Lee2",
    "Ann Ann Ann and Ann Ann",  # no overlapping mentions
])
def test_a_structural_names_re_mentions_are_its_whole_word_occurrences(text):
    """Against the regex with the rule's word boundaries, the reference the `str.find` search replaces."""
    from sdp_core.data.records import Span
    from sdp_core.detectors.names import re_mentions

    value = "Ann Ann" if "Ann Ann" in text else "Ann Lee"
    start = text.find(value)
    expected = [Span(m.start(), m.end(), "PERSON")
                for m in re.finditer(rf"(?<![\w'’.-]){re.escape(value)}(?![\w'’-])", text)]
    assert sorted(re_mentions(text, [Span(start, start + len(value), "PERSON")])) == expected


def test_national_ids_are_checked_as_by_every_validator():
    """A value with three letters in a row goes to the codice fiscale's validator alone: on valid numbers of many
    countries (each also with a letter run before, after or in place of digits) and the tokens of clinic notes,
    `is_national_id` says what python-stdnum's validators of every module say."""
    reference = [importlib.import_module(f"stdnum.{name}") for name in NATIONAL_ID_MODULES]
    numbers = ["BCCFRC15M25E852P", "PRSGCB12M41L627J", "RSSMRA85T10A562S", "172023201312126", "77082414171",
               "214035797", "961111-5826", "39141777694", "18724467014", "181002A5841", "010815A263E", "11119631647",
               "138-73-1034", "278 018 460", "21403579864", "3720209085081", "756.2140.3579.85", "77082486885",
               "20-10017031-1"]  # Faker's numbers of Italy, France, Poland, the Netherlands, Sweden, Turkey, Brazil, ...
    values = [*numbers, *(f"ABC {n}" for n in numbers), *(f"{n} abc" for n in numbers),
              *(f"HRV{n}" for n in numbers), *(f"XYZ{n[3:]}" for n in numbers), "RSSMRAURTMLARSNL",
              *(m.group() for r in generate_clinic(10, 2) for m in re.finditer(r"[\w./-]+(?: [\w./-]+)?", r.text))]
    accepted = [v for v in values if any(module.is_valid(v) for module in reference)]
    assert [v for v in values if is_national_id(v)] == accepted
    assert sum(bool(re.search("[A-Za-z]{3}", v)) for v in accepted) >= 3  # the codici fiscali


def test_role_cues_are_found_as_by_scanning_every_position():
    """`role_cues` tries the cue pattern only at the last two word starts before a `by`, `from`, `for`, `to`, `of`
    or colon: on cues of every form (two words, a hyphen, tabs, capitals, a plural, a colon after spaces, one cue
    right after another, at a line's start), generated notes, dialogs and messages and the real texts, it finds
    what `ROLE_CUES.finditer` finds."""
    cues = ["approved by", "Approved\t by", "CANCELED by", "cancelled by", "tickets from", "e-mail from", "E-Mails  from",
            "emails from", "mail from", "heard from", "refunds for", "handed over to", "Handed \tover  to", "sent to",
            "on behalf of", "On\tbehalf  of", "cc:", "Bcc :", "attn:", "account holder:", "Account \t Holder :",
            "cardholder:", "card holder:", "from:", "To :", "customer:", "received from", "received by"]
    constructed = [f"{lead}{cue} Ann Lee{tail}" for cue in cues for lead in ("", "Note: ", "x\n", "(", "re-")
                   for tail in ("", ".", ", cc: Bo Li", " and sent to Bo Li")]
    constructed += [" ".join(cues), "\n".join(cues), "escalated to:\tAnn", "to: from: by Ann", "aon behalf of Ann"]
    real = [json.loads(line)["text"] for line in (Path(__file__).parent / "fixtures" / "realtext.jsonl").read_text().splitlines()]
    generated = [r.text for gen in (generate_clinic(40, 3), generate_customersim(40, 3),
                                    generate_business(40, 3, "dev")) for r in gen]
    for text in [*constructed, *real, *generated]:
        assert [m.span() for m in role_cues(text)] == [m.span() for m in ROLE_CUES.finditer(text)], text
    # the second word start before a tail is needed: a cue of two words
    assert any(m.group().lower().startswith(("on", "handed", "e-", "account", "card ")) for t in constructed
               for m in ROLE_CUES.finditer(t))


MESSAGE = """From: Skip Montanaro <skip@pobox.com>
To: python-list@python.org, "Tim Peters" <tim.one@home.com>
Cc: 0301234567@t-online.de
Message-ID: <15090.61304.110929.45684@beluga.mojam.com>
In-Reply-To: <LNBBLJKPBEHFEDALKOLCCEBKLHAA.tim.one@home.com>
References: <3B5A1C2D.8E0F@example.org>
\t<20010723.104512.1234567@mail.example.net>
Subject: Re: sorting

>>>>> "Tim" == Tim Peters <tim.one@home.com> writes:
In article <15090.61304.110929.45684@beluga.mojam.com> you wrote:
Call me on +49 30 1234567 or write to ann.lee@example.com.
"""


def test_a_messages_addresses_are_emails_and_its_message_ids_no_secret():
    """Against the standard library's own reading of the message (`email.parser`, `email.utils.getaddresses`):
    every address of From, To and Cc, and every address in the body, is a span labelled `email` by `general`, no
    number inside an address is a phone of its own, and no span touches a Message-ID of the Message-ID,
    In-Reply-To and References headers or of the body's "In article <...>"."""
    import email.parser
    import email.utils

    message = email.parser.Parser().parsestr(MESSAGE)
    addresses = [a for _, a in email.utils.getaddresses(message.get_all("From") + message.get_all("To")
                                                        + message.get_all("Cc"))] + ["ann.lee@example.com"]
    ids = [i for h in ("Message-ID", "In-Reply-To", "References") for i in re.findall(r"<([^<>]+)>", message[h])]
    assert len(addresses) == 5 and len(ids) == 4
    [spans] = get_policy("general").detect([MESSAGE])
    emails = {MESSAGE[s.start:s.end] for s in spans if s.label == "email"}
    assert emails == set(addresses)
    phones = [MESSAGE[s.start:s.end] for s in spans if s.label == "phone"]
    assert phones == ["+49 30 1234567"]
    for i in ids:
        for at in (m.start() for m in re.finditer(re.escape(i), MESSAGE)):
            assert not [s for s in spans if s.start < at + len(i) and at < s.end], i
