"""Every metric a trial's row can carry, defined once: its name, a one-line description and its direction.

Sweep objectives and claims are checked against these names (`sdp-sweep validate`), and `docs/config.md` lists
them. A trial's utility metrics depend on its task (`lm`: perplexities; `classification`: loss and accuracy), each
measured on the validation (`val_`) and test (`test_`) splits (a seeded subset of `evaluation.held_out_records`
records of each) with its 95 % interval (`_ci_low`, `_ci_high`); the attacks' metrics need canaries
(`data.canaries`, `evaluation.exposure`) or membership inference (`evaluation.mia`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sdp_core.config.base import did_you_mean


@dataclass(frozen=True)
class Metric:
    description: str
    direction: Literal["min", "max", "none"]  # the better way; `none`: a bound or a count, not a goal
    needs: Literal["exposure", "mia"] | None = None  # the attack a trial must run to measure it
    task: Literal["lm", "classification"] | None = None  # the model task that has it; None: every task


_SPLIT_METRICS = {
    "perplexity": Metric("perplexity of every token", "min", task="lm"),
    "private_perplexity": Metric("perplexity of the detected-secret tokens", "none", task="lm"),
    "public_perplexity": Metric("perplexity of the tokens outside detected secrets", "min", task="lm"),
    "accuracy": Metric("top-1 accuracy: the next token (language models) or the class (classifiers)", "max"),
    "loss": Metric("mean cross-entropy of a classifier's labels (and an early-stopped trial's last held-out loss)",
                   "min"),
}
_SPLITS = {"val": "validation", "test": "test"}
# Each split metric's 95 % interval over its held-out records (`sdp_core.metrics.ratio_interval`): `_ci_low`,
# `_ci_high`, not the `_low`, `_high` the report compares trials with (`report.load.Trial.interval`), since every
# trial is scored on the same records: the difference of two trials varies far less than either's interval says.
_BOUNDS = {"ci_low": "lower", "ci_high": "upper"}
# The rank test of inserted against held-out canaries (attacks.canaries.rank_test), beside the mean exposure.
_RANK_METRICS = {
    "exposure_auc": Metric("AUC of inserted against held-out canaries' exposures (Mann-Whitney U / n1 n0; 0.5: "
                           "none)", "min"),
    "exposure_p_value": Metric("one-sided Mann-Whitney p-value of inserted above held-out canaries (below 0.01: "
                               "memorised)", "none"),
    "exposure_tpr_at_low_fpr": Metric("share of inserted canaries found at 1 % false positives among held-out ones",
                                      "min"),
}

METRICS: dict[str, Metric] = {
    **{f"{prefix}_{name}": Metric(f"{split} split: {m.description}", m.direction, m.needs, m.task)
       for prefix, split in _SPLITS.items() for name, m in _SPLIT_METRICS.items()},
    **{f"{prefix}_{name}_{bound}": Metric(f"{end} end of {prefix}_{name}'s 95 % interval (its held-out "
                                          "records bootstrapped)", "none", m.needs, m.task)
       for prefix in _SPLITS for name, m in _SPLIT_METRICS.items() for bound, end in _BOUNDS.items()},
    "epsilon": Metric("the ε the trial spent (its privacy report's formal bound; inf without DP)", "min"),
    "exposure_mean": Metric("mean exposure (bits) of the inserted canaries (Carlini et al. 2019)", "min",
                            "exposure", "lm"),
    "exposure_mean_low": Metric("lower end of exposure_mean's 95 % interval", "none", "exposure", "lm"),
    "exposure_mean_high": Metric("upper end of exposure_mean's 95 % interval", "none", "exposure", "lm"),
    "exposure_max": Metric("largest exposure (bits) of an inserted canary", "min", "exposure", "lm"),
    "exposure_floor": Metric("expected exposure of a random rank (≈ 1.44 bits): not memorised", "none",
                             "exposure", "lm"),
    **{f"{prefix}{name}": Metric(f"{family}{m.description}", m.direction, "exposure", "lm")
       for prefix, family in (("", ""), ("missed_", "missed canary family (data.canaries.missed_format): "))
       for name, m in _RANK_METRICS.items()},
    "missed_exposure_mean": Metric("mean exposure (bits) of the inserted canaries of the family the policy misses "
                                   "(data.canaries.missed_format)", "min", "exposure", "lm"),
    "missed_exposure_mean_low": Metric("lower end of missed_exposure_mean's 95 % interval", "none", "exposure", "lm"),
    "missed_exposure_mean_high": Metric("upper end of missed_exposure_mean's 95 % interval", "none", "exposure",
                                        "lm"),
    "missed_exposure_floor": Metric("the missed family's random-rank exposure: not memorised", "none", "exposure",
                                    "lm"),
    "empirical_epsilon_lower_bound": Metric("one-run ε lower bound from inserted vs held-out canaries (Steinke, "
                                            "Nasr & Jagielski 2023)", "none", "exposure", "lm"),
    "empirical_epsilon_per_record": Metric("empirical_epsilon_lower_bound per record (divided by a canary's "
                                           "repeats)", "none", "exposure", "lm"),
    "mia_auc": Metric("membership inference ROC AUC on the secrets' likelihood, per record (0.5: none)", "min",
                      "mia", "lm"),
    "mia_group_auc": Metric("membership inference ROC AUC per secret value, over its records", "min", "mia", "lm"),
    "private_steps": Metric("optimizer steps of the private (DP) phases", "min"),
    "private_records": Metric("expected per-record gradients of the private phases (q·N a step)", "min"),
    "private_seconds": Metric("seconds of the private phases", "min"),
    "train_seconds": Metric("seconds of training, every phase", "min"),
    "steps": Metric("optimizer steps of every phase (an early-stopped trial: those it took before it was stopped)",
                    "min"),
    "tokens": Metric("training tokens processed (loss positions of the rows sampled, every phase)", "min"),
    "untrained_val_loss": Metric("validation loss of the trial's model before training (ln perplexity; a "
                                 "classifier's cross-entropy): what learning must beat (`sdp_core.learning`)", "none"),
    "noise_to_signal": Metric("the private steps' summed noise over their largest summed signal, σ/(B·√T); at 1 or "
                              "more their updates are noise (`sdp_core.learning`)", "none"),
    "wall_seconds": Metric("seconds of the whole trial: preparation, training, evaluation, attacks", "min"),
}
"""Name -> metric: every key of a trial row's `metrics`, and `epsilon` (from its privacy report)."""

NEEDS = {"exposure": "base.data.canaries and base.evaluation.exposure", "mia": "base.evaluation.mia: true"}
"""What a sweep's base config must set for its trials to measure a metric with `needs`."""


def unknown_metric(name: str) -> str | None:
    """Why `name` is not a metric a trial produces (with the closest known name), or None when it is one."""
    if name in METRICS:
        return None
    return f"unknown metric {name!r}{did_you_mean(name, set(METRICS))}; docs/config.md lists every metric"
