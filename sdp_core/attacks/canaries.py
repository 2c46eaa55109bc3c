"""Exposure of a trial's canaries (Carlini et al. 2019; Shi et al. 2022, §5.1.1).

One enumeration (or sample) ranks every drawn canary: the inserted ones (members) and the held-out ones
(non-members, never in the data), which the one-run ε audit ranks them against (`audit.empirical_epsilon`).
Each canary is scored in the context it was trained in: the record start and `Canaries.context`.

Every mean exposure comes with its resolution: the random-rank `floor` (`exposure.exposure_floor`, ≈ 1.44 bits:
what a canary the model has not memorised gets on average, so an exposure near it is not a leak) and a 95 %
t-interval of the mean over canaries, and beside it the rank statistics of inserted against held-out canaries
(`rank_test`): the Mann–Whitney U test, its AUC, and the share of inserted canaries found at a low false-positive
rate. The result holds exposures only, never secret values.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import numpy as np
from scipy import stats
from torch import nn
from transformers import PreTrainedTokenizerBase

from sdp_core.attacks.candidates import default_context
from sdp_core.attacks.estimate import estimate_exposures
from sdp_core.attacks.exposure import Progress, exposure_floor, rank_secrets, score_space
from sdp_core.data.canaries import Canaries
from sdp_core.errors import UserError


def mean_interval(values: Sequence[float], confidence: float = 0.95, low: float = -math.inf, high: float = math.inf
                  ) -> list[float] | None:
    """[low, high]: the two-sided t-interval of the mean of `values` (None for fewer than two values), clipped to
    the metric's range [`low`, `high`] (the mean of values in a range lies in it).

    mean ± t_{(1+c)/2, k−1} · s/√k, with s the sample standard deviation of the k values.
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None
    half = stats.t.ppf((1 + confidence) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return [float(max(low, x.mean() - half)), float(min(high, x.mean() + half))]


LOW_FPR = 0.01  # the false-positive rate at which `rank_test` reads the true-positive rate (Carlini et al. 2022)


def rank_test(members: Sequence[float], held_out: Sequence[float], fpr: float = LOW_FPR) -> dict | None:
    """Do inserted canaries outrank held-out ones? None without both.

    - `p_value`: one-sided Mann–Whitney U test (`scipy.stats.mannwhitneyu`, alternative "greater": members'
      exposures stochastically larger), exact for small samples without ties, else the normal approximation;
    - `auc`: U / (n₁·n₀), the probability that an inserted canary outranks a held-out one (ties count ½; 0.5: no
      separation);
    - `tpr_at_fpr`: the largest share of inserted canaries at or above a threshold that at most a share `fpr` of
      held-out canaries reach (*Membership Inference Attacks From First Principles*, Carlini et al. 2022), with
      `fpr_resolution` 1/n₀: below it the rate reads "no held-out canary above the threshold".
    """
    x, y = np.asarray(members, float), np.asarray(held_out, float)
    if len(x) == 0 or len(y) == 0:
        return None
    test = stats.mannwhitneyu(x, y, alternative="greater")
    thresholds = np.append(np.unique(np.concatenate([x, y])), np.inf)
    held_above = (y[None, :] >= thresholds[:, None]).mean(1)
    tpr = (x[None, :] >= thresholds[:, None]).mean(1)
    return {"test": "Mann-Whitney U, one-sided (inserted > held out)", "u": float(test.statistic),
            "p_value": float(test.pvalue), "auc": float(test.statistic / (len(x) * len(y))),
            "tpr_at_fpr": float(tpr[held_above <= fpr].max()), "fpr": fpr, "fpr_resolution": 1 / len(y),
            "inserted": len(x), "held_out": len(y)}


def canary_exposures(model: nn.Module, tokenizer: PreTrainedTokenizerBase, canaries: Canaries,
                     method: Literal["exact", "estimate"] = "exact", limit: int = 1_000_000, *,
                     context: str | None = None, sample_size: int = 10_000, seed: int = 0, batch_size: int = 1024,
                     progress: Progress | None = None) -> dict:
    """Exposure of every canary of `canaries`, exactly (trie enumeration, spaces up to `limit`) or estimated.

    Returns `method`, `format`, `space_size`, `max_exposure` (log2 |R|), `floor` (expected exposure of a random
    rank), `count` (canaries drawn), `inserted`, `repeats`, `exposures` (the inserted canaries', in drawing order),
    `exposure_mean`, `interval` (95 % t-interval of that mean within [0, log2 |R|]; None below two canaries), `exposure_max`,
    `held_out_exposures` and `held_out_mean` (the canaries never inserted), `rank_test` (`rank_test` of the two),
    the `family` (flagged or missed by the trial's policy) and `judged_by` (that policy, and its draws), and for `estimate` the skew-normal
    `fit`.
    `context` overrides the scoring context (default: `<eos>` + the canaries' context).
    """
    if method not in ("exact", "estimate"):
        raise UserError(f"exposure method must be exact or estimate, not {method!r}")
    fmt = canaries.format
    context = default_context(tokenizer, canaries.context) if context is None else context
    out: dict = {"method": method, "format": fmt.template, "space_size": fmt.space_size,
                 "max_exposure": math.log2(fmt.space_size), "floor": exposure_floor(fmt.space_size),
                 "count": len(canaries.secrets), "inserted": sum(canaries.inserted), "repeats": canaries.repeats,
                 "family": canaries.family, "judged_by": canaries.policy}
    if method == "exact":
        scores = score_space(model, tokenizer, fmt, context=context, batch_size=batch_size, limit=limit,
                             progress=progress)
        results = rank_secrets(scores, fmt, canaries.secrets)
    else:
        results, out["fit"] = estimate_exposures(model, tokenizer, fmt, canaries.secrets, context=context,
                                                 sample_size=sample_size, seed=seed, batch_size=batch_size)
    members = [r["exposure"] for r, inserted in zip(results, canaries.inserted) if inserted]
    held_out = [r["exposure"] for r, inserted in zip(results, canaries.inserted) if not inserted]
    out["exposures"], out["held_out_exposures"] = members, held_out
    out["exposure_mean"] = float(np.mean(members)) if members else None
    out["interval"] = mean_interval(members, low=0.0, high=out["max_exposure"])  # exposure lies in [0, log2 |R|]
    out["exposure_max"] = max(members, default=None)
    out["held_out_mean"] = float(np.mean(held_out)) if held_out else None
    out["rank_test"] = rank_test(members, held_out)
    return out
