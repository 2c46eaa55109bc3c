"""Secret detection on the held-out sets: per type secret recall, token precision and masked share, per policy.

The held-out sets are never tuned on (`docs/detection.md` names each set's role): generated business messages
of the `heldout` split (`sdp_core.data.business`: other templates and Faker locales than the `dev` split the rules
are written against; English text about people of eleven locales, and French, Spanish, Italian and German text)
and real Debian changelogs (`sdp_core.data.realtext.build_changelogs`: sign-off names and addresses, among
time-zone offsets, version and bug numbers). `--split dev` measures the development set instead.

    python -m benchmarks.detect_heldout [--n 1000] [--per-source 1000] [--seed 0] [--policies "general;strict"]
    python -m benchmarks.detect_heldout --write-fixtures tests/fixtures   # the frozen test samples
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.detect_real import sample
from sdp_core.data.business import generate_business
from sdp_core.data.realtext import build_changelogs
from sdp_core.data.records import Record

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-fixtures", type=Path, metavar="FOLDER", help="write the test samples and stop")
    args = parser.parse_args()
    if args.write_fixtures:
        write_fixtures(args.write_fixtures)


if __name__ == "__main__":
    main()
