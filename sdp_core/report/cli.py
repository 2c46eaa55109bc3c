"""`sdp-sweep report DIR`: rebuild a sweep's report from its stored trial results (nothing is re-run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sdp_core.errors import UserError


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_dir", metavar="DIR", help="sweep folder (holds sweep.yaml and trials/*.json)")
    parser.add_argument("--out", help="report folder (default: DIR/report/)")


def run_report(args: argparse.Namespace) -> int:
    """Build the report and print its folder; a user error is one line on stderr and exit code 2."""
    from sdp_core.report import build_report

    try:
        out = build_report(Path(args.sweep_dir), Path(args.out) if args.out else None)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out / "index.html")
    return 0
