"""The sweep's live view: a rich table of trials and an overall progress bar, driven by Tune's callbacks.

Finished rows are read back from the sweep folder, so the table shows exactly what was stored. When stdout is
not a terminal there is no live table: one line per trial started and per trial finished is printed instead.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ray.tune import Callback
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sdp_core.learning import learned_nothing
from sdp_core.privacy.numbers import epsilon_number
from sdp_core.privacy.relations import qualifiers
from sdp_core.sweep.space import MECHANISM_PARAM
from sdp_core.sweep.store import SweepStore

STATE_STYLES = {"finished": "green", "early_stopped": "yellow", "infeasible": "magenta", "failed": "red",
                "running": "cyan"}


def _num(value: Any, fmt: str = ".2f") -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _seconds(value: Any) -> str:
    return f"{_num(value, '.0f')}s" if _num(value) != "-" else "-"


def params_text(params: dict) -> str:
    """Sampled values by the last part of their path: `learning_rate=1.2e-03 w=0.3`."""
    return " ".join(f"{path.rsplit('.', 1)[-1]}={_num(v, '.3g') if isinstance(v, float) else v}"
                    for path, v in params.items() if path != MECHANISM_PARAM)


def sigma_text(privacy: dict) -> str:
    """The calibrated noise multipliers the trial's privacy events used: one value or a range."""
    sigmas = sorted({e["noise_multiplier"] for e in privacy.get("events") or [] if e.get("steps")})
    if not sigmas:
        return "-"
    return _num(sigmas[0], ".3f") if len(sigmas) == 1 else f"{sigmas[0]:.3f}–{sigmas[-1]:.3f}"


def epsilon_text(privacy: dict) -> str:
    """ε with its notion, neighbours, δ and accountant (`2.99 (DP, add/remove neighbours, δ=1e-05, rdp)`);
    `∞ (none)` without a guarantee."""
    eps = privacy.get("epsilon")
    if not isinstance(eps, (int, float)):
        return "-"
    if math.isinf(eps):
        return f"∞ ({privacy.get('notion')})"
    return f"{epsilon_number(eps)} ({qualifiers(privacy)})"


def row_cells(row: dict) -> list[str]:
    metrics, privacy = row.get("metrics") or {}, row.get("privacy") or {}
    return [row["trial_id"], row["state"], row["config"]["mechanism"]["name"], params_text(row.get("params") or {}),
            sigma_text(privacy), epsilon_text(privacy), _num(metrics.get("val_perplexity")),
            _num(metrics.get("exposure_mean")), _seconds((row.get("timings") or {}).get("total"))]


def row_line(row: dict) -> str:
    """One plain line per finished trial (non-terminal output)."""
    cells = row_cells(row)
    line = (f"{cells[0]} {cells[1]}: {cells[2]} {cells[3]}; σ {cells[4]}; ε {cells[5]}; val ppl {cells[6]}; "
            f"exposure {cells[7]}; {cells[8]}")
    if why := learned_nothing(row.get("metrics") or {}):
        line += f"; LEARNED NOTHING: {why}"
    return f"{line}; {row['error']}" if row.get("error") else line


class LiveView(Callback):
    """Tune callback and context manager: `with LiveView(store, total) as view: Tuner(..., callbacks=[view])`, where
    `total(rows)` is the sweep's trial count as its stored rows stand (an adaptive budget adds trials)."""

    COLUMNS = ("trial", "state", "mechanism", "hyper-parameters", "σ", "ε", "val ppl", "exposure", "elapsed")

    def __init__(self, store: SweepStore, total: Callable[[dict[str, dict]], int], console: Console | None = None):
        self.store, self.total = store, total
        self.console = console or Console()
        self.rows = store.rows()  # trials finished before this run (resume)
        self.running: dict[str, dict] = {}  # trial id -> config, start time, step, loss
        self.progress = Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, auto_refresh=False)
        self.task = self.progress.add_task("trials", total=total(self.rows), completed=len(self.rows))
        self.live = Live(self._render(), console=self.console, refresh_per_second=2) if self.console.is_terminal else None

    def __getstate__(self) -> dict:
        """`Tuner` pickles its callbacks (for `Tuner.restore`, unused here); the terminal objects stay behind."""
        return {k: v for k, v in self.__dict__.items() if k not in ("console", "progress", "live")}

    def __enter__(self) -> "LiveView":
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._render(), refresh=True)
            self.live.stop()

    def _render(self) -> Group:
        table = Table(*self.COLUMNS, expand=False)
        for row in sorted(self.rows.values(), key=lambda r: r["trial_id"]):
            table.add_row(*row_cells(row), style=STATE_STYLES.get(row["state"]))
        now = time.monotonic()
        for tid, r in sorted(self.running.items()):
            cfg = r["config"]
            table.add_row(tid, f"running (step {r['step']})", cfg["trial"]["mechanism"]["name"],
                          params_text(cfg["params"]), "-", "-", "-", "-", _seconds(now - r["start"]),
                          style=STATE_STYLES["running"])
        return Group(table, self.progress)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._render())

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        config = trial.config
        self.running[config["trial_id"]] = {"config": config, "start": time.monotonic(), "step": 0}
        if self.live is None:
            print(f"{config['trial_id']} started: {config['trial']['mechanism']['name']} "
                  f"{params_text(config['params'])}".rstrip(), flush=True)
        self._refresh()

    def on_trial_result(self, iteration, trials, trial, result: dict, **info) -> None:
        entry = self.running.get(trial.config["trial_id"])
        if entry is not None:
            entry["step"] = result.get("step", entry["step"])
            self._refresh()

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        tid = trial.config["trial_id"]
        self.running.pop(tid, None)
        row = self.store.read_row(tid)  # written by the search algorithm just before this callback
        if row is not None:
            self.rows[tid] = row
            self.progress.update(self.task, completed=len(self.rows), total=self.total(self.rows))
            if self.live is None:
                print(row_line(row), flush=True)
        self._refresh()

    on_trial_error = on_trial_complete
