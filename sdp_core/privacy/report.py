"""Privacy reports: ε never travels without its δ, notion, accountant, neighbouring relation and the events it
composes.

Every number this package returns about privacy is a `privacy_report` dict (plus extra keys), and
`assert_no_bare_epsilon` checks any nested result for a mapping that carries `epsilon` without the rest.
Each notion fixes the neighbouring relation its ε is computed under (`relations`): DP compares add/remove
neighbours; SDP (Shi et al. 2022, Def. 3) and CRT's confidentiality notions (Zhao et al. 2022, Defs. 2 and 4)
compare a dataset with one whose secret was replaced, so they are accounted for replace-one neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from sdp_core.errors import PrivacyError
from sdp_core.privacy.accountants import get_accountant
from sdp_core.privacy.events import GaussianEvent, events_to_dicts
from sdp_core.privacy.relations import ADD_REMOVE, REPLACE_ONE, check_relation


@dataclass(frozen=True)
class Notion:
    """A privacy notion, which events it does not charge for, and the neighbouring relation it compares."""

    name: str
    description: str
    free_touches: tuple[str, ...] = ()
    guarantee: bool = True  # False: no formal guarantee at all, ε = ∞ whatever the events
    relation: str = ADD_REMOVE


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
            relation=REPLACE_ONE,
        ),
        Notion(
            "confidentiality",
            "(ε, δ)-confidentiality (Zhao et al. 2022, Def. 2) against the perfectly redacted dataset; "
            "steps on D_pub are free",
            ("public",),
            relation=REPLACE_ONE,
        ),
        Notion(
            "bayesian_confidentiality",
            "(ε, δ)-Bayesian confidentiality (Zhao et al. 2022, Def. 4, Thm 8.3) for secrets drawn from μ",
            ("public",),
            relation=REPLACE_ONE,
        ),
    )
}

REQUIRED_WITH_EPSILON = ("delta", "notion", "accountant", "neighbouring")

EVALUATION_NOT_COVERED = {
    "membership_inference": "membership-inference statistics (AUC, best accuracy, member loss, group statistics): "
                            "computed without noise on training records' secrets, released as evaluation outputs",
    "held_out": "utility metrics of the held-out validation and test records (perplexity, accuracy and their 95 % "
                "intervals): no trial trains on them and ε does not protect them; the search and early stopping read "
                "them",
}
"""What a trial's evaluation releases beside its model that its ε does not cover, by what computes it."""


def get_notion(name: str) -> Notion:
    try:
        return NOTIONS[name]
    except KeyError:
        raise PrivacyError(f"unknown privacy notion {name!r} (known: {', '.join(NOTIONS)})") from None


def counted_events(events: Iterable[GaussianEvent], notion: str) -> list[GaussianEvent]:
    """The events `notion` charges for (e.g. SDP does not charge public-only steps)."""
    free = get_notion(notion).free_touches
    return [e for e in events if e.touches not in free]


def notion_epsilon(
    events: Sequence[GaussianEvent], delta: float, notion: str, accountant: str, relation: str | None = None
) -> float:
    """ε of the events `notion` charges for, under `relation` (default: the notion's own)."""
    n = get_notion(notion)
    if not n.guarantee:
        return math.inf
    return get_accountant(accountant).epsilon(counted_events(events, notion), delta, relation or n.relation)


def privacy_report(
    epsilon: float,
    delta: float,
    notion: str,
    accountant: str,
    events: Iterable[GaussianEvent],
    *,
    relation: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The one shape of a privacy number: `epsilon, delta, notion, accountant, neighbouring, events` (+ `extra`
    keys); `neighbouring` is `relation`, by default the notion's own."""
    n = get_notion(notion)
    return {
        "epsilon": float(epsilon),
        "delta": float(delta),
        "notion": notion,
        "accountant": accountant,
        "neighbouring": check_relation(relation or n.relation),
        "events": events_to_dicts(events),
        **extra,
    }


def account(
    events: Sequence[GaussianEvent], delta: float, notion: str, accountant: str, *, relation: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Compose `events` under `notion` with `accountant` for `relation` (default: the notion's) and report it."""
    epsilon = notion_epsilon(events, delta, notion, accountant, relation)
    return privacy_report(epsilon, delta, notion, accountant, events, relation=relation, **extra)


def assert_no_bare_epsilon(obj: Any, path: str = "$") -> None:
    """Raise AssertionError naming the first mapping (by JSON path) with `epsilon` but without
    `delta`, `notion`, `accountant` and `neighbouring`. Walks nested mappings, lists and tuples."""
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
