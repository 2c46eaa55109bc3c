"""A detector made to miss a fraction γ of the secrets: the recall axis of CRT's attack figures (Zhao et al. 2022,
Figs. 3–5, γ = the policy's false-negative rate from 0 to 0.5) and of the missed-secret experiments.

The miss is decided per distinct secret *value*, not per occurrence (Thm 8.2 counts "the proportion of unique
secrets π detects"): a detector that misses "Jane Roe" misses it in every record, as a real one would. Whether a
value is missed is a seeded hash of the value, so it is the same in every trial of a seed and independent of order.
"""

from __future__ import annotations

import hashlib

from typing import Sequence

from sdp_core.data.records import Record, SpanColumns, span_columns


def is_missed(value: str, rate: float, seed: int) -> bool:
    """True for a fraction `rate` of all values, chosen by a seeded hash (uniform on [0, 1) below `rate`)."""
    digest = hashlib.blake2b(f"{seed}\0{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate


def drop_missed(records: Sequence[Record], spans: SpanColumns, rate: float, seed: int) -> SpanColumns:
    """The policy's spans with every span of a missed value removed; `rate = 0` returns them unchanged."""
    if rate <= 0:
        return spans
    return span_columns([s for s in ss if not is_missed(r.text[s.start:s.end], rate, seed)]
                        for r, ss in zip(records, spans, strict=True))
