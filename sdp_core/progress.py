"""Progress display for long work: one rich bar per training phase (disabled inside sweeps and tests), and a
count of items done that still shows without a terminal."""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sdp_core.scoped import set_within

if TYPE_CHECKING:
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


@dataclass(frozen=True)
class ProgressEvent:
    """What `count_progress` did, for a process that shows another's progress (`replayed_progress`)."""

    description: str
    total: int | None
    unit: str
    advance: int  # items done since the last event
    finished: bool = False


_RELAY: ContextVar[Callable[[ProgressEvent], None] | None] = ContextVar("progress_relay", default=None)


def relayed_progress(send: Callable[[ProgressEvent], None]) -> AbstractContextManager[None]:
    """Inside this block `count_progress` shows nothing and hands its events to `send` instead (a Ray worker, whose
    output does not reach the user, sends them to the driver, which shows them: `replayed_progress`)."""
    return set_within(_RELAY, send)


@contextmanager
def replayed_progress() -> Iterator[Callable[[ProgressEvent], None]]:
    """Yields `show(event)`: each relayed `count_progress` shown here as if it ran here, one display per description."""
    with ExitStack() as every:
        shown: dict[str, tuple[ExitStack, Callable[[int], None]]] = {}

        def show(event: ProgressEvent) -> None:
            if event.description not in shown:
                one = every.enter_context(ExitStack())
                shown[event.description] = one, one.enter_context(
                    count_progress(event.description, event.total, event.unit))
            one, advance = shown[event.description]
            if event.advance:
                advance(event.advance)
            if event.finished:
                one.close()
                del shown[event.description]

        yield show


@contextmanager
def count_progress(description: str, total: int | None, unit: str = "") -> Iterator[Callable[[int], None]]:
    """Yields `advance(n)` for `total` items of work (None: not known in advance), shown with their rate (`unit`
    per second, when named). On a terminal (stderr) a bar that is gone once done; elsewhere (a log file, a pipe) a
    line at the start and at each tenth, `description: 30% (3,000 of 10,000) in 41 s`, or every 10,000 items when
    the total is not known, so a long wait shows that it moves. Inside `relayed_progress`, events instead."""
    send = _RELAY.get()
    if send is not None:
        send(ProgressEvent(description, total, unit, 0))
        try:
            yield lambda n: send(ProgressEvent(description, total, unit, n))
        finally:
            send(ProgressEvent(description, total, unit, 0, finished=True))
        return
    if Console(stderr=True).is_terminal:
        rate = (TextColumn("{task.speed:,.0f} " + unit + "/s" if unit else ""),)
        columns = (TextColumn(description), BarColumn(), MofNCompleteColumn(), *rate, TimeElapsedColumn(),
                   TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)
        return
    start, done, step = time.perf_counter(), 0, 0
    print(f"{description}: 0% (0 of {total:,})" if total else f"{description}: starting", file=sys.stderr, flush=True)

    def advance(n: int) -> None:
        nonlocal done, step
        done += n
        now = done * 10 // max(total, 1) if total else done // 10_000
        if now > step:
            step, seconds = now, time.perf_counter() - start
            share = f"{done / total:.0%} ({done:,} of {total:,})" if total else f"{done:,}"
            speed = f", {done / seconds:,.0f} {unit}/s" if unit and seconds > 0 else ""
            print(f"{description}: {share} in {seconds:.0f} s{speed}", file=sys.stderr, flush=True)

    yield advance
