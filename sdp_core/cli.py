"""`sdp-sweep`: the command line. Each command is a pair (add its arguments, run it) in `COMMANDS`.

Errors a user can cause end in one line on stderr and exit code 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import Callable

from sdp_core.config.base import parse_override
from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError, UserError
from sdp_core.io import write_error
from sdp_core.logs import configure_logging


def _add_trial_like(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="your data instead of the config's: JSONL, a CSV / TSV / Parquet table or plain "
                   "text, by its extension (a table's text column: --set data.text_fields=[NAME])")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config field (validated like the file); repeatable")
    p.add_argument("--out", help="output folder (default runs/<name>-<time>); a result already there is replaced")


def data_overrides(args: argparse.Namespace) -> list[str]:
    """`--data FILE` is `--set data.source=file --set data.path=FILE`, applied before the user's `--set`s."""
    extra = ["data.source=file", f"data.path={Path(args.data).resolve()}"] if args.data else []
    return extra + list(args.overrides)


# ------------------------------------------------------------------------------------------ validate

def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help="sweep, search-space or trial YAML files")


def _validate(args: argparse.Namespace) -> int:
    from sdp_core.separation import budget_line
    from sdp_core.sweep.preflight import resolve_sweep, validate_file  # the sweep layer: sampling rules, data sizes

    failed = 0
    for f in args.files:
        try:
            kind = validate_file(f)
            print(f"{f}: ok ({kind})")
            if kind == "sweep" and (sweep := resolve_sweep(f)).experiments is None:
                print(f"{f}: {budget_line(sweep)}")
        except ConfigError as e:
            failed += 1
            for line in e.lines():
                print(line, file=sys.stderr)
        except UserError as e:
            failed += 1
            print(str(e), file=sys.stderr)
    return 2 if failed else 0


# --------------------------------------------------------------------------------------------- trial

def _trial_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="trial YAML (defaults to the embedded default)")
    _add_trial_like(p)
    p.epilog = (f"The mechanism is mechanism.name: --set mechanism.name=NAME, one of {', '.join(MECHANISM_SETTINGS)} "
                f"(default {TrialConfig().mechanism.name}); its own settings are mechanism.<setting> (docs/config.md).")


def _trial(args: argparse.Namespace) -> int:
    from sdp_core.config.loading import load_trial_config
    from sdp_core.trial import default_out_dir, run_trial

    cfg = load_trial_config(args.config, data_overrides(args))
    out = Path(args.out) if args.out else default_out_dir(cfg)
    try:
        result = run_trial(cfg, out, show_progress=True)
    except UserError as e:  # a setting that only fails once used (policy, model path, ε): name its config
        e.where = e.where or args.config or "--set"
        raise
    print(result.summary_line())
    print(result.not_covered_line())
    print(result.data_line(out / "model"))
    print(out / "result.json")
    return 0 if result.state == "finished" else 1


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "validate": ("check config files; every problem on one line with its YAML path", _validate_args, _validate),
    "trial": ("run one trial (no Ray) and write its result JSON", _trial_args, _trial),
}

# Commands of other layers: (name, help, module, add-arguments function, run function). Only the module of the
# command being run is imported (they pull in torch, Ray, ...), so `sdp-sweep --help` stays fast.
LAYER_COMMANDS = [
    ("run", "run a sweep (Ray Tune + Optuna) and write its report", "sdp_core.sweep.cli", "add_run_arguments", "run_run"),
    ("resume", "continue a sweep after a crash", "sdp_core.sweep.cli", "add_resume_arguments", "run_resume"),
    ("report", "rebuild a sweep's report from its stored trial results", "sdp_core.report.cli", "add_report_arguments",
     "run_report"),
    ("detect", "detect and redact secrets in a data file", "sdp_core.detectors.cli", "add_detect_arguments",
     "run_detect"),
    ("epsilon", "ε from (q, σ, steps, δ), σ for a target ε, or ε of a saved ledger", "sdp_core.privacy.cli",
     "add_epsilon_arguments", "run_epsilon"),
    ("audit", "canary exposure of a saved trial model (membership inference and the empirical ε lower bound run "
     "inside each trial, which knows its members: result.json's attacks)", "sdp_core.attacks.cli",
     "add_audit_arguments", "run_audit"),
]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A layer command not being run: listed by `--help`, its module not imported."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI; of the other layers' commands only `command`'s module is imported and its arguments defined."""
    import importlib

    commands: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                              Callable[[argparse.Namespace], int] | None]] = dict(COMMANDS)
    for name, help_text, module, add, run_name in LAYER_COMMANDS:
        mod = importlib.import_module(module) if name == command else None
        commands[name] = ((help_text, getattr(mod, add), getattr(mod, run_name)) if mod
                          else (help_text, _no_arguments, None))
    parser = argparse.ArgumentParser(prog="sdp-sweep", description="Train language models with selective differential "
                                     "privacy and sweep their privacy–utility trade-off on Ray.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more: -v info, -vv debug (counts and masked examples, never a raw secret)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments, run) in commands.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        p.set_defaults(run=run)
    return parser


def check_assignments(argv: list[str]) -> None:
    """Raise a UserError for a `--set` that is no `key.path=value`, before any layer is imported (`run` pulls in
    Ray and torch: seconds before argparse would see the arguments)."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--set", dest="overrides", action="append", default=[])
    for assignment in early.parse_known_args(argv)[0].overrides:
        parse_override(assignment)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_assignments(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args = build_parser(next((a for a in argv if not a.startswith("-")), None)).parse_args(argv)
    configure_logging(args.verbose)
    try:
        return args.run(args)
    except ConfigError as e:
        for line in e.lines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk outside the atomic writers (a folder being made, say): still one line
        if e.errno != errno.ENOSPC:
            raise
        print(f"error: {write_error(e, e.filename or 'output')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
