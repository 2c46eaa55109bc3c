"""Secret detection on real text and on the generated sets, side by side: per type secret recall, token precision
and the masked share of characters beside the gold share, with 95 % Wilson intervals.

Real text (`sdp_core.data.realtext`): the metadata, AUTHORS files and copyright notices installed here, by source,
at most `--per-source` records each (a seeded sample); generated: clinic notes, CustomerSim dialogs and
bank / HR help-desk notes (`generate_accounts`: names, usernames, card numbers; US people, and people of the
held-out locales of `sdp_core.data.business`), `--n` each. Policies: `general`
(the default for any data but CustomerSim) and, for comparison, the union the `general` policy was before person
names were read from the text (`identifier,general_entity,proper_nouns`).

    python -m benchmarks.detect_real [--per-source 1000] [--n 500] [--seed 0] [--policies "general;identifier,proper_nouns"]
    python -m benchmarks.detect_real --write-fixture tests/fixtures/realtext.jsonl   # the frozen test sample
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from faker import Faker

from benchmarks.detect_general import measure, rate
from sdp_core.data.business import LOCALES
from sdp_core.data.clinic import generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.realtext import SOURCES, build_realtext
from sdp_core.data.records import Record, Span
from sdp_core.detectors import load_spacy

PREVIOUS_GENERAL = "identifier,general_entity,proper_nouns"
# Records per source in the frozen test sample: AUTHORS pieces are long lists, so fewer of them.
FIXTURE_SIZES = {"metadata": 100, "authors": 30, "copyright": 200}


def sample(records: list[Record], k: int, seed: int) -> list[Record]:
    """At most k records, a seeded sample kept in the set's order."""
    if len(records) <= k:
        return records
    keep = set(random.Random(seed).sample(range(len(records)), k))
    return [r for i, r in enumerate(records) if i in keep]


def _card(fake: Faker) -> str:
    """A Luhn-valid card number of a random brand, written as people write them: bare, or in groups."""
    number = fake.credit_card_number()
    rest = (len(number) % 4,) if len(number) % 4 else ()
    groups = (4, 6, 5) if len(number) == 15 else (4,) * (len(number) // 4) + rest
    parts, i = [], 0
    for g in groups:
        parts.append(number[i : i + g])
        i += g
    return fake.random_element([number, " ".join(parts), "-".join(parts)])


ACCOUNT_NOTES = (
    ("Hi {first}, the card ", ("card",), " was declined on {date} for {amount}; please call us."),
    ("Ticket from ", ("name",), ": login: ", ("username",), " is locked after 3 attempts on {date}."),
    ("Payroll update for ", ("name",), " (user: ", ("username",), "): new card ", ("card",), " from {date}."),
    ("Refund of {amount} to card number ", ("card",), " approved by ", ("name",), "."),
    ("Thanks @", ("username",), " for flagging the {amount} charge on {date} (app {version})."),
    ("Reset password for username=", ("username",), "; card on file ", ("card",), ", see bug #{bug}."),
)


def generate_accounts(n: int, seed: int, locales: tuple[str, ...] = ("en_US",)) -> list[Record]:
    """Bank and HR help-desk notes with gold names, usernames (after `@` or a `user:` / `login:` cue) and card
    numbers (Faker's Luhn-valid numbers of every brand, bare or grouped), among dates, amounts, versions and bug
    numbers that are not secrets. A generated check of the types the other sets lack. The people are of `locales`
    (each note draws one; the English text stays): `sdp_core.data.business.LOCALES` names a development and a
    held-out list."""
    fake = Faker(list(locales))
    fake.seed_instance(seed)
    people = [fake[loc] for loc in locales]

    def name() -> str:
        person = fake.random_element(people)
        return f"{person.first_name()} {person.last_name()}"

    values = {"name": name, "username": fake.user_name, "card": lambda: _card(fake)}
    records = []
    for _ in range(n):
        text, spans = "", []
        for part in fake.random_element(ACCOUNT_NOTES):
            if isinstance(part, tuple):
                value = values[part[0]]()
                spans.append(Span(len(text), len(text) + len(value), part[0]))
                text += value
            else:
                text += part.format(first=fake.first_name(), date=fake.date(), amount=f"${fake.pyint(5, 5000):,}.00",
                                    version=fake.numerify("#.#.#"), bug=fake.numerify("#####"))
        records.append(Record(text, tuple(spans)))
    return records


def real_sets(per_source: int, seed: int) -> dict[str, list[Record]]:
    records = build_realtext()
    return {f"real:{s}": sample([r for r in records if r.meta["source"] == s], per_source, seed) for s in SOURCES}


def write_fixture(path: Path, seed: int) -> None:
    """A stratified sample of the real-text set as JSONL: text, gold spans, source and origin."""
    records = build_realtext()
    rows = []
    for source, k in FIXTURE_SIZES.items():
        for r in sample([r for r in records if r.meta["source"] == source], k, seed):
            rows.append({"text": r.text, "spans": [s.to_dict() for s in r.spans], **r.meta})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} records to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-source", type=int, default=1000, help="real-text records per source at most")
    parser.add_argument("--n", type=int, default=500, help="records per generator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=f"general;{PREVIOUS_GENERAL}", help="policies, separated by ';'")
    parser.add_argument("--write-fixture", type=Path, metavar="PATH", help="write the test sample and stop")
    args = parser.parse_args()
    if args.write_fixture:
        write_fixture(args.write_fixture, args.seed)
        return

    from rich.console import Console
    from rich.table import Table

    load_spacy("en_core_web_sm")
    sets = {**real_sets(args.per_source, args.seed), "clinic": generate_clinic(args.n, args.seed),
            "customersim": generate_customersim(args.n, args.seed), "accounts": generate_accounts(args.n, args.seed),
            "accounts:heldout": generate_accounts(args.n, args.seed, LOCALES["heldout"]["en"])}
    policies = args.policies.split(";")
    console = Console(width=240)
    summary = Table(title="Per set: token precision, masked share of non-space characters (gold share), all secrets")
    for col in ("set", "records", "policy", "token precision", "masked chars", "gold chars", "secrets found",
                "records/CPU-s"):
        summary.add_column(col, justify="right")
    for set_name, records in sets.items():
        results = {name: measure(records, name) for name in policies}
        table = Table(title=f"{set_name} ({len(records)} records): secrets fully masked per type, 95 % Wilson")
        table.add_column("type (secrets)")
        for name in policies:
            table.add_column(name, justify="right")
        first = next(iter(results.values()))[0]
        for label, lr in first.per_label.items():
            cells = (rate(ev.per_label[label].secrets) for ev, _ in results.values())
            table.add_row(f"{label} ({lr.secrets.n})", *cells)
        console.print(table)
        for name, (ev, per_second) in results.items():
            summary.add_row(set_name, str(len(records)), name, f"{ev.precision:.3f}", rate(ev.masked_chars),
                            f"{ev.gold_chars.value:.3f}", rate(ev.secrets), f"{per_second:.0f}")
    console.print(summary)


if __name__ == "__main__":
    main()
