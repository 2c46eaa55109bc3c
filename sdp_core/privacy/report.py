"""Privacy reports: ε never travels without its δ, notion, accountant and the events it composes.

Every number this package returns about privacy is a `privacy_report` dict (plus extra keys), and
`assert_no_bare_epsilon` checks any nested result for a mapping that carries `epsilon` without the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from sdp_core.errors import PrivacyError
from sdp_core.privacy.accountants import get_accountant
from sdp_core.privacy.events import GaussianEvent, events_to_dicts


@dataclass(frozen=True)
class Notion:
    """A privacy notion and which events it does not charge for."""

    name: str
    description: str
    free_touches: tuple[str, ...] = ()
    guarantee: bool = True  # False: no formal guarantee at all, ε = ∞ whatever the events


NOTIONS: dict[str, Notion] = {
    n.name: n
    for n in (
        Notion("none", "no formal guarantee: some phase read the original text without noise (ε = ∞)",
               guarantee=False),
        Notion("DP", "(ε, δ)-differential privacy of every record"),
        Notion(
            "SDP",
            "selective DP (Shi et al. 2022): (ε, δ)-DP for neighbours that differ in sensitive tokens only; "
            "a step reading only public tokens reveals no secret",
            ("public",),
        ),
        Notion(
            "confidentiality",
            "(ε, δ)-confidentiality (Zhao et al. 2022, Def. 2) against the perfectly redacted dataset; "
            "steps on D_pub are free",
            ("public",),
        ),
        Notion(
            "bayesian_confidentiality",
            "(ε, δ)-Bayesian confidentiality (Zhao et al. 2022, Def. 4, Thm 1.3) for secrets drawn from μ",
            ("public",),
        ),
    )
}

REQUIRED_WITH_EPSILON = ("delta", "notion", "accountant")


def get_notion(name: str) -> Notion:
    try:
        return NOTIONS[name]
    except KeyError:
        raise PrivacyError(f"unknown privacy notion {name!r} (known: {', '.join(NOTIONS)})") from None


def counted_events(events: Iterable[GaussianEvent], notion: str) -> list[GaussianEvent]:
    """The events `notion` charges for (e.g. SDP does not charge public-only steps)."""
    free = get_notion(notion).free_touches
    return [e for e in events if e.touches not in free]


def notion_epsilon(events: Sequence[GaussianEvent], delta: float, notion: str, accountant: str) -> float:
    if not get_notion(notion).guarantee:
        return math.inf
    return get_accountant(accountant).epsilon(counted_events(events, notion), delta)


def privacy_report(
    epsilon: float, delta: float, notion: str, accountant: str, events: Iterable[GaussianEvent], **extra: Any
) -> dict[str, Any]:
    """The one shape of a privacy number: `epsilon, delta, notion, accountant, events` (+ `extra` keys)."""
    get_notion(notion)
    return {
        "epsilon": float(epsilon),
        "delta": float(delta),
        "notion": notion,
        "accountant": accountant,
        "events": events_to_dicts(events),
        **extra,
    }


def account(events: Sequence[GaussianEvent], delta: float, notion: str, accountant: str, **extra: Any) -> dict[str, Any]:
    """Compose `events` under `notion` with `accountant` and return the report."""
    return privacy_report(notion_epsilon(events, delta, notion, accountant), delta, notion, accountant, events, **extra)


def assert_no_bare_epsilon(obj: Any, path: str = "$") -> None:
    """Raise AssertionError naming the first mapping (by JSON path) with `epsilon` but without
    `delta`, `notion` and `accountant`. Walks nested mappings, lists and tuples."""
    if isinstance(obj, Mapping):
        if "epsilon" in obj:
            missing = [k for k in REQUIRED_WITH_EPSILON if k not in obj]
            if missing:
                raise AssertionError(f"bare epsilon at {path}: missing {', '.join(missing)}")
        for key, value in obj.items():
            assert_no_bare_epsilon(value, f"{path}.{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            assert_no_bare_epsilon(value, f"{path}[{i}]")
