"""Regex policies, the registry, unions and bad input (no spaCy model is loaded here)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from sdp_core.config import DetectorConfig
from sdp_core.data.clinic import generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Span
from sdp_core.detectors import BUILTIN_PATTERNS, RegexPolicy, UnionPolicy, get_policy
from sdp_core.detectors.regex import anchored_matches, luhn_valid
from sdp_core.errors import UserError


def found(policy_name: str, text: str, config: DetectorConfig | None = None) -> list[str]:
    [spans] = get_policy(policy_name, config).detect([text])
    return [text[s.start : s.end] for s in spans]


POSITIVE = {
    "digits": [("Born in 1987, room 4.", ["1987", "4"])],
    "phone": [
        ("Call (555) 123-4567 now", ["(555) 123-4567"]),
        ("It is 781-565-9387.", ["781-565-9387"]),
        ("dial 555.123.4567", ["555.123.4567"]),
        ("or +1-555-123-4567x123 today", ["+1-555-123-4567x123"]),
    ],
    "email": [("Write to jane.doe+x@mail.example.co.uk.", ["jane.doe+x@mail.example.co.uk"])],
    "ssn": [("SSN 123-45-6789 and 123 45 6789", ["123-45-6789", "123 45 6789"])],
    "credit_card": [("card 4111 1111 1111 1111 ok", ["4111 1111 1111 1111"]), ("4012888888881881", ["4012888888881881"])],
    "order_number": [("Sure, 535-13933-2871.", ["535-13933-2871"])],
    "tracking_number": [
        ("Your tracking number is FH6F6GMMF4.", ["FH6F6GMMF4"]),
        ("parcel 12345ABCDE arrives", ["12345ABCDE"]),
        # all letters: only recognised after "tracking number"
        ("tracking number: QWERTYUIOP", ["QWERTYUIOP"]),
    ],
    "id": [("My ID is 341752", ["341752"]), ("account 5551234567", ["5551234567"])],
    "address": [
        ("USR: Yea sure, 2241 Fitzgerald Viaduct Brownview, OK 28304.", ["2241 Fitzgerald Viaduct Brownview, OK 28304"]),
        ("It is 1965 Kelly Field Apt. 094, Jonesberg, FM 20102.", ["1965 Kelly Field Apt. 094, Jonesberg, FM 20102"]),
        ("at 3245 Vang Coves, Chelseaborough, VT 39382", ["3245 Vang Coves, Chelseaborough, VT 39382"]),
        ("I live at 12 Baker Street. Then we met.", ["12 Baker Street"]),
        ("ship to 100 Main Street Lake Village, OK 12345", ["100 Main Street Lake Village, OK 12345"]),
        ("mail PO Box 1234, Springfield, IL 62701", ["PO Box 1234, Springfield, IL 62701"]),
        ("to PSC 1234, Box 5678 APO AA 12345", ["PSC 1234, Box 5678 APO AA 12345"]),
    ],
    "identifier": [
        ("MRN 00123456, DOB: 14.03.1962.", ["00123456", "14.03.1962"]),
        ("record #A12-99-331 and MRN-7788123", ["A12-99-331", "MRN-7788123", "7788123"]),
        ("NI number QQ 12 34 56 C", ["QQ 12 34 56 C", "12 34 56"]),
        ("call +44 (0)161 496 0123", ["+44 (0)161 496 0123", "161 496 0123"]),
        ("at Hauptstraße 12, 10115 Berlin.", ["Hauptstraße 12, 10115 Berlin", "10115"]),
        ("acct 12.03.2024.77 ref 2023/004512", ["12.03.2024.77", "2023/004512"]),
    ],
    "username": [
        ("ping @octocat or (gh: @annl)", ["octocat", "annl"]),
        ("Login: j.doe42, user=mk_1", ["j.doe42", "mk_1"]),
        ("@Switch01\n@A_Rog", ["Switch01", "A_Rog"]),
    ],
    "strict_extra": [
        ("seen 12/03/2024, on 3 March 2024 and le 5 mars; card ending 4821", ["12/03/2024", "3 March 2024",
                                                                              "5 mars", "4821"]),
        ("joined Nowak Sp. z o.o. and Müller GmbH", ["Nowak Sp. z o.o.", "Müller GmbH"]),
        ("Horváth és társa Kft., Dizdar j.d.o.o. or Morand Duroux Sàrl. paid", ["Horváth és társa Kft.",
                                                                              "Dizdar j.d.o.o.", "Morand Duroux Sàrl."]),
        ("Invoice for Ribeiro S/A; Ellingsen-Svendsen og Sønner.", ["Ribeiro S/A", "Ellingsen-Svendsen og Sønner"]),
        ("starts at Kennedy, Moore and Gregory on Monday", ["Kennedy, Moore and Gregory"]),
        ("paid Rossi e figli, Souza EIRELI; Bakker & Zonen", ["Rossi e figli", "Souza EIRELI", "Bakker & Zonen"]),
        ("see https://example.org/x from 192.168.1.20", ["https://example.org/x", "192.168.1.20"]),
    ],
    "facility": [
        ("at St Daniel's Hospital and Birdshire Medical Center", ["St Daniel's Hospital", "Birdshire Medical Center"]),
        ("im Klinikum Osterode am Harz, St. Hans-Rudolf-Krankenhaus", ["Klinikum Osterode am Harz",
                                                                      "St. Hans-Rudolf-Krankenhaus"]),
    ],
}

NEGATIVE = {
    "digits": ["no numbers here"],
    "phone": ["order 604-87647-5938", "version 1.2.3", "12-345-6789", "5551234567"],
    "email": ["user at example dot com", "@handle"],
    "ssn": ["000-12-3456", "666-12-3456", "123-00-4567", "123-45 6789", "1123-45-6789"],
    "credit_card": ["4111 1111 1111 1112", "1234 5678"],
    "order_number": ["781-565-9387", "1604-87647-5938"],
    "tracking_number": ["UNIVERSITY", "INCREDIBLE news", "1234567890", "ABCDE12345X", "abcde12345", "FH6F6-GMMF4"],
    "id": ["pi is 3.141592", "12345", "1,234,567 people", "A1234567"],
    "address": ["I have 3 big dogs", "We had 12 Park rangers", "Call 555-123-4567"],
    "identifier": ["2 tablets for 3 days", "BP 120/80 in 2019", "10,000 steps", "500-1000 mg", "E11.9", "500mg",
                   "released 2024-03-12", "am 12.03.2024", "see bug #18423, issue 18424, PR #18425, GH-18426",
                   "https://github.com/a/b/issues/18427"],
    "username": ["mail ann@example.org", "@property\ndef f(self):", "@app.route('/')", "a @ b", "see @foo.bar"],
    "facility": ["the hospital was closed", "Clinic letter from Dr. Lee", "Hospital"],
    "strict_extra": ["version 2.1.3 in 2024", "1,250 items at 14:30", "ending soon", "a.b.c.d",
                     "met Ann and Bo in Paris", "Sons and daughters", "the AGM of the Board",
                     "Call ME now", "a Q&A with AT&T"],
}


@pytest.mark.parametrize("name,text,expected", [(n, t, e) for n, cases in POSITIVE.items() for t, e in cases])
def test_regex_positive(name, text, expected):
    assert found(name, text) == expected


@pytest.mark.parametrize("name,text", [(n, t) for n, texts in NEGATIVE.items() for t in texts])
def test_regex_negative(name, text):
    assert found(name, text) == []


def test_every_builtin_has_examples():
    assert set(POSITIVE) == set(NEGATIVE) == set(BUILTIN_PATTERNS)


def test_luhn():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112") and not luhn_valid("123")


def test_spans_are_labelled_with_the_policy_name_and_sorted():
    [spans] = get_policy("phone,order_number").detect(["a 535-13933-2871 b 781-565-9387"])
    assert [s.label for s in spans] == ["order_number", "phone"]
    assert spans == sorted(spans)


def test_secret_group_limits_the_span_to_the_secret():
    policy = RegexPolicy("my_id", [r"my ID is (?P<secret>\d+)"])
    [spans] = policy.detect(["Note: my ID is 341752."])
    assert spans == [Span(15, 21, "my_id")]


def test_user_patterns_resolve_by_name_and_join_unions():
    config = DetectorConfig(patterns={"employee": r"EMP-\d{4}"})
    assert found("employee", "badge EMP-0042 ok", config) == ["EMP-0042"]
    assert found("employee,phone", "EMP-0042 or 555-123-4567", config) == ["EMP-0042", "555-123-4567"]


def test_user_pattern_shadows_builtin():
    config = DetectorConfig(patterns={"phone": r"\+44 \d{4} \d{6}"})
    assert found("phone", "+44 2071 838750 or 555-123-4567", config) == ["+44 2071 838750"]


def test_union_keeps_overlaps_and_is_order_independent():
    a, b = get_policy("digits,order_number"), get_policy(" order_number , digits ")
    assert isinstance(a, UnionPolicy) and a.key == b.key
    [spans] = a.detect(["535-13933-2871"])
    assert Span(0, 14, "order_number") in spans and Span(0, 3, "digits") in spans  # overlaps kept


def test_nested_unions_flatten_and_duplicates_collapse():
    p = get_policy("phone,phone,digits")
    assert [m.name for m in p.members] == ["digits", "phone"]
    assert get_policy("phone").key == get_policy("phone,phone").key


def test_versions_follow_behaviour():
    a = get_policy("x", DetectorConfig(patterns={"x": r"\d+"}))
    b = get_policy("x", DetectorConfig(patterns={"x": r"\d{2,}"}))
    assert a.name == b.name and a.version != b.version
    assert get_policy("phone").version == get_policy("phone").version


def test_unknown_policy_is_a_user_error():
    with pytest.raises(UserError, match="unknown policy 'phonez'"):
        get_policy("phone,phonez")


def test_empty_union_member_is_a_user_error():
    with pytest.raises(UserError, match="empty name"):
        get_policy("phone,,digits")


def test_invalid_user_regex_is_a_user_error_even_when_unused():
    from sdp_core.config import parse_model

    with pytest.raises(UserError, match="invalid regex for policy 'broken'"):  # the config rejects it...
        parse_model(DetectorConfig, {"patterns": {"broken": "(unclosed"}})
    config = DetectorConfig.model_construct(patterns={"broken": "(unclosed"}, spacy_model="en_core_web_sm")
    with pytest.raises(UserError, match="invalid regex for policy 'broken'") as e:  # ...and so does the registry
        get_policy("phone", config)
    assert "\n" not in str(e.value)


def test_zero_width_matches_give_no_spans():
    assert found("empty", "abc", DetectorConfig(patterns={"empty": r"x*"})) == []


# Postal addresses of the development sets (business `dev` and `extra` splits), in carriers of their own: redaction
# leaves none of their characters.
ADDRESSES = [
    "Frenkova pot 6, 9519 Domžale",
    "Pri seči 1, 004 05 Kalša",
    "Taavetti Laitisen bulevardi 631, 60065 Kuopio",
    "J.C.Hronského 90, 900 58 Voderady",
    "boulevard de Bonvini 44, 6200 de Dardel-sur-Besençon",
    "Dg. 80 # 84-2, 683881, Contratación, Santander",
    "Aleea Tincuța Georgescu Nr. 28 Bl. 27  Sc. 89 Ap. 633, Sighisoara, 391778",
    "Gabriellelei 9, 5674, Quévy",
    "Av. La Rioja N° 63, Mar del Plata 7600, Buenos Aires",
    "8284 Hayden Dale Apt. 417, Lake Nicholas, MB M2L9K9",
    "03978 chemin Turcotte, Ferland, NU J7T 3E1",
    "Periférico Sur Peralta 686 Edif. 794 , Depto. 778, Vieja Polonia, GRO 16251",
    "Florencia Castillo 8 Dpto. 829, Los Andes, Región de Valparaíso",
    "Ruta 5 Norte, km 255",
    "31 Lahy Street H44 RH95 Caoimhin Ville",
    "Suite 488 793 Mariah Gully, Ballville, NSW, 2849",
    "Studio 70, House No. 181, West BorhanHat Highway, BandarGram, Tangail, 3560",
    "No. 9, Jalan 5/1, Kampung Baru Rahman, 50228 PJS9, Pahang",
    "Petőfi sándor utca 134., H-8532 Budapest",
    "Leitgebstr. 3, 8134 Linz",
    # shapes of locales no business split has (Faker's fr_DZ, ru_RU, uk_UA, mk_MK, el_GR, az_AZ, en_PH, en_US,
    # vi_VN), and written by hand: no postcode, a place first, Cyrillic and Greek street words, every country's
    # postcode shape
    "52 boulevard de Nouri Constantine, Ghardaïa",
    "10 rue Madi - Ghardaïa",
    "г. Апатиты, бул. Зеленый, д. 4/7, 837783",
    "проспект Виноградний, буд. 77, Рені, 50756",
    "Востаничка 3в, 13643 Струмица",
    "Λεωφ. Σαμοθράκης 166-051, 71018 Αγ. Νικόλαος",
    "Χρυσάφη 9, ΤΚ 625 08 Πάτρα",
    "Şirvan ş., Z.BÜNYADOV küçəsi, b. 9, m. 857",
    "Block 18 Lot 86 Moore Village Phase 6, Palali Street, Piat, 5721 Guimaras",
    "USS Jones, FPO AE 75806",
    "4/68 đường 14, Phường An Khê, Lai Châu",
    "3-9, Lorong Pantai Baharu 14Q, Bandar Sungai Long, 14073 USJ 50, Pulau Pinang",
    "Brīvības iela 12, LV-1010 Rīga",
    "Gedimino pr. 9, LT-01103 Vilnius",
    "Narva mnt 5, 10117 Tallinn",
    "Calle Mayor 12, Soria",
    "Av. Tiradentes 1200, 20000-000 Rio Branco",
]
ADDRESS_CARRIERS = ["Please update the file: new address {}.", "Ship it to {}, please.", "Her address ({}) changed.",
                    "She moved from {} to the city centre.", "{} is the new billing address."]


@pytest.mark.parametrize("address", ADDRESSES)
def test_identifier_masks_postal_addresses_of_many_countries(address):
    """Every character of the address masked, and no span that takes in its carrier's words."""
    text = ADDRESS_CARRIERS[ADDRESSES.index(address) % len(ADDRESS_CARRIERS)].format(address)
    [spans] = get_policy("identifier").detect([text])
    start, end = text.index(address), text.index(address) + len(address)
    masked = {i for s in spans for i in range(s.start, s.end)}
    assert all(i in masked for i in range(start, end) if not text[i].isspace()), [text[s.start : s.end] for s in spans]
    assert all(start <= s.start and s.end <= end for s in spans), [text[s.start : s.end] for s in spans]


@pytest.mark.parametrize(("text", "clear"), [
    ("Seen on November 27, 2024, MRN: 78 090 504.", "November"),
    ("Visit on 22 January 2000, ID 255226.", "January"),
    ("See issue 18424, PR #18425, GH-18426 and bug 1907, Paris office.", "PR"),
    # a postcode shape of letters and two digits is a pulse here; a court hearing, a parcel service are no streets
    ("On examination: BP 151/61, HR 86, afebrile.", "HR"),
    ("We have 3 court hearings, Monday and Tuesday.", "court"),
    ("Sent via DHL 3 times, Monday too.", "DHL"),
])
def test_dates_and_references_are_no_addresses(text, clear):
    """Nor are vitals, counts of things and a parcel service: none of these words is inside a span."""
    [spans] = get_policy("identifier").detect([text])
    at = text.index(clear)
    assert not any(s.start <= at < s.end for s in spans), [text[s.start : s.end] for s in spans]


def test_an_address_ends_at_its_sentence():
    """A place's first word may be abbreviated (`Αγ. Νικόλαος`), but a full stop after a place ends the address."""
    text = "Home address: Kargestr. 115, 91410 Aurich. Weight 120 kg."
    [spans] = get_policy("identifier").detect([text])
    start, end = text.index("Kargestr."), text.index(" Weight") - 1
    assert (min(s.start for s in spans), max(s.end for s in spans)) == (start, end), [text[s.start : s.end] for s in spans]


# Texts for the anchored patterns of `identifier`: an address with as many commas before its anchor as the pattern
# allows (six before an international address's end, three before the street word of one without a postcode), an
# address across a line break, anchors with no address, and addresses in carrying sentences.
ANCHOR_TEXTS = [
    "Block 7, Lot 18, Flat 2, 12, rue de la Paix, Batiment B, Escalier 3, 75002 Paris",
    "See: Block 7, Lot 18, 12, calle Mayor, Soria today, and Block 7, Lot 18, 12, calle Mayor 5, Soria.",
    "Sent to Flat 2,\n 12 rue de la Paix, 75002 Paris, then to 10 rue Madi - Ghardaïa.",
    "Pain, fever, cough, rash, 12 street lights, 40 patients, 2 courts, 37.5 road signs, Paris 75002, 12345",
    "Mr Smith, DOB 24 May 2018, MRN-5250407. Home address: 29 Gardner Ports, West Conorberg B1S 7NJ. Call 07700.",
    *(carrier.format(address) for address in ADDRESSES for carrier in ADDRESS_CARRIERS),
]


@pytest.mark.parametrize("pattern", list(BUILTIN_PATTERNS["identifier"].anchors))
def test_anchored_patterns_find_what_the_pattern_alone_finds(pattern):
    """Trying a pattern only at the starts that reach its anchor gives every match `finditer` gives, on crafted
    texts and generated notes and dialogs; and each match holds its anchor within the commas (and line) declared,
    so that the claim fails here, not in detection, when a pattern changes."""
    anchor = BUILTIN_PATTERNS["identifier"].anchors[pattern]
    compiled, anchor_at = re.compile(pattern), re.compile(f"(?={anchor.pattern})")
    texts = [*ANCHOR_TEXTS, *(r.text for r in generate_clinic(60, 3)), *(r.text for r in generate_customersim(30, 3))]
    found = 0
    for text in texts:
        expected = [m.span() for m in compiled.finditer(text)]
        assert [m.span() for m in anchored_matches(compiled, anchor, anchor_at, text)] == expected, text
        for start, end in expected:
            reached = [a for a in (m.start() for m in anchor_at.finditer(text, start)) if a < end
                       and text.count(",", start, a) <= anchor.commas
                       and not (anchor.same_line and "\n" in text[start:a])]
            assert reached, text[start:end]
        found += len(expected)
    assert found >= 30  # the texts hold addresses of both shapes


def test_an_anchor_with_too_few_commas_loses_matches():
    """The crafted addresses need every comma their anchors allow: one fewer loses the match's start."""
    spec = BUILTIN_PATTERNS["identifier"]
    for pattern, anchor in spec.anchors.items():
        compiled = re.compile(pattern)
        short = dataclasses.replace(anchor, commas=anchor.commas - 1)
        short_at = re.compile(f"(?={short.pattern})")
        assert any([m.span() for m in anchored_matches(compiled, short, short_at, text)]
                   != [m.span() for m in compiled.finditer(text)] for text in ANCHOR_TEXTS[:2])
