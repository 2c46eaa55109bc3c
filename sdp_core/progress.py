"""Progress display for long work: one rich bar per training phase (disabled inside sweeps and tests)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sdp_core.train.loop import Phase, PhaseStats


@contextmanager
def phase_progress(phases: list[Phase], enabled: bool) -> Iterator[Callable[[str, PhaseStats], None]]:
    """Yields `advance(phase_name, stats)`; shows step count, loss and σ per phase when enabled."""
    if not enabled:
        yield lambda name, stats: None
        return
    columns = (TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        tasks = {p.name: progress.add_task(p.name, total=p.total_steps, info="") for p in phases}

        def advance(name: str, stats: PhaseStats) -> None:
            loss = f"loss {stats.losses[-1]:.3f}" if stats.losses else ""
            sigma = f"σ {stats.sigmas[-1]:.3f}" if stats.sigmas else ""
            progress.update(tasks[name], completed=stats.steps, info=f"{loss} {sigma}".strip())

        yield advance
