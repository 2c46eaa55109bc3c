"""Recall of the `customersim`, `conservative` and `general` policies on two generators, side by side, in one run.

For each generator (clinic notes and CustomerSim dialogs, the same size and seed) and each policy: per gold label,
token recall and secrets found (a secret counts as found only when redaction leaves nothing of it), both with 95 %
Wilson intervals; then overall token recall, secrets found, token precision and records/s of one cold detection
pass (no cache; the spaCy model is loaded beforehand, so its one-off load is not in the rates).

    python -m benchmarks.detect_general [--n 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from sdp_core.data.clinic import generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Record
from sdp_core.detectors import Evaluation, Rate, evaluate, get_policy, load_spacy

POLICIES = ("customersim", "conservative", "general")
GENERATORS: dict[str, Callable[[int, int], list[Record]]] = {"clinic": generate_clinic,
                                                             "customersim": generate_customersim}


def rate(r: Rate) -> str:
    return f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"


def secrets_found(ev: Evaluation) -> Rate:
    """Secrets fully masked over every gold label."""
    return Rate.of(sum(lr.secrets.k for lr in ev.per_label.values()), sum(lr.secrets.n for lr in ev.per_label.values()))


def measure(records: list[Record], policy_name: str) -> tuple[Evaluation, float]:
    """The evaluation of one cold detection pass, and its records per second."""
    policy = get_policy(policy_name)
    start = time.perf_counter()
    detected = policy.detect([r.text for r in records])
    return evaluate(records, detected), len(records) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="records per generator")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    load_spacy("en_core_web_sm")
    console = Console(width=220)
    summary = Table(title=f"Overall, {args.n} records per generator (seed {args.seed})")
    for col in ("generator", "policy", "token recall", "secrets found", "precision", "records/s"):
        summary.add_column(col, justify="right")
    for generator, generate in GENERATORS.items():
        records = generate(args.n, args.seed)
        results = {name: measure(records, name) for name in POLICIES}
        table = Table(title=f"{generator}: recall per gold label, 95 % Wilson intervals (tokens, secrets fully masked)")
        table.add_column("label (secrets, tokens)")
        for name in POLICIES:
            table.add_column(f"{name} tokens", justify="right")
            table.add_column(f"{name} secrets", justify="right")
        first = next(iter(results.values()))[0]
        for label, lr in first.per_label.items():
            cells = [c for ev, _ in results.values() for c in (rate(ev.per_label[label].tokens),
                                                                rate(ev.per_label[label].secrets))]
            table.add_row(f"{label} ({lr.secrets.n}, {lr.tokens.n})", *cells)
        table.add_row("all", *[c for ev, _ in results.values() for c in (rate(ev.recall), rate(secrets_found(ev)))])
        console.print(table)
        for name, (ev, per_second) in results.items():
            summary.add_row(generator, name, rate(ev.recall), rate(secrets_found(ev)), f"{ev.precision:.3f}",
                            f"{per_second:.0f}")
    console.print(summary)


if __name__ == "__main__":
    main()
