"""Train the address tagger (`sdp_core.detectors.address_tagger`) and measure it beside the address rules.

The recipe (every part seeded, `--seed`, default 0; L-BFGS is deterministic, so the same command writes the same
model):

- **positives**: addresses of every Faker address format but those of the held-out business locales (`HELD_OUT`:
  de_DE fr_FR es_ES it_IT pl_PL cs_CZ sv_SE en_IN pt_BR nl_NL, the aliases `de`, `es` that share their provider,
  and tr_TR's, which is en_US's and that of 40 locales more), one locale per provider (52 formats), written on
  one line (the lines joined by ", ", by " ", " - " or "; "), on several lines, as a street alone, a street and its city, with the country after it; each in a
  carrier sentence (`training_carrier`) (English, French, Spanish, Italian, German, Portuguese, Dutch; inside a sentence,
  in parentheses, before a comma, in a list, in a signature), beside a date, an amount or a reference;
- **negatives**: sentences of `NEGATIVES` with the numbers addresses are confused with (dates of many formats,
  times, amounts, invoice, order, ticket and version numbers, phone numbers, IBANs, rooms and floors, flights);
- **development data**, with its gold spans (addresses in, every other type out): the business `dev` and `extra`
  splits (`generate_business(2000, seed, split)`), clinic notes and CustomerSim dialogs (500 each),
  and the frozen real-text fixture (`tests/fixtures/realtext.jsonl`, lines where no address rule matches).

Only lines with a digit are trained on, as only those are tagged. `--leave-out LOCALES` keeps some providers out
of training and measures, on their addresses in the carriers held back (`TEST_CARRIERS`), the share of addresses
`identifier` alone and `identifier` ∪ the tagger fully mask, and the tagger's character precision on the
negatives held back. The held-out business split is never read here.

    python -m benchmarks.train_address_tagger                     # writes sdp_core/detectors/address_tagger.crfsuite
    python -m benchmarks.train_address_tagger --leave-out ro_RO,hr_HR,nl_BE,fr_DZ,es_CL,fil_PH --out /tmp/m.crfsuite
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import date, time
from pathlib import Path
from time import perf_counter
from typing import Callable, Iterator

import pycrfsuite
from faker import Faker
from faker.config import AVAILABLE_LOCALES

from sdp_core.data.business import _ordered, generate_business
from sdp_core.data.clinic import generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Record, Span
from sdp_core.detectors.address_tagger import MODEL_PATH, AddressTaggerPolicy, candidate_lines, sequence_features, tokenize
from sdp_core.detectors.regex import builtin_regex_policy

DATES = (date(1950, 1, 1), date(2035, 12, 31))  # fixed bounds: Faker's default ends today, which changes the data
HELD_OUT = frozenset("de_DE fr_FR es_ES it_IT pl_PL cs_CZ tr_TR sv_SE en_IN pt_BR nl_NL".split())
REALTEXT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "realtext.jsonl"
PARAMS = {"c1": 0.05, "c2": 0.01, "max_iterations": 200, "feature.possible_transitions": True, "feature.minfreq": 2}

# {a} is the address; {d} a date, {m} an amount, {r} a reference, {n} a name, {p} a phone number. A carrier is a
# start and an end of one language around the address, or a whole template (lists, signatures).
_STARTS_ENDS = {
    "en": (("Please send the documents to ", "Our new office address is ", "Customer {n} moved to ", "Delivery address: ",
            "Ship order {r} to ", "The invoice of {m} went to ", "Her address (", "{n} lives at ", "Registered office: ",
            "Address on file: ", "Hi team, the parcel {r} is held at ", "Paid {m} to {n}, ", "Contact: {n}, ",
            "Employee {n} ({r}) relocated to ", "Statement sent on {d} to ", "Update the billing address to ",
            "Return the device to ", "Branch: ", "{n} - ", "New address for account {r}: "),
           (".", ", effective {d}.", " last month.", "", ", please.", " on {d}.", ") changed on {d}.",
            " and pays {m} a month.", ". Reference {r}.", "; please confirm by {d}.", " until {d}.", ", ticket {r}.",
            " (since {d}).", ". Call {p} before delivery.", ", phone {p}.", " - thanks!", " and the old one is closed.",
            ", amount {m}.", " as of {d} per {n}.", "?")),
    "fr": (("Veuillez envoyer le courrier à ", "Nouvelle adresse de {n} : ", "Le colis {r} sera livré au ",
            "Adresse de facturation : ", "Nous avons viré {m} à {n}, ", "Le client habite ", "Siège social : ",
            "Merci d'écrire à "),
           (", merci.", " (depuis le {d}).", " le {d}.", ".", ", dossier {r}.", " et paie {m} par mois.", "",
            ", tél. {p}.")),
    "es": (("Por favor, envíe la factura a ", "El cliente {n} vive en ", "Dirección de entrega: ",
            "Transferimos {m} a {n}, ", "Domicilio fiscal: ", "La sucursal está en "),
           (".", " desde el {d}.", ". Importe: {m}.", ", expediente {r}.", "", ", teléfono {p}.", " el {d}.")),
    "it": (("Si prega di inviare i documenti a ", "Il signor {n} abita in ", "Indirizzo di fatturazione: ",
            "Abbiamo versato {m} a {n}, ", "Sede legale: ", "La filiale si trova in "),
           ("", ", pratica {r}.", " dal {d}.", ".", ", tel. {p}.", " e paga {m} al mese.")),
    "de": (("Bitte senden Sie die Unterlagen an ", "Die neue Anschrift von {n} lautet ", "Lieferadresse: ",
            "Wir haben {m} an {n}, ", "Firmensitz: ", "Herr {n} wohnt in ", "Rechnungsanschrift: "),
           (".", " (ab {d}).", ", Rechnung {r} über {m}.", " überwiesen.", "", " seit dem {d}.", ", Tel. {p}.")),
    "pt": (("A morada de {n} é ", "Endereço de entrega: ", "Enviámos {m} para {n}, "), (".", " desde {d}.", "")),
    "nl": (("Het nieuwe adres is ", "Afleveradres: ", "We hebben {m} overgemaakt aan {n}, "),
           (", vanaf {d}.", ".", ", factuur {r}.")),
}
_WHOLE = ("Kind regards,\n{n}\n{a}", "Addresses to update:\n- {a}\n- {a2}", "{a}", "1. {a}\n2. {a2}",
          "Mit freundlichen Grüßen\n{n}\n{a}\nTel. {p}", "{n}\n{a}\n{p}", "From: {n}, {a}; To: {a2}")


def training_carrier(rng: random.Random) -> str:
    """A carrier of training: a whole template one time in ten, else a start and an end of a language."""
    if rng.random() < 0.1:
        return rng.choice(_WHOLE)
    starts, ends = _STARTS_ENDS[rng.choice(sorted(_STARTS_ENDS))]
    return rng.choice(starts) + "{a}" + rng.choice(ends)

# Carriers kept out of training, for the measure of `--leave-out`.
TEST_CARRIERS = (
    "Could you confirm that {a} is still the correct address?",
    "We visited the site at {a} on {d} and found no damage.",
    "Merci de mettre à jour l'adresse : {a}.",
    "La oficina de {n} está en {a}, ticket {r}.",
    "L'ufficio si trova in {a} dal {d}.",
    "Wir haben {m} an {n}, {a} überwiesen.",
    "Mailing address:\n{a}\nPhone on request.",
    "Best,\n{n}\n{a}\nRef {r}",
)
NEGATIVES = (
    "Invoice {r} of {m} is due on {d}.",
    "Your order {r} shipped on {d} at {t}.",
    "Meeting moved to {d} at {t} in room {k}, floor {k}.",
    "Version {v} was released on {d}; see ticket #{k}.",
    "Please call {p} between {t} and {t}.",
    "IBAN {i}, amount {m}, value date {d}.",
    "Flight {f} departs {d} at {t} from gate {k}.",
    "The balance of {m} was {x}% lower than in {y}.",
    "Le paiement de {m} a été reçu le {d} (facture {r}).",
    "El pedido {r} se entregó el {d} a las {t}.",
    "La fattura {r} di {m} scade il {d}.",
    "Die Rechnung {r} über {m} ist am {d} fällig.",
    "Account {n} opened on {d}; limit {m}, {k} cards.",
    "Temperature 37.{k} C, BP 12{k}/8{k}, HR {k} on {d}.",
    "Step {k} of {k}: upgrade to {v} before {d}.",
    "{n} joined on {d} as employee {r}, grade {k}.",
    "Call {n} at {p}.",
    "Q{q} {y} revenue: {m} across {k} regions.",
    "Case {r} escalated to {n} on {d} at {t}.",
    "Chapter {k}, page {k}, paragraph {k}.",
    # lines of a name and a year or a number, as copyright notices, credits and sign-offs write them
    "{y} {n}",
    "Copyright (c) {y}-{y} {n}, {c}",
    "{y}, {c}",
    " -- {n} <{e}>  {w}, {k} {o} {y} {t}:{k} +0{k}00",
    "  * New upstream release {v} (Closes: #{r}).",
    "  * Bump Standards-Version to {v}; build with Python {v} and GCC {k}.",
    "{u} ({v}-{k}) unstable; urgency=medium",
    "Changes in {v} ({d}): {k} fixes by {n}, {n} and {c}.",
    "{n} ({k} items, {m})",
    "{c} {v} ({d})",
    "{n}, {c}, {y}",
    "Ticket {r}: {n} reported {k} errors in {c} {v}.",
    "Dossier {r} : {n}, {k} pièces, le {d}.",
    "Expediente {r}: {n}, {k} documentos, {m}.",
    "Pratica {r}: {n}, {k} allegati, {d}.",
    "Vorgang {r}: {n}, {k} Anlagen, {d}.",
    # a capitalised noun and a number, as streets are written in German, Dutch and the Nordic languages
    "Siehe Seite {k}, Abschnitt {k} und Anlage {k}.",
    "Bitte Zimmer {k} nutzen, Gleis {k}, Kasse {k}.",
    "Voir page {k}, article {k}, bureau {k}.",
    "Véase la página {k}, artículo {k}, sala {k}.",
    "Vedi pagina {k}, articolo {k}, stanza {k}.",
    "See Section {k}, Table {k} and Item {k} of {c}.",
    "{k} units of {c} at {m} each; {k} pcs {c}.",
    "Release {v} of {c} is out; {n} tested it on {d}.",
    # identifiers, then a company or a place: the comma-separated parts of an address, without an address
    "IBAN: {i}, {c}, {g}.",
    "Account {r}, {c}, branch {g}.",
    "Phone {p}, {c}, {g}",
    "Reg. no. {k}/{k}/{k}, court of {g}.",
    "Tax ID {r}, tax office {g}.",
    "Customer no. {r}, {c}",
    "{p}\n{c}\n{g}",
    "N° TVA {r}, {c}, {g}.",
    "Nº de cuenta {r}, {c}, sucursal {g}.",
    "Codice cliente {r}, {c}, filiale di {g}.",
    "Kundennummer {r}, {c}, Filiale {g}.",
    "Paid {m} to {c} in {g} on {d}, ref {r}.",
    "Train {f} from {g} to {g}, {d}, coach {k}, seat {k}.",
    "{g}, {d}",
    "{g}, den {d}",
    "{g}, el {d}",
    "Ticket {r}, priority {k}, level {k}, row {k}.",
    "Report {r} of {c}, {g} plant, shift {k}.",
    "Contract {r} with {c} ({g}) runs until {d}.",
    "{n}, {c}, {g}, {p}",
)
# Negatives kept out of training, for the measure of `--leave-out`.
TEST_NEGATIVES = (
    "Bankverbindung: {i}, BIC {b}, {c}.",
    "Steuernummer {k}/{k}/{k}, Finanzamt {g}.",
    "Employee ID {r}, department {c}, {g} office.",
    "Tel. {p} / Fax {p}, {c}, {g}",
    "{g}, le {d}",
    "Ticket {r} from the {g} branch, priority {k}.",
    "Flight {f} {g} - {g}, {d}, seat {k}A.",
    "VAT {r}, registered in {g} since {y}.",
    "{n} (born {d} in {g}) joined {c} in {y}.",
    "Konto {r} bei der {c} in {g}, Saldo {m}.",
    "Cuenta {r} en {c}, oficina de {g}, saldo {m}.",
    "{n}\n{c}\n{p}\n{e}",
    "Order #{r} - {k} x {c} - {m} - {g} warehouse",
    "Reminder: {n} owes {m} since {d}, contract {r}.",
    "{y}-{y} {c}",
    "Thanks to {n} for release {v} on {d}.",
    "Le contrat {r} de {n} prend fin le {d} ; solde {m}.",
    "{n} ha pagado {m} el {d}, referencia {r}.",
    "Il cliente {n} ha chiamato il {d} alle {t} ({p}).",
    "{n} hat am {d} um {t} {m} abgehoben, Karte {k}.",
    "Build {v} of {c} passed {k} of {k} tests at {t}.",
    "Order {r} for {n}: {k} x {c} at {m}.",
)


def training_locales(leave_out: frozenset[str] = frozenset()) -> list[str]:
    """One locale per Faker address provider, leaving out the providers of the held-out locales (and aliases that
    share them) and `leave_out`'s."""
    def provider(locale: str) -> type:
        fake = Faker(locale)
        return next(type(p) for p in fake.providers if type(p).__module__.startswith("faker.providers.address"))
    held = {provider(loc) for loc in HELD_OUT | leave_out}
    chosen: dict[type, str] = {}
    for locale in sorted(AVAILABLE_LOCALES):
        if locale in {"fr_QC"}:  # deprecated alias of fr_CA
            continue
        kind = provider(locale)
        if not (set(kind.__mro__) & held):
            chosen.setdefault(kind, locale)
    return sorted(chosen.values())


def _country(fake: Faker) -> str:
    try:
        return fake.current_country()
    except (ValueError, AttributeError):  # locales without a country of their own (en_MS, `la`)
        return fake.country()


def render_address(fake: Faker, rng: random.Random) -> str:
    """One address of `fake`'s locale, as people write it in text."""
    lines = [line.strip(" ,") for line in fake.address().splitlines() if line.strip(" ,")]
    roll = rng.random()
    if roll < 0.45:
        return ", ".join(lines)
    if roll < 0.55:
        return "\n".join(lines)
    if roll < 0.62:
        return fake.street_address()
    if roll < 0.72:
        return f"{fake.street_address()}, {fake.city()}"
    if roll < 0.82:
        return f"{', '.join(lines)}, {_country(fake)}"
    return rng.choice((" ", " - ", "; ")).join(lines)


def _values(fake: Faker, rng: random.Random) -> dict[str, Callable[[], str]]:
    date_formats = ("%d/%m/%Y", "%Y-%m-%d", "%d.%m.%Y", "%d %B %Y", "%B %d, %Y", "%m/%d/%y", "%d %b")
    return {
        "d": lambda: fake.date_between_dates(*DATES).strftime(rng.choice(date_formats)),
        "t": lambda: time(rng.randrange(24), rng.randrange(60), rng.randrange(60)).strftime(
            rng.choice(("%H:%M", "%H:%M:%S", "%I:%M %p"))),
        "m": lambda: rng.choice(("{:,.2f} EUR", "${:,.2f}", "{:.2f} €", "CHF {:,.0f}")).format(rng.uniform(5, 90000)),
        "r": lambda: rng.choice(("INV-{}", "#{}", "{}", "ORD{}", "TCK-{}/{}", "{}-{}")).format(
            fake.numerify("#" * rng.randint(3, 8)), fake.numerify("####")),
        "n": lambda: fake.name(),
        "k": lambda: str(rng.randint(1, 99)),
        "v": lambda: ".".join(str(rng.randint(0, 20)) for _ in range(rng.randint(2, 3))),
        "p": lambda: fake.phone_number() if hasattr(fake, "phone_number") else fake.numerify("+## ## ### ####"),
        "i": lambda: fake.iban(),
        "f": lambda: fake.bothify("??###").upper(),
        "x": lambda: f"{rng.uniform(0, 40):.1f}",
        "y": lambda: str(rng.randint(1990, 2030)),
        "q": lambda: str(rng.randint(1, 4)),
        "c": lambda: fake.company(),
        "g": lambda: fake.city(),
        "b": lambda: fake.swift(),
        "u": lambda: fake.user_name(),
        "e": lambda: fake.email(),
        "w": lambda: rng.choice(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")),
        "o": lambda: rng.choice(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")),
    }


def fill(template: str, values: dict[str, Callable[[], str]], addresses: list[str]) -> Record:
    """`template` with its fields filled, the addresses (`{a}`, `{a2}`) as gold spans."""
    text, spans, rest = "", [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        field, _, rest = tail.partition("}")
        text += head
        if field in ("a", "a2"):
            value = addresses[0 if field == "a" else 1]
            spans.append(Span(len(text), len(text) + len(value), "address"))
        else:
            value = values[field]()
        text += value
    return Record(text + rest, tuple(spans))


def carrier_records(locales: list[str], carrier: Callable[[random.Random], str], per_locale: int,
                    seed: int) -> list[Record]:
    rng = random.Random(f"carriers-{seed}")
    records = []
    for i, locale in enumerate(locales):
        fake = _ordered(Faker(locale))
        fake.seed_instance(f"{seed}-{i}")
        values = _values(fake, rng)
        for _ in range(per_locale):
            template = carrier(rng)
            records.append(fill(template, values, [render_address(fake, rng), render_address(fake, rng)]))
    return records


def negative_records(templates: tuple[str, ...], n: int, seed: int) -> list[Record]:
    rng = random.Random(f"negatives-{seed}")
    fakes = [_ordered(Faker(loc)) for loc in ("en_US", "en_GB", "fr_CH", "es_MX", "de_AT", "it_CH", "nl_BE", "hu_HU", "ro_RO")]
    for i, fake in enumerate(fakes):
        fake.seed_instance(f"negatives-{seed}-{i}")
    return [fill(rng.choice(templates), _values(rng.choice(fakes), rng), []) for _ in range(n)]


def development_records(seed: int, leave_out: frozenset[str]) -> list[Record]:
    """The development sets with their gold address spans (every other gold type dropped)."""
    records = [r for split in ("dev", "extra") for r in generate_business(2000, seed, split)  # type: ignore[arg-type]
               if r.meta.get("locale") not in leave_out]
    records += generate_clinic(500, seed) + generate_customersim(500, seed)
    rules = builtin_regex_policy("identifier")
    for row in map(json.loads, REALTEXT.read_text(encoding="utf-8").splitlines()):
        for line in row["text"].split("\n"):
            if not any(rules.detect([line])[0]):  # no shape of `identifier`: no address the gold would miss
                records.append(Record(line, ()))
    return [Record(r.text, tuple(s for s in r.spans or () if s.label == "address")) for r in records]


def sequences(records: list[Record]) -> Iterator[tuple[list[list[str]], list[str]]]:
    """(features, BIO labels) of each candidate line of each record."""
    for record in records:
        spans = record.spans or ()
        for base, line in candidate_lines(record.text):
            offsets = tokenize(line)
            labels, inside = [], None
            for a, b in offsets:
                span = next((s for s in spans if s.start <= base + a and base + b <= s.end), None)
                labels.append("O" if span is None else "I" if span is inside else "B")
                inside = span
            yield sequence_features([line[a:b] for a, b in offsets]), labels


def train(records: list[Record], out: Path) -> None:
    trainer = pycrfsuite.Trainer(verbose=False)
    for xseq, yseq in sequences(records):
        trainer.append(xseq, yseq)
    trainer.set_params(PARAMS)
    trainer.train(str(out))


def fully_masked(records: list[Record], detected: list[list[Span]]) -> tuple[int, int]:
    """(addresses none of whose non-space characters is left, addresses)."""
    found = total = 0
    for record, spans in zip(records, detected):
        for gold in record.spans or ():
            total += 1
            covered = {i for s in spans for i in range(max(s.start, gold.start), min(s.end, gold.end))}
            found += all(i in covered or record.text[i].isspace() for i in range(gold.start, gold.end))
    return found, total


def measure(model: Path, leave_out: list[str], seed: int) -> None:
    tests = carrier_records(leave_out, lambda rng: rng.choice(TEST_CARRIERS), 100, seed + 1)
    negatives = negative_records(TEST_NEGATIVES, 1000, seed + 1)
    rules, tagger = builtin_regex_policy("identifier"), AddressTaggerPolicy(model)
    by_rules, by_tagger = rules.detect([r.text for r in tests]), tagger.detect([r.text for r in tests])
    for name, detected in (("identifier", by_rules), ("tagger", by_tagger),
                           ("identifier ∪ tagger", [a + b for a, b in zip(by_rules, by_tagger)])):
        k, n = fully_masked(tests, detected)
        print(f"left-out locales, {name}: {k}/{n} = {k / n:.3f} addresses fully masked")
    for locale in leave_out:
        part = [i for i in range(len(tests)) if i // 100 == leave_out.index(locale)]
        k0, n = fully_masked([tests[i] for i in part], [by_rules[i] for i in part])
        k1, _ = fully_masked([tests[i] for i in part], [by_rules[i] + by_tagger[i] for i in part])
        print(f"  {locale}: identifier {k0 / n:.3f}, identifier ∪ tagger {k1 / n:.3f}")
    flagged = [s for spans in tagger.detect([r.text for r in negatives]) for s in spans]
    print(f"negatives: {len(flagged)} tagger spans in {len(negatives)} sentences with no address")
    gold_chars = sum(s.end - s.start for r in tests for s in r.spans or ())
    tagged = sum(s.end - s.start for spans in by_tagger for s in spans)
    inside = sum(min(s.end, g.end) - max(s.start, g.start) for r, spans in zip(tests, by_tagger) for s in spans
                 for g in r.spans or () if s.start < g.end and g.start < s.end)
    print(f"tagger character precision on the test carriers: {inside / max(tagged, 1):.3f} "
          f"({tagged} tagged, {gold_chars} gold)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-locale", type=int, default=120, help="carrier sentences per address format")
    parser.add_argument("--negatives", type=int, default=5000)
    parser.add_argument("--leave-out", default="", help="comma-separated Faker locales kept out and measured")
    parser.add_argument("--out", type=Path, default=MODEL_PATH)
    args = parser.parse_args()
    leave_out = [loc for loc in args.leave_out.split(",") if loc]
    started = perf_counter()
    locales = training_locales(frozenset(leave_out))
    records = (carrier_records(locales, training_carrier, args.per_locale, args.seed)
               + negative_records(NEGATIVES, args.negatives, args.seed) + development_records(args.seed, frozenset(leave_out)))
    print(f"{len(locales)} address formats: {' '.join(locales)}; {len(records)} training records")
    train(records, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) in {perf_counter() - started:.0f} s")
    if leave_out:
        measure(args.out, leave_out, args.seed)


if __name__ == "__main__":
    main()
