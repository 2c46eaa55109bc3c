"""The clinic-note generator: seeded prose with gold spans, in formats unlike CustomerSim's."""

from __future__ import annotations

import pytest

from sdp_core.config import DataConfig
from sdp_core.data.clinic import LABELS, clinic_splits, generate_clinic
from sdp_core.data.splits import load_splits
from sdp_core.detectors import evaluate, get_policy

CUSTOMERSIM_REGEXES = "phone,email,order_number,tracking_number,address"


@pytest.fixture(scope="module")
def notes():
    return generate_clinic(300, seed=3)


def test_same_seed_same_notes():
    assert generate_clinic(20, seed=1) == generate_clinic(20, seed=1)
    assert generate_clinic(20, seed=1) != generate_clinic(20, seed=2)
    assert generate_clinic(5, seed="public-0") == generate_clinic(5, seed="public-0")


def test_gold_spans_cover_values_only(notes):
    seen = set()
    for note in notes:
        assert "\n" not in note.text and ":" not in note.text.split(" ", 1)[0]  # prose, not speaker turns
        spans = sorted(note.spans)
        assert list(note.spans) == sorted(note.spans, key=lambda s: s.start)
        for a, b in zip(spans, spans[1:]):
            assert a.end <= b.start
        for span, value in zip(note.spans, note.secrets()):
            seen.add(span.label)
            assert value and value == value.strip(), (span, value)
            assert not value.startswith(("Dr. ", "Mr ", "Mrs ", "Ms ", "MRN ", "MRN:", "DOB", "born ", "SSN ")), value
    assert seen == set(LABELS)


def test_every_note_names_patient_record_number_and_birth_date(notes):
    for note in notes:
        labels = [s.label for s in note.spans]
        assert {"name", "mrn", "date_of_birth", "doctor", "hospital"} <= set(labels)
        assert sum(label in ("phone", "email", "address", "national_id") for label in labels) >= 2


def test_formats_are_not_customersims(notes):
    """CustomerSim's own regexes, which find every one of its secrets, miss most clinic identifiers."""
    ev = evaluate(notes, get_policy(CUSTOMERSIM_REGEXES).detect([n.text for n in notes]))
    assert ev.per_label["mrn"].secrets.value < 0.2
    assert ev.per_label["national_id"].secrets.value < 0.3
    assert ev.per_label["phone"].secrets.value < 0.7
    assert ev.per_label["address"].secrets.value < 0.7


def test_splits_are_independent_and_registered():
    splits = clinic_splits(n_train=30, n_validation=10, n_test=12, seed=4)
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (30, 10, 12)
    assert not {r.text for r in splits.train} & {r.text for r in splits.test}
    assert clinic_splits(n_train=5, n_validation=10, n_test=12, seed=4).test == splits.test
    loaded = load_splits(DataConfig(source="clinic", n_train=30, n_validation=10, n_test=12), seed=4)
    assert loaded == splits
