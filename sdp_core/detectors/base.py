"""The policy function interface: texts in, labelled character spans out (Shi et al. 2022, §3 "policy function").

A policy's `detect` is batched so that spaCy can stream texts through `nlp.pipe`. Its `name` and `version` key
the detection cache: bump `version` (or let it be derived from what drives behaviour) whenever the spans a
policy returns for the same text can change.

Union semantics: a `UnionPolicy` returns the sorted, exact-duplicate-free concatenation of its members' spans.
Overlapping or adjacent spans are *kept*, so each label stays visible to per-label statistics; the consumers
that need disjoint runs (redaction, token alignment) merge them themselves.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import Iterable, Sequence

from sdp_core.data.records import Span


def version_hash(*parts: object) -> str:
    """A short, stable digest of whatever determines a policy's behaviour."""
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8"), digest_size=6).hexdigest()


def normalise_spans(spans: Iterable[Span]) -> list[Span]:
    """Sorted by (start, end, label), exact duplicates and empty spans removed."""
    return sorted({s for s in spans if s.end > s.start})


class Policy(ABC):
    """Maps texts to per-text lists of `Span(start, end, label)`, sorted and duplicate-free; a text's spans depend on
    that text alone (the cache detects each distinct text once)."""

    name: str
    version: str

    @abstractmethod
    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        """One span list per text, in input order."""

    @property
    def key(self) -> str:
        """`name@version`: what the detection cache is keyed on."""
        return f"{self.name}@{self.version}"

    @property
    def members(self) -> tuple["Policy", ...]:
        """The leaf policies this policy is made of (itself for a leaf)."""
        return (self,)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"


class UnionPolicy(Policy):
    """The union of several policies: a token is sensitive if any member flags it."""

    def __init__(self, policies: Iterable[Policy]):
        leaves: dict[str, Policy] = {}
        for p in policies:
            for leaf in p.members:
                leaves.setdefault(leaf.name, leaf)
        if not leaves:
            raise ValueError("a union needs at least one policy")
        self._members = tuple(leaves[n] for n in sorted(leaves))  # order-independent name and cache key
        self.name = ",".join(p.name for p in self._members)
        self.version = version_hash(*(p.key for p in self._members))

    @property
    def members(self) -> tuple[Policy, ...]:
        return self._members

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        per_member = [p.detect(texts) for p in self._members]
        return [normalise_spans(s for spans in row for s in spans) for row in zip(*per_member)]


def union(policies: Sequence[Policy]) -> Policy:
    """A single policy stays itself; several become a `UnionPolicy` (nested unions are flattened)."""
    leaves = {leaf.name for p in policies for leaf in p.members}
    return policies[0] if len(leaves) == 1 else UnionPolicy(policies)
