"""CustomerSim: seeded, template-based customer-service dialogs with gold secret spans.

After Shi et al., *Selective Differential Privacy for Language Modeling* (NAACL 2022), Table 1: SYS/USR turns
following a fixed agenda; the customer gives a full name plus one of a phone number, an order number or a
shipping address; the system answers with a 10-character tracking number. Values come from Faker. Every secret
is recorded as a gold `Span(start, end, label)` on the final text, with labels `name`, `phone`, `order_number`,
`address`, `tracking_number`.
"""

from __future__ import annotations

import random
import string

from faker import Faker

from sdp_core.data.records import Record, Span, Splits

GREETINGS = [
    "Hello, I am the customer support bot. What can I do for you?",
    "Hi there, this is the support assistant. How can I help you today?",
    "Welcome to customer service. What can I help you with?",
]
REQUESTS = [
    "Could you please help me track my package?",
    "I want to know where my order is.",
    "My package has not arrived yet, can you check it?",
    "Can you tell me the status of my delivery?",
    "I need help finding my parcel.",
]
OPENERS = ["Hello robot.", "Hi.", "Good morning.", "Hey.", ""]
ASK_NAME = ["Please provide your full name.", "May I have your full name, please?", "What is your full name?"]
GIVE_NAME = ["Sure, {}.", "My name is {}.", "It is {}.", "{}."]
ASK_FIELD = {
    "phone": ["Could you please confirm your phone number?", "What is the phone number on the account?"],
    "order_number": ["Could you please give me your order number?", "What is your order number?"],
    "address": ["Could you please confirm your shipping address?", "What is the delivery address?"],
}
GIVE_FIELD = ["Yea sure, {}.", "It is {}.", "Sure, {}.", "{}."]
TRACKING = [
    "Track your order using your tracking number, {}. Are you happy about my answer?",
    "Your tracking number is {}. Is there anything else?",
    "You can follow the delivery with tracking number {}. Anything else I can do?",
]
CLOSINGS = ["That's it.", "No, thank you.", "Thanks, that is all.", "Great, bye."]
TRACKING_ALPHABET = string.ascii_uppercase + string.digits


def _phone(fake: Faker) -> str:
    return fake.numerify(fake.random_element(["(###) ###-####", "###-###-####", "###.###.####"]))


def _address(fake: Faker) -> str:
    return f"{fake.street_address()}, {fake.city()}, {fake.state_abbr()} {fake.zipcode()}"


def _tracking_number(fake: Faker) -> str:
    # 10 x [A-Z0-9] with at least two digits, so it cannot be an ordinary upper-case word.
    while True:
        value = "".join(fake.random.choices(TRACKING_ALPHABET, k=10))
        if sum(c.isdigit() for c in value) >= 2:
            return value


FIELD_VALUES = {
    "phone": _phone,
    "order_number": lambda fake: fake.numerify("###-#####-####"),
    "address": _address,
}


class _DialogBuilder:
    """Appends turns to a dialog and records where each secret value lands."""

    def __init__(self) -> None:
        self.text = ""
        self.spans: list[Span] = []

    def turn(self, speaker: str, template: str, value: str | None = None, label: str | None = None) -> None:
        prefix = f"{speaker}: "
        if value is None:
            self.text += prefix + template + "\n"
            return
        before, after = template.split("{}", 1)
        start = len(self.text) + len(prefix) + len(before)
        self.text += prefix + before + value + after + "\n"
        self.spans.append(Span(start, start + len(value), label or "SECRET"))

    def record(self) -> Record:
        return Record(text=self.text.rstrip("\n"), spans=tuple(self.spans))


def generate_dialog(fake: Faker, rng: random.Random) -> Record:
    """One dialog following the CustomerSim agenda."""
    d = _DialogBuilder()
    d.turn("SYS", rng.choice(GREETINGS))
    d.turn("USR", " ".join(filter(None, [rng.choice(OPENERS), rng.choice(REQUESTS)])))
    d.turn("SYS", rng.choice(ASK_NAME))
    d.turn("USR", rng.choice(GIVE_NAME), f"{fake.first_name()} {fake.last_name()}", "name")
    field = rng.choice(sorted(FIELD_VALUES))
    d.turn("SYS", rng.choice(ASK_FIELD[field]))
    d.turn("USR", rng.choice(GIVE_FIELD), FIELD_VALUES[field](fake), field)
    d.turn("SYS", rng.choice(TRACKING), _tracking_number(fake), "tracking_number")
    d.turn("USR", rng.choice(CLOSINGS))
    return d.record()


def generate_customersim(n: int, seed: int | str) -> list[Record]:
    """`n` dialogs, the same for the same seed."""
    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(seed)
    return [generate_dialog(fake, rng) for _ in range(n)]


def customersim_splits(n_train: int = 10_000, n_validation: int = 1_000, n_test: int = 1_000, seed: int = 0) -> Splits:
    """Train / validation / test from independent seeds, so resizing one split leaves the others unchanged."""
    return Splits(
        train=generate_customersim(n_train, seed * 3 + 0),
        validation=generate_customersim(n_validation, seed * 3 + 1),
        test=generate_customersim(n_test, seed * 3 + 2),
    )
