"""The address tagger (`address_tagger`): gold spans of addresses written by hand in formats no Faker locale of its
training writes (Iceland, Estonia, Latvia, Lithuania, Malta, Serbia, Monaco, Andorra, Bulgaria, Cyprus,
Liechtenstein, Albania, Luxembourg), ordinary numbers left alone, and the same spans every time."""

from __future__ import annotations

import pickle

import pytest

from sdp_core.detectors import get_policy
from sdp_core.detectors.address_tagger import MODEL_PATH, AddressTaggerPolicy, sequence_features, token_features, tokenize

# (carrier, address): the address is the gold span.
ADDRESSES = (
    ("Please update the address to {}, thanks.", "Laugavegur 26, 101 Reykjavík"),
    ("Le dossier a été envoyé au {} le 3 mars.", "12, rue de la Gare, L-1611 Luxembourg"),
    ("La sede está en {} desde 2019.", "Pärnu mnt 22, 10141 Tallinn"),
    ("Neue Anschrift: {}", "Brīvības iela 33, Rīga, LV-1010"),
    ("Our office moved to {}.", "Gedimino pr. 9, LT-01103 Vilnius"),
    ("Spedire a {}, per favore.", "45 Triq il-Kbira, Birkirkara BKR 1234"),
    ("The parcel to {} was returned.", "Knez Mihailova 6, 11000 Beograd"),
    ("Siège : {}.", "7 avenue de Grande-Bretagne, 98000 Monaco"),
    ("Dirección fiscal: {}", "Avinguda Meritxell 44, AD500 Andorra la Vella"),
    ("Адрес: {}", "ул. Витоша 15, 1000 София"),
    ("Invoice to {} (VAT exempt).", "Makariou Avenue 12, 1065 Nicosia"),
    ("Bitte an {} senden.", "Bahnhofstrasse 5, 9490 Vaduz"),
    ("Adresa e re: {}.", "Rruga e Durrësit 12, 1001 Tiranë"),
)
ORDINARY = (
    "Invoice 2024-0193 of 1,250.00 EUR is due on 12/03/2025.",
    "The meeting is on 14 March 2024 at 10:30 in room 4.",
    "Version 3.12.1 was released on 2024-10-07; see bug #18423.",
    "Call +44 20 7946 0958 between 9:00 and 17:00.",
    "Order 604-87647-5938 shipped on March 3, 2024 (3 items, $49.99).",
    "BP 120/80, HR 72, temperature 37.2 C, weight 80 kg.",
    "Q3 2023 revenue rose 12.5% to 4.2 million across 18 regions.",
    "Copyright (c) 2009-2021 The Python Software Foundation",
)


@pytest.fixture(scope="module")
def tagger():
    return AddressTaggerPolicy()


@pytest.mark.parametrize(("carrier", "address"), ADDRESSES)
def test_tagger_finds_addresses_of_formats_it_was_not_trained_on(tagger, carrier, address):
    text = carrier.format(address)
    [spans] = tagger.detect([text])
    assert [text[s.start:s.end] for s in spans] == [address]
    assert {s.label for s in spans} == {"address"}


@pytest.mark.parametrize("text", ORDINARY)
def test_tagger_leaves_dates_amounts_versions_and_phone_numbers(tagger, text):
    assert tagger.detect([text]) == [[]]


def test_tagger_spans_are_the_same_every_time():
    texts = [c.format(a) for c, a in ADDRESSES] + list(ORDINARY)
    first = AddressTaggerPolicy().detect(texts)
    assert AddressTaggerPolicy().detect(texts[::-1]) == first[::-1]  # a fresh tagger, another order
    assert [AddressTaggerPolicy().detect([t])[0] for t in texts] == first  # one text at a time
    assert AddressTaggerPolicy().version == get_policy("address_tagger").version


def test_tagger_pickles_after_use_into_a_worker(tagger):
    text = ADDRESSES[0][0].format(ADDRESSES[0][1])
    spans = tagger.detect([text])
    assert pickle.loads(pickle.dumps(tagger)).detect([text]) == spans
    assert str(MODEL_PATH.parent).encode() not in pickle.dumps(tagger)  # a worker reads its own copy of the model


def test_general_and_strict_mask_what_the_tagger_finds():
    for policy in ("general", "strict"):
        assert "address_tagger" in {m.name for m in get_policy(policy).members}


@pytest.mark.parametrize("line", ["Ship to 12 Rue de la Gare, L-1611 Luxembourg.", "BP 120/80", "Flat 3", "42", ""])
def test_each_token_sees_its_own_features_then_its_neighbours_in_training_order(line):
    """`sequence_features` against the definition written out token by token: its own features, `BOL` / `EOL` at
    the line's ends, then the neighbour features of the tokens at -1, -2, +1 and +2 with that prefix (the model was
    trained on this order, and CRFsuite adds the weights in it)."""
    tokens = [line[a:b] for a, b in tokenize(line)]
    keys = ("w=", "sh=", "nd=", "year", "street", "cap", "month")
    expected = []
    for i in range(len(tokens)):
        feats = ["bias", *token_features(tokens[i])] + ["BOL"] * (i == 0) + ["EOL"] * (i == len(tokens) - 1)
        for k in (-1, -2, 1, 2):
            if 0 <= i + k < len(tokens):
                feats += [f"{k:+d}{f}" for f in token_features(tokens[i + k]) if f.startswith(keys)]
        expected.append(tuple(feats))
    assert sequence_features(tokens) == expected
