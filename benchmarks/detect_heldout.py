"""Secret detection on the full held-out sets: per type recall with 95 % Wilson intervals, precision, masked share.

The held-out sets are never tuned on (`docs/detection.md` names each set's role): generated business messages
of the `heldout` split (`sdp_core.data.business`: other templates and Faker locales than the `dev` split the rules
are written against; English text about people of eleven locales, and French, Spanish, Italian and German text)
and real Debian changelogs (`sdp_core.data.realtext.build_changelogs`: sign-off names and addresses, among
time-zone offsets, version and bug numbers). `--split dev` or `--split extra` measures a development set instead.

    python -m benchmarks.detect_heldout [--n 1000] [--per-source 1000] [--seed 0] [--policies "general;strict"]
    python -m benchmarks.detect_heldout --write-fixtures tests/fixtures   # the frozen test samples
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.detect_general import measure, rate
from benchmarks.detect_real import sample
from sdp_core.data.business import generate_business
from sdp_core.data.realtext import build_changelogs
from sdp_core.data.records import Record
from sdp_core.detectors import load_spacy

# The frozen samples the tests check: (file, records); generated with seed 1000 + the fixture's index, a seed
# stream apart from the benchmark's.
FIXTURES = {"business_heldout.jsonl": 400, "changelog_heldout.jsonl": 250}


def write_fixtures(folder: Path) -> None:
    sets = {"business_heldout.jsonl": lambda k: generate_business(k, 1000, "heldout"),
            "changelog_heldout.jsonl": lambda k: sample(build_changelogs(), k, 1001)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, k in FIXTURES.items():
        records: list[Record] = sets[name](k)
        rows = [{"text": r.text, "spans": [s.to_dict() for s in r.spans], **r.meta} for r in records]
        (folder / name).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                                   encoding="utf-8")
        print(f"wrote {len(rows)} records to {folder / name}")


def sets(split: str, n: int, per_source: int, seed: int) -> dict[str, list[Record]]:
    """The sets measured: generated business messages of `split`, and on the held-out side real changelogs."""
    out = {f"business:{split}": generate_business(n, seed, split)}
    if split == "heldout":
        out["real:changelog"] = sample(build_changelogs(), per_source, seed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="generated business messages")
    parser.add_argument("--per-source", type=int, default=1000, help="changelog entries at most (a seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=("heldout", "dev", "extra"), default="heldout")
    parser.add_argument("--policies", default="general;strict", help="policies, separated by ';'")
    parser.add_argument("--write-fixtures", type=Path, metavar="FOLDER", help="write the test samples and stop")
    args = parser.parse_args()
    if args.write_fixtures:
        write_fixtures(args.write_fixtures)
        return

    from rich.console import Console
    from rich.table import Table

    load_spacy("en_core_web_sm")
    policies = args.policies.split(";")
    console = Console(width=240)
    summary = Table(title="Per set: token precision, masked share of non-space characters (gold share), all secrets")
    for col in ("set", "records", "policy", "token precision", "masked chars", "gold chars", "secrets found"):
        summary.add_column(col, justify="right")
    for set_name, records in sets(args.split, args.n, args.per_source, args.seed).items():
        results = {name: measure(records, name)[0] for name in policies}
        table = Table(title=f"{set_name} ({len(records)} records, seed {args.seed}): secrets fully masked per type, "
                            "95 % Wilson intervals")
        table.add_column("type (secrets)")
        for name in policies:
            table.add_column(name, justify="right")
        first = next(iter(results.values()))
        for label, lr in first.per_label.items():
            table.add_row(f"{label} ({lr.secrets.n})", *(rate(ev.per_label[label].secrets) for ev in results.values()))
        console.print(table)
        for name, ev in results.items():
            summary.add_row(set_name, str(len(records)), name, f"{ev.precision:.3f}", rate(ev.masked_chars),
                            f"{ev.gold_chars.value:.3f}", rate(ev.secrets))
    console.print(summary)


if __name__ == "__main__":
    main()
