"""`sdp-sweep run` and `sdp-sweep resume`: argument parsing and the steps around the driver.

Everything a user can get wrong (config, search space, address) is checked before the output folder is
created, so a rejected sweep leaves nothing behind. Ray is imported only once a sweep really starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from types import FrameType

from sdp_core.config.sweep import SweepConfig
from sdp_core.errors import UserError
from sdp_core.separation import budget_line, trials_due
from sdp_core.row import TRIAL_STATES
from sdp_core.sweep.preflight import preflight, resolve_sweep
from sdp_core.sweep.store import SweepStore


def _add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="Ray cluster to join (host:port, ray://host:port or auto); default: "
                                     "RAY_ADDRESS, else a new local Ray. Inside `ray job submit`: the job's cluster")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="sweep YAML (see sweeps/)")
    p.add_argument("--data", help="your data for every trial: JSONL, a CSV / TSV / Parquet table or plain text, by "
                   "its extension (base.data.source=file; a table's text column: --set base.data.text_fields=[NAME])")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a sweep field, e.g. base.training.epochs=2 or num_trials=3; repeatable")
    p.add_argument("--out", help="output folder (default: reports/<sweep name>; must be absolute inside a Ray job)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing sweep folder at --out")
    _add_cluster_arguments(p)


def add_resume_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="the sweep's output folder (holds sweep.yaml and optuna.journal)")
    _add_cluster_arguments(p)


def output_folder(out: str | None, cfg: SweepConfig, overwrite: bool) -> Path:
    from sdp_core.sweep.jobs import in_ray_job

    if in_ray_job() and not (out and Path(out).is_absolute()):
        raise UserError("inside `ray job submit` pass --out with an absolute path: the job's working directory "
                        "is a temporary copy")
    folder = Path(out or Path("reports") / cfg.name).resolve()
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        hint = "continue it with `sdp-sweep resume`" if (folder / "sweep.yaml").exists() else "choose another --out"
        raise UserError(f"output folder is not empty ({hint}, or pass --overwrite)", str(folder))
    return folder


def _report(store: SweepStore, keep_models: str) -> Path:
    """Build the sweep's report, then (`keep_models: front`) delete the models of trials off its Pareto front; the
    path of its `index.html`, to show the user."""
    from sdp_core.report import build_report, front_trial_ids  # loaded only once a sweep has rows to show

    index = build_report(store.root) / "index.html"
    if keep_models == "front" and store.models_dir.is_dir():
        front = front_trial_ids(store.root)
        for folder in store.models_dir.iterdir():
            if folder.name not in front:
                shutil.rmtree(folder)
    return index


def stop_as_on_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler while a sweep runs: what Ctrl-C does now (Tune's graceful stop inside its run, else a
    KeyboardInterrupt). Ray's own handler, installed by `ray.init`, exits mid-run with a stack dump instead."""
    on_sigint = signal.getsignal(signal.SIGINT)
    if not callable(on_sigint):
        raise KeyboardInterrupt
    on_sigint(signal.SIGINT, frame)


def _sweep(store: SweepStore, cfg: SweepConfig) -> int:
    """Run the sweep to completion on the connected Ray with the live view, then report; the exit code. Stopped by
    Ctrl-C or SIGTERM, it says how to continue."""
    import ray

    from sdp_core.sweep.driver import run_sweep
    from sdp_core.sweep.live import LiveView

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # the live view is the output: Tune's reporter stays quiet
    # Ctrl-C is a KeyboardInterrupt until Tune's run installs its graceful stop (which it leaves installed when its
    # run ends: restored here, for a caller that runs several sweeps in one process); SIGTERM does what Ctrl-C does.
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop_as_on_ctrl_c)
    try:
        with LiveView(store, partial(trials_due, cfg)) as view:
            rows = run_sweep(cfg, cfg.search_space, store, callbacks=[view])
    except KeyboardInterrupt:
        print(f"interrupted; continue the sweep with: sdp-sweep resume {store.root}", file=sys.stderr)
        return 130
    finally:
        ray.shutdown()
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    summary, last, code = closing_lines(rows, trials_due(cfg, rows), store.root)
    print("\n".join(summary))
    if rows:  # stopped before any trial finished: nothing to report
        print(_report(store, cfg.keep_models))
    if last:
        print(last)
    return code


def closing_lines(rows: dict[str, dict], planned: int, root: Path) -> tuple[list[str], str | None, int]:
    """What a sweep prints around its report's path, and its exit code: the trials by state (and, when it stopped
    early, how to continue: exit 1) before the path; after it, last, why no trial finished (from the trials'
    errors: exit 1), or how many did not finish."""
    counts = {s: sum(r["state"] == s for r in rows.values()) for s in TRIAL_STATES}
    states = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    summary = [f"{len(rows)}/{planned} trials" + (f": {states}" if states else "")]
    code = 0
    if len(rows) < planned:
        summary.append(f"the sweep stopped early; continue it with: sdp-sweep resume {root}")
        code = 1
    unfinished = counts["infeasible"] + counts["failed"]
    errors = Counter(r["error"].splitlines()[0][:300] for r in rows.values()
                     if r["state"] in ("infeasible", "failed") and r.get("error"))
    if rows and not counts["finished"]:
        why = "".join(f"; {n} of {len(rows)} with: {error}" for error, n in errors.most_common(1))
        return summary, f"error: no trial finished{why}", 1
    if unfinished:
        return summary, (f"{unfinished} of {len(rows)} trials did not finish (infeasible or failed; the report's "
                         "unfinished-trials table has their errors)"), code
    return summary, None, code


def run_run(args: argparse.Namespace) -> int:
    data = ["base.data.source=file", f"base.data.path={Path(args.data).resolve()}"] if args.data else []
    cfg = resolve_sweep(args.sweep, data + list(args.overrides))
    preflight(cfg, args.sweep)
    folder = output_folder(args.out, cfg, args.overwrite)
    if cfg.experiments is None:  # what the search can rank, said before it spends its budget
        print(budget_line(cfg), flush=True)
    from sdp_core.sweep.jobs import connect_ray

    connect_ray(args.address)  # an address that does not answer fails here, before the folder exists
    if args.overwrite and folder.exists():
        shutil.rmtree(folder)
    store = SweepStore(folder)
    store.create(cfg)
    return _sweep(store, cfg)


def run_resume(args: argparse.Namespace) -> int:
    store = SweepStore(Path(args.dir).resolve())
    cfg = store.load_config()
    if isinstance(cfg.search_space, str) and cfg.experiments is None:
        raise UserError("sweep.yaml has no inline search space (not written by `sdp-sweep run`)", str(store.config_file))
    from sdp_core.sweep.jobs import connect_ray

    rows = store.rows()
    if len(rows) < trials_due(cfg, rows):  # a finished sweep only gets its report rebuilt
        connect_ray(args.address)
    return _sweep(store, cfg)
