"""Token-level evaluation of a policy against gold spans, in ONE token unit throughout.

Units: per-record token offsets from any tokenizer, or by default `word_offsets` (regex `\\w+|[^\\w\\s]`: words and
single punctuation marks). A token is sensitive under a span set iff it overlaps a span (`text.alignment`).
JFT's released code mixed units across datasets; here every count of one evaluation uses the same offsets.

Quantities (G = gold-sensitive tokens, P = detected tokens, N = all tokens):
- recall |G∩P|/|G|, precision |G∩P|/|P|;
- missing rate m = |G∖P|/N: the probability that a sampled token is a missed secret (Shi et al., JFT §3.1,
  the quantity privacy amplification uses), and CRT's γ = 1 − recall (Zhao et al. 2022, Prop. 6);
- redacted fraction |P|/N (`detection_stats`, which needs no gold);
- masked share of characters: the non-space characters inside a detected span over all non-space characters
  (`masked_share`, also in `detection_stats`; no gold needed), beside the gold share, the same count over gold
  spans. It is what redaction removes from the text that Redacted, JFT's phase 1 and CRT's public set train on,
  whatever the tokenizer; token shares weigh a long address like a short word;
- secrets found, overall and per gold label: a gold span counts as found only when every one of its non-space
  characters lies inside a detected span, i.e. redaction leaves nothing of it (a detected span touching one of
  its tokens is not enough: "K5STD8E8GB" with only "GB" detected stays readable). CRT's γ and δ₂ are shares of
  secrets not found (Zhao et al. 2022, Thm 8.3), not of tokens: a long secret missed counts once.

Intervals: 95 % Wilson score intervals (closed form, sensible at 0 and at 1, unlike the normal approximation).
They treat tokens as independent draws; tokens of one secret are correlated, so read them as optimistic when a
few secrets make up most sensitive tokens.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from sdp_core.data.records import Record, Span
from sdp_core.errors import DataError
from sdp_core.text.alignment import token_mask

WORD_PATTERN = re.compile(r"\w+|[^\w\s]")


def word_offsets(text: str) -> np.ndarray:
    """The default token units: (start, end) of every word and every punctuation mark."""
    return np.asarray([m.span() for m in WORD_PATTERN.finditer(text)], dtype=np.int64).reshape(-1, 2)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Exact ends at k = 0 and k = n (the closed form leaves rounding noise there).
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    """k out of n, with its Wilson interval."""

    k: int
    n: int
    low: float
    high: float

    @classmethod
    def of(cls, k: int, n: int, confidence: float = 0.95) -> "Rate":
        return cls(int(k), int(n), *wilson_interval(int(k), int(n), confidence))

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    def __str__(self) -> str:
        return f"{self.value:.4f} [{self.low:.4f}, {self.high:.4f}] ({self.k}/{self.n})"


@dataclass(frozen=True)
class LabelRecall:
    label: str
    tokens: Rate  # token recall of this gold label
    secrets: Rate  # gold spans fully masked (every non-space character detected)


@dataclass(frozen=True)
class Evaluation:
    records: int
    tokens: int
    recall: Rate
    precision: float
    missing_rate: Rate
    secrets: Rate  # gold spans fully masked (every non-space character detected), over all gold spans
    per_label: dict[str, LabelRecall]
    masked_chars: Rate  # non-space characters inside a detected span, over all non-space characters
    gold_chars: Rate  # non-space characters inside a gold span, over all non-space characters

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DetectionStats:
    """What a policy flagged, without gold: counts and rates only, never the flagged strings."""

    records: int
    tokens: int
    redacted_tokens: int
    spans_per_label: dict[str, int]
    characters: int = 0  # non-space characters
    masked_characters: int = 0  # of them, inside a detected span

    @property
    def redacted_fraction(self) -> float:
        """Share of tokens redacted."""
        return self.redacted_tokens / self.tokens if self.tokens else 0.0

    @property
    def masked_char_share(self) -> float:
        """Share of non-space characters masked."""
        return self.masked_characters / self.characters if self.characters else 0.0


def _char_counts(text: str, spans: Sequence[Span]) -> tuple[int, int]:
    """(non-space characters inside `spans`, non-space characters) of one text."""
    solid = np.fromiter((not c.isspace() for c in text), dtype=bool, count=len(text))
    inside = np.zeros(len(text), dtype=bool)
    for s in spans:
        inside[max(s.start, 0):s.end] = True
    return int((inside & solid).sum()), int(solid.sum())


def masked_share(texts: Sequence[str], detected: Sequence[Sequence[Span]], confidence: float = 0.95) -> Rate:
    """The share of non-space characters that redaction with `detected` masks, over a split's texts; its Wilson
    interval treats characters as independent (they are not: read it as the share, with a rough spread)."""
    masked = total = 0
    for text, spans in zip(texts, detected, strict=True):
        m, t = _char_counts(text, spans)
        masked += m
        total += t
    return Rate.of(masked, total, confidence)


def _masked(text: str, secrets: Sequence[Span], detected: Sequence[Span]) -> list[bool]:
    """For each secret, whether every one of its non-space characters lies inside a detected span (a secret of
    only spaces counts as not masked)."""
    inside = np.zeros(len(text), dtype=bool)
    for s in detected:
        inside[max(s.start, 0):s.end] = True
    solid = [[i for i in range(max(s.start, 0), min(s.end, len(text))) if not text[i].isspace()] for s in secrets]
    return [bool(chars) and bool(inside[chars].all()) for chars in solid]


def _offsets(records: Sequence[Record], offsets: Sequence[np.ndarray] | None) -> list[np.ndarray]:
    if offsets is None:
        return [word_offsets(r.text) for r in records]
    if len(offsets) != len(records):
        raise DataError(f"{len(offsets)} token offset lists for {len(records)} records")
    return [np.asarray(o, dtype=np.int64).reshape(-1, 2) for o in offsets]


def evaluate(
    records: Sequence[Record],
    detected: Sequence[Sequence[Span]],
    offsets: Sequence[np.ndarray] | None = None,
    confidence: float = 0.95,
) -> Evaluation:
    """Compare detected spans with the records' gold spans (records without gold spans are an error)."""
    if len(detected) != len(records):
        raise DataError(f"{len(detected)} detection lists for {len(records)} records")
    if any(r.spans is None for r in records):
        raise DataError("evaluation needs gold spans on every record")
    n_tokens = gold_n = det_n = hit_n = 0
    label_tokens: Counter = Counter()
    label_hits: Counter = Counter()
    label_secrets: Counter = Counter()
    label_found: Counter = Counter()
    for record, spans, offs in zip(records, detected, _offsets(records, offsets)):
        det = token_mask(offs, spans, record.text)
        gold = token_mask(offs, record.spans or (), record.text)
        n_tokens += len(offs)
        gold_n += int(gold.sum())
        det_n += int(det.sum())
        hit_n += int((gold & det).sum())
        by_label: dict[str, list[Span]] = defaultdict(list)
        for s, found in zip(record.spans or (), _masked(record.text, record.spans or (), spans)):
            by_label[s.label].append(s)
            label_secrets[s.label] += 1
            label_found[s.label] += found
        for label, group in by_label.items():
            g = token_mask(offs, group, record.text)
            label_tokens[label] += int(g.sum())
            label_hits[label] += int((g & det).sum())
    per_label = {
        label: LabelRecall(
            label,
            Rate.of(label_hits[label], label_tokens[label], confidence),
            Rate.of(label_found[label], label_secrets[label], confidence),
        )
        for label in sorted(label_secrets)
    }
    texts = [r.text for r in records]
    return Evaluation(
        records=len(records),
        tokens=n_tokens,
        recall=Rate.of(hit_n, gold_n, confidence),
        precision=hit_n / det_n if det_n else float("nan"),
        missing_rate=Rate.of(gold_n - hit_n, n_tokens, confidence),
        secrets=Rate.of(sum(label_found.values()), sum(label_secrets.values()), confidence),
        per_label=per_label,
        masked_chars=masked_share(texts, detected, confidence),
        gold_chars=masked_share(texts, [r.spans or () for r in records], confidence),
    )


def detection_stats(
    texts: Sequence[str], detected: Sequence[Sequence[Span]], offsets: Sequence[np.ndarray] | None = None
) -> DetectionStats:
    """Records, tokens, redacted tokens (same units as `evaluate`), spans per detected label, and non-space
    characters with how many of them are masked."""
    if offsets is None:
        offsets = [word_offsets(t) for t in texts]
    tokens = redacted = chars = masked = 0
    labels: Counter = Counter()
    for text, spans, offs in zip(texts, detected, offsets, strict=True):
        offs = np.asarray(offs, dtype=np.int64).reshape(-1, 2)
        tokens += len(offs)
        redacted += int(token_mask(offs, spans, text).sum())
        m, c = _char_counts(text, spans)
        masked += m
        chars += c
        labels.update(s.label for s in spans)
    return DetectionStats(len(texts), tokens, redacted, dict(sorted(labels.items())), chars, masked)
