"""`sdp-sweep detect DATA --policy NAME --out FILE [--show N]`: detect, redact, report.

Prints counts and rates only (records, tokens, the share of tokens redacted and of non-space characters masked,
spans per label; when the data has gold spans, token recall and precision, secrets fully masked, the masked
share of characters beside the gold share, and per-label recall, with 95 % Wilson intervals); `--show N` prints N *redacted* examples. Never a raw
secret on the terminal. `--out` gets one JSONL line per record: `{"text", "redacted", "spans"}`.
"""

from __future__ import annotations

import argparse
import json

from sdp_core.config import DataConfig, DetectorConfig, parse_model, parse_override
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
    from sdp_core.data.loaders import load_records
    from sdp_core.detectors.cache import detect_records
    from sdp_core.detectors.evaluation import detection_stats, evaluate
    from sdp_core.detectors.registry import get_policy
    from sdp_core.io import atomic_write_text
    from sdp_core.text.redaction import redact

    if args.show < 0:
        raise UserError("--show must be >= 0")
    config = parse_model(DetectorConfig, {"policy": args.policy, "patterns": dict(args.pattern),
                                          "spacy_model": args.spacy_model}, "--pattern")
    policy = get_policy(config.policy, config)
    data = data_config(args.data, args.overrides)
    records = load_records(args.data, data.text_fields, data.label_field)
    detected = detect_records(records, policy, args.cache_dir, use_cache=not args.no_cache, progress=True)
    texts = [r.text for r in records]
    redacted = [redact(t, s) for t, s in zip(texts, detected)]

    stats = detection_stats(texts, detected)
    print(f"policy {policy.key}")
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
    for text in redacted[: args.show]:
        print("---")
        print(text)
    if args.out:
        lines = (json.dumps({"text": t, "redacted": r, "spans": [s.to_dict() for s in d]})
                 for t, r, d in zip(texts, redacted, detected))
        atomic_write_text(args.out, "".join(line + "\n" for line in lines))
        print(f"wrote {args.out}")
    return 0
