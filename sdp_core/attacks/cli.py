"""`sdp-sweep audit MODEL_DIR --canary FORMAT [--context TEXT] [--secret VALUE ...] [--method exact|estimate] [--json]`.

A saved model directory holds no training text, so the canary values come from the user (`--secret`, repeatable;
they are never printed: canaries are reported as #1, #2, ... in the order given). Without `--secret`, the exact
enumeration still says whether the model singles out one candidate of the format: the probability share of its
top candidate among all |R| (1/|R| for an indifferent model) and the exposure that candidate would have. The top
candidate itself is never printed either: it may well be a memorised secret.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from sdp_core.config.canary import CanaryFormat
from sdp_core.errors import UserError

# The scoring modules (torch, transformers) are imported by the functions that run the audit, so `audit --help`
# and a malformed argument answer in a fraction of a second.


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", help="a trial's saved model directory")
    parser.add_argument("--canary", required=True, help="canary format, e.g. 'My ID is {dddddd}'")
    parser.add_argument("--context", default="", metavar="TEXT",
                        help="what precedes the canary in its record, after the record start: 'USR: ' for a line of "
                        "dialog data, ' ' for a sentence of prose (a trial's canaries.inserted_as); default none")
    parser.add_argument("--secret", action="append", default=[], metavar="VALUE",
                        help="an inserted canary value (repeatable); never printed")
    parser.add_argument("--method", choices=["exact", "estimate"], default="exact",
                        help="exact: enumerate every candidate (trie); estimate: skew-normal fit to a sample")
    parser.add_argument("--limit", type=int, default=1_000_000, help="largest secret space enumerated exactly")
    parser.add_argument("--sample-size", type=int, default=10_000, help="candidates sampled by --method estimate")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _exact_scores(args: argparse.Namespace, model, tokenizer, fmt: CanaryFormat):
    from sdp_core.attacks.candidates import default_context
    from sdp_core.attacks.exposure import score_space
    from sdp_core.progress import count_progress

    with count_progress("scoring candidates", fmt.space_size) as advance:
        return score_space(model, tokenizer, fmt, context=default_context(tokenizer, args.context),
                           batch_size=args.batch_size, limit=args.limit, progress=advance)


def run_audit(args: argparse.Namespace) -> int:
    """Run the audit; a `UserError` (bad format, secret not fitting it, space above --limit) propagates to the
    main CLI, which prints it as one line and exits 2."""
    from sdp_core.attacks.candidates import default_context, secret_chars
    from sdp_core.attacks.estimate import estimate_exposures
    from sdp_core.attacks.exposure import check_enumerable, exposure_floor, rank_secrets, space_summary
    from sdp_core.models.checkpoint import load_model

    fmt = CanaryFormat.parse(args.canary)
    secret_chars(fmt, args.secret)  # reject a malformed secret before the model is loaded
    if args.method == "estimate" and not args.secret:
        raise UserError("--method estimate needs the canary values (--secret): it has no enumeration to summarise")
    if args.method == "exact":
        check_enumerable(fmt, args.limit)
        if fmt.suffix.strip():  # the trial scores its canaries the same way, so the audit does too
            print(f"note: the text after the placeholder ({fmt.suffix.strip()!r}) is scored after every one of the "
                  f"{fmt.space_size:,} candidates: one more model step each, several times the time of the format "
                  "without it; with --secret, --method estimate ranks against a sample instead (Carlini et al.'s "
                  "skew-normal extrapolation, seconds)", file=sys.stderr)
    model, tokenizer, _ = load_model(args.model_dir)
    out: dict = {"model_dir": str(args.model_dir), "format": fmt.template, "method": args.method,
                 "space_size": fmt.space_size, "max_exposure": math.log2(fmt.space_size),
                 "floor": exposure_floor(fmt.space_size)}
    if args.method == "estimate":
        results, out["fit"] = estimate_exposures(model, tokenizer, fmt, args.secret,
                                                 context=default_context(tokenizer, args.context),
                                                 sample_size=args.sample_size, seed=args.seed,
                                                 batch_size=args.batch_size)
    else:
        scores = _exact_scores(args, model, tokenizer, fmt)
        out["summary"] = space_summary(scores)
        results = rank_secrets(scores, fmt, args.secret)
    if results:
        out["ranks"] = [r["rank"] for r in results]
        out["exposures"] = [r["exposure"] for r in results]
        out["exposure_mean"] = sum(out["exposures"]) / len(results)
        out["exposure_max"] = max(out["exposures"])
    if args.json:
        print(json.dumps(out))
    else:
        _print_table(out)
    return 0


def _print_table(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"canary exposure: {out['format']} ({out['method']}, |R| = {out['space_size']:,})")
    table.add_column("canary")
    table.add_column("rank", justify="right")
    table.add_column("exposure (bits)", justify="right")
    for n, (rank, exposure) in enumerate(zip(out.get("ranks", []), out.get("exposures", [])), 1):
        table.add_row(f"#{n}", f"{rank:,.0f}", f"{exposure:.2f}")
    if "exposures" in out:
        table.add_row("mean", "", f"{out['exposure_mean']:.2f}")
        table.add_row("max", "", f"{out['exposure_max']:.2f}", end_section=True)
    table.caption = (f"max possible exposure log2|R| = {out['max_exposure']:.2f}; a random rank's "
                     f"{out['floor']:.2f}")
    console = Console()
    if "exposures" in out:
        console.print(table)
    if "summary" in out:  # the most likely candidate ranks first whatever the model: its share, not its rank, tells
        s = out["summary"]
        console.print(f"The most likely of the {out['space_size']:,} candidates (unnamed) holds {s['top_share']:.3g} of "
                      f"their probability: {s['top_share'] / s['uniform_share']:.1f} × the {s['uniform_share']:.1g} of "
                      f"a model indifferent to them, {s['top_gap_bits']:.2f} bits ahead of the next. Being the most "
                      "likely, it ranks first whatever the model; a share near 1 × uniform means none is singled out.",
                      highlight=False)
