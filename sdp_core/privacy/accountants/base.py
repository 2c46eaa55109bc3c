"""The accountant interface and its registry: `epsilon(events, delta, relation) -> float` for every backend.

Accountants are looked up by name in `ACCOUNTANTS` (filled by `@register_accountant`), so a config's
`privacy.accountant: rdp | prv | pld` maps to a class without an if-chain, and a new backend is one module.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Sequence

from sdp_core.errors import PrivacyError
from sdp_core.privacy.events import GaussianEvent, merge_events
from sdp_core.privacy.relations import ADD_REMOVE, check_relation

Pairs = tuple[tuple[float, float, int], ...]
"""Distinct (sample_rate, noise_multiplier, total steps), sorted: the canonical input of every backend."""

ACCOUNTANTS: dict[str, type["Accountant"]] = {}


class AccountingFailure(PrivacyError):
    """The accountant cannot compute ε at this point (e.g. ε far beyond its numerical grid)."""


def register_accountant(name: str) -> Callable[[type["Accountant"]], type["Accountant"]]:
    def decorate(cls: type[Accountant]) -> type[Accountant]:
        cls.name = name
        ACCOUNTANTS[name] = cls
        return cls

    return decorate


def get_accountant(name: str) -> "Accountant":
    try:
        return ACCOUNTANTS[name]()
    except KeyError:
        raise PrivacyError(f"unknown accountant {name!r} (known: {', '.join(sorted(ACCOUNTANTS))})") from None


def check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in (0, 1), got {delta}")


class Accountant(ABC):
    """Composes a list of `GaussianEvent`s and converts the result to ε at a given δ under a neighbouring relation.

    The events are composed exactly (any order, any mix of q and σ): each distinct (q, σ) is built once and
    self-composed by its total step count. A σ = 0 event that samples anyone makes ε infinite. Every backend
    supports both relations of `relations.RELATIONS`.
    """

    name: ClassVar[str]

    def epsilon(self, events: Sequence[GaussianEvent], delta: float, relation: str = ADD_REMOVE) -> float:
        check_delta(delta)
        check_relation(relation)
        pairs = tuple(sorted(merge_events(events)))
        if not pairs:
            return 0.0
        if any(sigma == 0.0 for _, sigma, _ in pairs):
            return math.inf
        return float(self._epsilon(pairs, delta, relation))

    @abstractmethod
    def _epsilon(self, pairs: Pairs, delta: float, relation: str) -> float:
        """ε of the composition of `pairs` (non-empty, every σ > 0, every q > 0, every count > 0) under `relation`."""
