"""Numbers that are no secret on real release notes: the share of digit runs outside every secret that a policy masks,
token precision with capitalised words outside the gold left out, the masked share of characters, and recall of the
gold names and addresses.

Two sets of upstream release notes that Debian ships (`sdp_core.data.realtext.build_release_notes`): `changelog`
(ChangeLog files: the development set, the one rules are written against) and `news` (NEWS files: held out, only
its totals are printed); and `commits`, held out too: a seeded sample of the commits of the git repository
`--repo` as `git log` prints them (`build_commit_log`: authors' and trailers' names and addresses among hashes,
dates, time-zone offsets, pull-request and issue numbers). A digit run (`\\d+`) counts as outside every secret when no gold span touches it (versions,
dates, bug and pull-request numbers, hardware model names); it is masked when any of its characters is. A token
(a run of non-space characters) outside the gold that starts with a capital may be a name the gold does not
annotate, so token precision leaves those out.

    python -m benchmarks.detect_numbers [--n 1000] [--seed 0] [--policies general] [--examples 40]
    python -m benchmarks.detect_numbers --sets commits --repo ../curl   # a clone of github.com/curl/curl
    python -m benchmarks.detect_numbers --repo ../curl --write-fixture tests/fixtures/commits_heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from dataclasses import dataclass

from benchmarks.detect_general import rate, timed_detect
from benchmarks.detect_real import sample
from sdp_core.data.realtext import build_commit_log, build_release_notes
from sdp_core.data.records import Record, Span
from sdp_core.detectors import evaluate, get_policy, load_spacy
from sdp_core.detectors.evaluation import Rate

_DIGITS = re.compile(r"\d+")
_TOKEN = re.compile(r"\S+")


def _touches(start: int, end: int, spans: list[Span] | tuple[Span, ...]) -> bool:
    return any(s.start < end and start < s.end for s in spans)


@dataclass(frozen=True)
class NumberStats:
    digit_runs_masked: Rate  # digit runs outside every gold span that the policy masks
    token_precision: float  # masked tokens inside gold / masked tokens, capitalised tokens outside gold left out
    examples: Counter  # the masked tokens of those digit runs, with the label that masked them


def number_stats(records: list[Record], detected: list[list[Span]]) -> NumberStats:
    masked_runs = runs = masked_tokens = true_tokens = 0
    examples: Counter = Counter()
    for record, spans in zip(records, detected):
        gold = record.spans or ()
        for m in _DIGITS.finditer(record.text):
            if _touches(m.start(), m.end(), gold):
                continue
            runs += 1
            hit = [s for s in spans if s.start < m.end() and m.start() < s.end]
            if hit:
                masked_runs += 1
                token = next(t for t in _TOKEN.finditer(record.text) if t.start() <= m.start() < t.end())
                examples[(token.group(), hit[0].label)] += 1
        for t in _TOKEN.finditer(record.text):
            in_gold = _touches(t.start(), t.end(), gold)
            if not in_gold and t.group().lstrip("([\"'<")[:1].isupper():
                continue
            if _touches(t.start(), t.end(), spans):
                masked_tokens += 1
                true_tokens += in_gold
    return NumberStats(Rate.of(masked_runs, runs), true_tokens / masked_tokens if masked_tokens else float("nan"),
                       examples)


# Commits in the frozen test sample of the held-out commit log; seed 1003, a stream apart from the other fixtures'.
FIXTURE_SIZE = 200


def write_fixture(repo: Path, path: Path) -> None:
    rows = [{"text": r.text, "spans": [s.to_dict() for s in r.spans or ()], **r.meta}
            for r in build_commit_log(repo, FIXTURE_SIZE, 1003)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} records to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="records per set at most (a seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default="general", help="policies, separated by ';'")
    parser.add_argument("--sets", default="changelog;news",
                        help="sets, separated by ';': changelog, news, commits (news and commits are held out)")
    parser.add_argument("--repo", type=Path, help="the git repository whose commits the `commits` set samples")
    parser.add_argument("--examples", type=int, default=0,
                        help="print the N most common masked non-secret tokens of the development set")
    parser.add_argument("--write-fixture", type=Path, metavar="PATH",
                        help="write the test sample of the commits of --repo and stop")
    args = parser.parse_args()
    if args.write_fixture:
        if args.repo is None:
            parser.error("--write-fixture needs --repo")
        write_fixture(args.repo, args.write_fixture)
        return
    load_spacy("en_core_web_sm")
    for kind in args.sets.split(";"):
        if kind == "commits" and args.repo is None:
            parser.error("the commits set needs --repo")
        records = (build_commit_log(args.repo, args.n, args.seed) if kind == "commits"
                   else sample(build_release_notes(kind), args.n, args.seed))
        for name in args.policies.split(";"):
            detected, cpu, _ = timed_detect(get_policy(name), [r.text for r in records])
            stats = number_stats(records, detected)
            ev = evaluate(records, detected)
            per_label = "  ".join(f"{label} {rate(lr.secrets)} ({lr.secrets.n})" for label, lr in ev.per_label.items())
            print(f"{kind} ({len(records)} records) {name}: digit runs outside secrets masked "
                  f"{rate(stats.digit_runs_masked)} ({stats.digit_runs_masked.k}/{stats.digit_runs_masked.n})  "
                  f"token precision {stats.token_precision:.3f}  masked chars {ev.masked_chars.value:.3f} "
                  f"(gold {ev.gold_chars.value:.3f})  {per_label}  {len(records) / cpu:.1f} records/CPU-s")
            if args.examples and kind == "changelog":
                for (token, label), count in stats.examples.most_common(args.examples):
                    print(f"  {count:4d}  {label:<14} {token}")


if __name__ == "__main__":
    main()
