"""Names and addresses of translators, per language: real credits written by people of many languages.

The set (`sdp_core.data.realtext.build_translations`): the header of every message catalogue installed under
`/usr/share/locale` (`Last-Translator: Name <address>`, `Language-Team: Team <address>`, among dates, versions and
plural rules), split in two by the catalogue's text domain: `dev`, the one rules are written against, and
`heldout`, of which only per-language totals are printed. Each catalogue gives two records: its header, and the
same credit in a PO file's opening comment (`# Name <address>, YEAR.`, no field name before it). Per language (the catalogue's locale, `sr` and
`sr@latin` apart) and policy: names (per record kind) and addresses fully masked, with 95 % Wilson intervals; languages with fewer
than `--min-names` names are pooled in one row.

    python -m benchmarks.detect_languages [--split heldout] [--policies general] [--min-names 20]
    python -m benchmarks.detect_languages --split dev --misses 40   # the names missed, development set only
    python -m benchmarks.detect_languages --write-fixture tests/fixtures/translations_heldout.jsonl   # the test sample
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from benchmarks.detect_general import rate
from benchmarks.detect_real import sample
from sdp_core.data.realtext import build_translations
from sdp_core.data.records import Record
from sdp_core.detectors import evaluate, get_policy, load_spacy


def by_language(records: list[Record], min_names: int) -> dict[str, list[Record]]:
    """Records per language; languages with fewer than `min_names` gold names pooled under `other`."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        groups[r.meta["origin"].split("/")[0]].append(r)
    out: dict[str, list[Record]] = {}
    for language in sorted(groups):
        names = sum(s.label == "name" for r in groups[language] for s in r.spans or ())
        out.setdefault(language if names >= min_names else "other", []).extend(groups[language])
    return dict(sorted(out.items(), key=lambda kv: kv[0] == "other"))


# Records in the frozen test sample of the held-out split; seed 1002, a stream apart from the other fixtures'.
FIXTURE_SIZE = 300


def write_fixture(path: Path) -> None:
    rows = [{"text": r.text, "spans": [s.to_dict() for s in r.spans or ()], **r.meta}
            for r in sample(build_translations("heldout"), FIXTURE_SIZE, 1002)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} records to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("dev", "heldout"), default="heldout")
    parser.add_argument("--policies", default="general", help="policies, separated by ';'")
    parser.add_argument("--min-names", type=int, default=20, help="names a language needs for a row of its own")
    parser.add_argument("--misses", type=int, default=0, help="print up to N names missed (development set only)")
    parser.add_argument("--write-fixture", type=Path, metavar="PATH", help="write the test sample and stop")
    args = parser.parse_args()
    if args.write_fixture:
        write_fixture(args.write_fixture)
        return
    if args.misses and args.split != "dev":
        parser.error("--misses reads the development set only")

    from rich.console import Console
    from rich.table import Table

    load_spacy("en_core_web_sm")
    records = build_translations(args.split)
    groups = by_language(records, args.min_names)
    policies = args.policies.split(";")
    detected = {name: get_policy(name).detect([r.text for r in records]) for name in policies}
    index = {id(r): i for i, r in enumerate(records)}
    table = Table(title=f"translators' credits, {args.split} ({len(records)} catalogues): names and addresses "
                        "fully masked, 95 % Wilson")
    table.add_column("language (names)")
    columns = [("name", "translation:header"), ("name", "translation:comment"), ("email", None)]
    for name in policies:
        for label, source in columns:
            table.add_column(f"{name}: {label}" + (f" ({source.split(':')[1]})" if source else ""), justify="right")
    for language, group in [*groups.items(), ("all", records)]:
        cells = []
        for name in policies:
            for label, source in columns:
                part = [r for r in group if source in (None, r.meta["source"])]
                ev = evaluate(part, [detected[name][index[id(r)]] for r in part])
                cells.append(rate(ev.per_label[label].secrets) if label in ev.per_label else "-")
        names = sum(s.label == "name" for r in group for s in r.spans or ())
        table.add_row(f"{language} ({names})", *cells)
    Console(width=240).print(table)
    shown = 0
    for r, spans in zip(records, detected[policies[0]]):
        for s in r.spans or ():
            covered = [d for d in spans if d.start < s.end and s.start < d.end]
            if s.label == "name" and shown < args.misses and not any(
                    d.start <= s.start and s.end <= d.end for d in covered):
                shown += 1
                print(f"{r.meta['origin']}: {r.text[s.start:s.end]!r} detected {[r.text[d.start:d.end] for d in covered]}")


if __name__ == "__main__":
    main()
