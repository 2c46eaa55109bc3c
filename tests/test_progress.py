"""Progress shown where it was made and progress relayed from another process (a Ray task) and shown here."""

from __future__ import annotations

import re

from sdp_core.progress import count_progress, relayed_progress, replayed_progress
from sdp_core.sweep.prepare import _merged


def _work() -> None:
    with count_progress("detect policy", 2_000, "records") as advance:
        for _ in range(8):
            advance(250)
    with count_progress("detect other", None) as advance:
        advance(25_000)


def _untimed(lines: str) -> str:
    return re.sub(r" in \d+ s(, [\d,]+ records/s)?", "", lines)


def _last_lines(lines: str) -> dict[str, str]:
    """Each display's last line: where it ended."""
    return {line.split(":")[0]: line for line in _untimed(lines).splitlines()}


def _replayed(events: list, capsys) -> str:
    with replayed_progress() as show:
        for event in events:
            show(event)
    return capsys.readouterr().err


def test_relayed_progress_shows_nothing_where_it_runs_and_the_same_lines_where_it_is_replayed(capsys):
    _work()
    direct = capsys.readouterr().err
    events: list = []
    with relayed_progress(events.append):
        _work()
    assert capsys.readouterr().err == ""
    assert _untimed(_replayed(events, capsys)) == _untimed(direct)
    assert "detect policy: 50% (1,000 of 2,000)" in direct and "detect other: 25,000" in direct
    # Advances merged as the preparation task sends them: fewer lines on the way, the same end.
    merged = _merged(events)
    assert len(merged) == 4 < len(events)  # a start, one advance and an end each
    assert _last_lines(_replayed(merged, capsys)) == _last_lines(direct)
