"""Whether a trial learned anything: its validation loss against its untrained model's, and its private steps'
noise against the most signal they can carry.

A trial can meet its ε and still be useless: one optimizer step, or σ so large (ε = 0.01) that its updates are
noise. Such a trial is flagged wherever it is shown (its console line, the report's headline and tables) and is
never a mechanism's best.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

# Validation loss (nats per token; a classifier's per record) at or above this share of the untrained model's is
# learning nothing worth ranking: gpt2-tiny starts near ln(vocabulary) ≈ 8.3 and a trained model reaches ≈ 3.5.
UNTRAINED_SHARE = 0.9


def validation_loss(metrics: Mapping[str, float | None], prefix: str = "val") -> float | None:
    """A language model's mean token loss, ln(perplexity); a classifier's mean cross-entropy."""
    perplexity = metrics.get(f"{prefix}_perplexity")
    return math.log(perplexity) if perplexity else metrics.get(f"{prefix}_loss")


def noise_to_signal(phases: Sequence[Mapping]) -> float | None:
    """Of the private phases' summed updates: the noise's standard deviation over the largest summed signal, both in
    units of the clipping norm C. T steps of B clipped records with noise σC each sum to at most B·T·C of signal
    and σ·√T·C of noise (σ/(B·√T) for constant σ and B; the "effective noise" σ/B of Sander et al. 2023, averaged
    over T steps). None without a private step. At 1 or more, no number of epochs at this σ and batch learns."""
    variance = records = 0.0
    for p in phases:
        if p["private"] and p["steps"] and p["sigmas"]:
            variance += p["steps"] * sum(s * s for s in p["sigmas"]) / len(p["sigmas"])
            records += p["records_seen"]
    return math.sqrt(variance) / records if records else None


def learned_nothing(metrics: Mapping[str, float | None]) -> str | None:
    """Why a trial's model learned nothing (a clause), or None: its validation loss is within 10 % of its untrained model's
    (`untrained_val_loss`), or every step it took was private and its noise outweighs its signal
    (`noise_to_signal` ≥ 1)."""
    loss, untrained = validation_loss(metrics), metrics.get("untrained_val_loss")
    if loss is not None and untrained and loss >= UNTRAINED_SHARE * untrained:
        return (f"validation loss {loss:.2f} is within {1 - UNTRAINED_SHARE:.0%} of its untrained "
                f"model's {untrained:.2f}")
    ratio = metrics.get("noise_to_signal")
    if ratio is not None and ratio >= 1 and metrics.get("steps") == metrics.get("private_steps"):
        return (f"its noise outweighs its largest possible signal (σ/(B·√T) = {ratio:.2f}): too few "
                "steps for σ to average out")
    return None
