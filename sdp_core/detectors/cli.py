"""`sdp-sweep detect DATA --policy NAME --out FILE [--show N] [--review N]`: detect, redact, report.

Prints counts and rates only: the types the policy masks and those it leaves in the clear (for a policy that
declares them), records, tokens, the share of tokens redacted and of non-space characters masked, spans per
label; when the data has gold spans, token recall and precision, secrets fully masked, the masked share of
characters beside the gold share, and per-label recall, with 95 % Wilson intervals; when it has none, the policy's
recall per type estimated by inserting secrets into copies of the records (`estimate.py`); and when a review's
labels lie beside the data (`review.py`), recall on the reviewed records. `--show N` prints N *redacted*
examples. `--review N` shows N sampled records *in the clear* with the policy's spans, reads the reviewer's
answers from standard input, which must be a terminal, and stores the records the reviewer finished as gold spans
in `DATA.review.jsonl` (or `--labels FILE`). Never a
raw secret in anything but the review itself. `--out` gets one JSONL line per record: `{"text", "redacted",
"spans"}`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdp_core.config import DataConfig, DetectorConfig, parse_model, parse_override
from sdp_core.detectors.estimate import HALF_WIDTH, PER_TYPE, ROUND
from sdp_core.errors import UserError

DATA_SETTINGS = ("text_fields", "label_field")
"""The data settings `detect --set` takes: which columns (or JSONL keys) hold the text and the label."""


def _pattern(value: str) -> tuple[str, str]:
    name, sep, regex = value.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=REGEX, got {value!r}")
    return name.strip(), regex


def add_detect_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DetectorConfig()
    parser.add_argument("data", help="JSONL (with optional gold `spans`), CSV / TSV / Parquet table or plain-text file")
    parser.add_argument("--policy", default=defaults.policy, help=f"policy name or union a,b (default {defaults.policy})")
    parser.add_argument("--out", help="write one JSONL line per record: text, redacted, spans")
    parser.add_argument("--show", type=int, default=0, metavar="N", help="print N redacted examples")
    parser.add_argument("--review", type=int, default=0, metavar="N",
                        help="review N sampled records: mark what the policy missed (answers on standard input)")
    parser.add_argument("--labels", help="the review's labels file (default: DATA.review.jsonl beside the data)")
    parser.add_argument("--estimate-per-type", type=int, default=PER_TYPE, metavar="N",
                        help=f"data without gold spans: the recall estimate inserts secrets of each type in rounds "
                             f"of {ROUND} until its 95%% interval is within ±{HALF_WIDTH}, at most N per type "
                             f"(default {PER_TYPE})")
    parser.add_argument("--pattern", type=_pattern, action="append", default=[], metavar="NAME=REGEX",
                        help="a user regex policy (repeatable); use NAME in --policy")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="data.text_fields=[NAME]",
                        help="the columns (JSONL: keys) holding the text, data.text_fields=[NAME, ...], or the label, "
                        "data.label_field=NAME; repeatable")
    parser.add_argument("--spacy-model", default=defaults.spacy_model)
    parser.add_argument("--cache-dir", help="detection cache (default $SDP_CACHE_DIR/detections or ~/.cache/sdp-sweep/detections)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the detection cache")


def data_config(path: str, overrides: list[str]) -> DataConfig:
    """The data file with the `--set data.<setting>=...` assignments `detect` takes (`DATA_SETTINGS`)."""
    settings = {}
    for assignment in overrides:
        key, value = parse_override(assignment)
        if len(key) != 2 or key[0] != "data" or key[1] not in DATA_SETTINGS:
            raise UserError(f"--set {assignment!r}: detect takes " + " or ".join(f"data.{s}" for s in DATA_SETTINGS))
        settings[key[1]] = value
    return parse_model(DataConfig, {"source": "file", "path": path, **settings}, "--set")


def run_detect(args: argparse.Namespace) -> int:
    import sys

    from sdp_core.data.loaders import load_records
    from sdp_core.detectors.cache import detect_records
    from sdp_core.detectors.estimate import estimable_types, estimate_summary
    from sdp_core.detectors.evaluation import detection_stats, evaluate
    from sdp_core.detectors.registry import CLAIM_RECALL, get_policy, policy_types
    from sdp_core.detectors.review import Labels, labels_path, recall_lines, review, review_recall
    from sdp_core.io import atomic_write_text
    from sdp_core.text.redaction import redact

    if args.show < 0:
        raise UserError("--show must be >= 0")
    if args.review < 0:
        raise UserError("--review must be >= 0")
    if args.review and (sys.stdin is None or not sys.stdin.isatty()):
        raise UserError("--review needs a person at a terminal: standard input is not one (the answers would not "
                        "be a review)")
    if args.estimate_per_type < 1:
        raise UserError("--estimate-per-type must be >= 1")
    config = parse_model(DetectorConfig, {"policy": args.policy, "patterns": dict(args.pattern),
                                          "spacy_model": args.spacy_model}, "--pattern")
    policy = get_policy(config.policy, config)
    data = data_config(args.data, args.overrides)
    records = load_records(args.data, data.text_fields, data.label_field)
    label_file = Path(args.labels) if args.labels else labels_path(args.data)
    labels = Labels.read(label_file)
    detected = detect_records(records, policy, args.cache_dir, use_cache=not args.no_cache, progress=True)
    texts = [r.text for r in records]
    redacted = [redact(t, s) for t, s in zip(texts, detected)]

    stats = detection_stats(texts, detected)
    print(f"policy {policy.key}")
    types = policy_types(config.policy)
    if types:
        print(f"  masks {', '.join(types.masks)}")
        if types.partly:
            print(f"  masks where it finds them, but does not claim (recall below {CLAIM_RECALL} on held-out data) "
                  f"{', '.join(types.partly)}")
        print(f"  leaves in the clear {', '.join(types.clear) or 'nothing it knows of'}")
    else:
        print(f"  secret types: {config.policy!r} declares none (general, strict and conservative do)")
    print(f"records {stats.records}  tokens {stats.tokens}  redacted tokens {stats.redacted_tokens} "
          f"({stats.redacted_fraction:.2%} of tokens)  masked characters {stats.masked_characters} "
          f"({stats.masked_char_share:.2%} of non-space characters)")
    for label, count in stats.spans_per_label.items():
        print(f"  spans {label:<16} {count}")
    gold = [r for r in records if r.spans is not None]
    if gold:
        ev = evaluate(gold, [d for r, d in zip(records, detected) if r.spans is not None])
        print(f"gold-annotated records {ev.records}: token recall {ev.recall}  token precision {ev.precision:.4f}  "
              f"missing rate m {ev.missing_rate}  (95% Wilson intervals)")
        print(f"  secrets fully masked {ev.secrets}")
        print(f"  masked share of non-space characters {ev.masked_chars.value:.2%}  "
              f"gold share {ev.gold_chars.value:.2%}")
        for lr in ev.per_label.values():
            print(f"  recall {lr.label:<16} tokens {lr.tokens}  secrets {lr.secrets}")
    elif records:
        estimate = estimate_summary(records, policy, types=estimable_types(types.masks if types else None),
                                    per_type=args.estimate_per_type)
        print(f"no gold spans: recall per type estimated by {estimate['method']} (95% Wilson intervals)")
        for kind, r in estimate["per_type"].items():
            warn = f"  below {estimate['warn_below']}" if r["warn"] else ""
            print(f"  estimated recall {kind:<14} {r['value']:.4f} [{r['low']:.4f}, {r['high']:.4f}] "
                  f"±{r['half_width']:.4f} ({r['k']}/{r['n']}){warn}")
        cost = estimate["cost"]
        print(f"  cost: {cost['inserted']} secrets inserted into copies of the records and detected, "
              f"{cost['seconds']:.1f} s")
        print(f"  it cannot see {estimate['cannot_see']}")
    for text in redacted[: args.show]:
        print("---")
        print(text)
    if args.out:
        lines = (json.dumps({"text": t, "redacted": r, "spans": [s.to_dict() for s in d]})
                 for t, r, d in zip(texts, redacted, detected))
        atomic_write_text(args.out, "".join(line + "\n" for line in lines))
        print(f"wrote {args.out}")
    if args.review:
        from rich.console import Console

        reviewed = review(records, detected, args.review, labels, policy.key, sys.stdin, Console(highlight=False))
        if len(reviewed.spans) > len(labels.spans):
            reviewed.write(label_file)
            print(f"wrote the review's labels to {label_file}")
        else:
            print(f"no record reviewed: {label_file} unchanged")
        labels = reviewed
    on_reviewed = review_recall(records, detected, labels)
    if on_reviewed is not None:
        print(f"reviewed records {on_reviewed.records} (labels in {label_file}): recall of this policy on them")
        print("\n".join(recall_lines(on_reviewed)))
    return 0
