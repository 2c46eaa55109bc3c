"""`sdp-sweep epsilon`: ε for (q, σ, steps, δ), σ for a target ε, or the ε of a saved trial ledger.

A calibrated σ is printed rounded up (`round_up`), so that running the command again with the printed σ spends
at most the target: ε decreases as σ grows. A given σ is printed as given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdp_core.errors import UserError
from sdp_core.privacy.commands import epsilon_command
from sdp_core.privacy.ledger import epsilon_from_ledger
from sdp_core.privacy.numbers import epsilon_number, round_up
from sdp_core.privacy.relations import ADD_REMOVE, RELATIONS

SIGMA_DIGITS = 6


def add_epsilon_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sample-rate", type=float, help="q: Poisson sampling rate of each step")
    p.add_argument("--sigma", type=float, help="noise multiplier σ (omit with --target-epsilon)")
    p.add_argument("--steps", type=int, help="number of DP-SGD steps")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--accountant", default="rdp", choices=["rdp", "prv", "pld"])
    p.add_argument("--relation", default=ADD_REMOVE, choices=list(RELATIONS),
                   help="neighbouring datasets: add/remove one record (as most DP-SGD papers) or replace one "
                   "(bounded DP, the relation of SDP and CRT's confidentiality)")
    p.add_argument("--target-epsilon", type=float, help="calibrate σ for this ε instead of computing ε")
    p.add_argument("--ledger", help="a trial's result.json (or a saved ledger): recompute its ε")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _ledger_dict(path: str) -> tuple[dict, dict]:
    """The saved ledger, and from a trial's result.json whether its guarantee does not hold (`holds: false` with
    its `condition`: noise reproducible from the published seed)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read a ledger: {e}", path) from None
    ledger = data.get("ledger", data) if isinstance(data, dict) else None
    if not isinstance(ledger, dict):
        raise UserError("no ledger in this file", path)
    privacy = data.get("privacy") if isinstance(data.get("privacy"), dict) else {}
    void = {k: privacy.get(k) for k in ("holds", "condition")} if privacy.get("holds") is False else {}
    return ledger, void


def run_epsilon(args: argparse.Namespace) -> int:
    if args.ledger:
        try:
            ledger, void = _ledger_dict(args.ledger)
            report = {**epsilon_from_ledger(ledger), **void}
        except UserError as e:
            e.where = e.where or args.ledger  # name the file the bad ledger came from
            raise
    else:
        if args.sample_rate is None or args.steps is None:
            raise UserError("epsilon needs --sample-rate and --steps (or --ledger FILE)")
        report = epsilon_command(args.sample_rate, args.sigma, args.steps, args.delta, args.accountant,
                                 args.target_epsilon, args.relation)
    if args.json:
        keys = ("epsilon", "delta", "sigma", "accountant", "notion", "neighbouring")
        print(json.dumps({k: report.get(k) for k in keys} | {k: v for k, v in report.items() if k not in keys and k != "plan"}))
    else:
        print(_line(report))
        if "add_remove" in report:  # a ledger saved with privacy.compare_add_remove
            print(f"{_line(report['add_remove'])}: {report['add_remove']['label']}")
    return 0


def _line(report: dict) -> str:
    calibrated = report.get("target_epsilon") is not None
    sigma = report.get("sigma")
    sigma = "" if sigma is None else f", σ={round_up(sigma, SIGMA_DIGITS) if calibrated else sigma}"
    void = f"; {report.get('condition')}" if report.get("holds") is False else ""
    return (f"ε = {epsilon_number(report['epsilon'], 5)} ({report['notion']}, {RELATIONS[report['neighbouring']]}, "
            f"δ = {report['delta']:g}, {report['accountant']}{sigma}){void}")
