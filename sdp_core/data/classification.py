"""The embedded sequence-classification set: seeded, templated customer reviews with a binary sentiment label.

Each review mentions an order number and is signed with the customer's name, often with a phone number, so the
data holds secrets with gold `Span`s (labels `name`, `phone`, `order_number`, as in CustomerSim) that say nothing
about the label: redaction and selective DP then behave as on JFT's GLUE tasks, where secrets are mostly
irrelevant to the task. Label 1 is positive, 0 negative; every split is balanced (half each, ±1 when odd).
"""

from __future__ import annotations

import random
import string
from typing import Sequence

from faker import Faker

from sdp_core.data.customersim import FIELD_VALUES
from sdp_core.data.records import Record, Span, Splits
from sdp_core.errors import DataError

PRODUCTS = ["wireless headphones", "coffee maker", "desk lamp", "pair of running shoes", "phone case", "backpack",
            "blender", "smart watch", "rain jacket", "kitchen scale", "bluetooth speaker", "office chair"]
OPENINGS = [
    "I ordered the {product} with order number {order_number}.",
    "Review of order {order_number}: the {product}.",
    "My {product} (order {order_number}) arrived last week.",
    "I bought a {product} here, order {order_number}.",
]
SENTIMENT = {
    1: ["It works perfectly.", "I love it.", "The quality is excellent.", "It arrived early and looks great.",
        "It exceeded my expectations.", "I would happily buy it again.", "Best purchase I made this year.",
        "Customer service was friendly and quick.", "Great value for the price.", "Highly recommended."],
    0: ["It stopped working after two days.", "I am very disappointed.", "The quality is terrible.",
        "It arrived broken.", "It was a waste of money.", "I want a refund.", "Worst purchase I made this year.",
        "Customer service never answered my emails.", "Far too expensive for what it is.", "Do not buy this."],
}
NEUTRAL = ["Shipping took five days.", "The box was a bit large.", "I use it every day.", "It came in blue.",
           "I got it as a gift for my sister.", ""]
SIGNATURES = ["Thanks, {name}.", "{name}", "Call me at {phone} if you need more details. {name}",
              "Regards, {name}, {phone}.", "My name is {name} and my number is {phone}."]
SECRET_FIELDS = {"name": lambda fake: f"{fake.first_name()} {fake.last_name()}",
                 "phone": FIELD_VALUES["phone"], "order_number": FIELD_VALUES["order_number"]}


def fill(template: str, values: dict[str, str]) -> tuple[str, list[Span]]:
    """Render `template` with `values`; every secret field's value gets a gold span labelled with its field name."""
    text, spans = "", []
    for literal, field, _, _ in string.Formatter().parse(template):
        text += literal
        if field is not None:
            if field in SECRET_FIELDS:
                spans.append(Span(len(text), len(text) + len(values[field]), field))
            text += values[field]
    return text, spans


def generate_review(fake: Faker, rng: random.Random, label: int) -> Record:
    """One review of the given sentiment: opening, one or two sentiment sentences, maybe a neutral one, signature."""
    values = {"product": rng.choice(PRODUCTS), **{name: make(fake) for name, make in SECRET_FIELDS.items()}}
    sentences = [rng.choice(OPENINGS), *rng.sample(SENTIMENT[label], rng.choice([1, 2])), rng.choice(NEUTRAL),
                 rng.choice(SIGNATURES)]
    text, spans = fill(" ".join(filter(None, sentences)), values)
    return Record(text=text, spans=tuple(spans), label=label)


def generate_reviews(n: int, seed: int) -> list[Record]:
    """`n` reviews, half positive (±1), in a seeded order; the same for the same seed."""
    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(f"reviews-{seed}")
    labels = [i % 2 for i in range(n)]
    rng.shuffle(labels)
    return [generate_review(fake, rng, label) for label in labels]


def classification_splits(n_train: int = 2_000, n_validation: int = 200, n_test: int = 200, seed: int = 0) -> Splits:
    """Train / validation / test from independent seeds, so resizing one split leaves the others unchanged."""
    return Splits(train=generate_reviews(n_train, seed * 3 + 0),
                  validation=generate_reviews(n_validation, seed * 3 + 1),
                  test=generate_reviews(n_test, seed * 3 + 2))


def class_labels(records: Sequence[Record], num_labels: int, where: str) -> list[int]:
    """Each record's class id, checked to lie in [0, num_labels): a classifier cannot train on unlabelled data."""
    labels = []
    for i, r in enumerate(records):
        if r.label is None:
            raise DataError(f"record {i} has no class label (a classifier needs labelled data)", where)
        if not 0 <= r.label < num_labels:
            raise DataError(f"record {i} has label {r.label}, outside 0..{num_labels - 1} (model.num_labels)", where)
        labels.append(r.label)
    return labels
