"""The claims of a grid sweep (`claims:` in its YAML), checked on its trials: did each paper's ordering hold here?

Every claim compares arms by the mean of a metric over their finished seeds, and says how many seeds agree:
- `less`: mean(higher) − mean(lower) > `by` (and mean(lower) ≤ `ratio`·mean(higher) when a ratio is given);
  per seed, the same test on the two arms' trials of that seed.
- `increasing`: the arms' means do not decrease along the list, and Spearman's ρ of (position, value) is > 0.
A claim with an arm that has not finished every one of its seeds is `not measured`, never `held`: a verdict on
partial data could flip with the missing seeds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from scipy.stats import spearmanr

from sdp_core.config.sweep import Claim
from sdp_core.report.formatting import fmt, metric_label, privacy_qualifier
from sdp_core.report.load import Sweep, Trial, number
from sdp_core.report.tables import Table


def claim_value(trial: Trial, metric: str) -> float | None:
    """A metric of the trial, or `<guarantee>.<field>` of one of its further privacy reports
    (`bayesian_confidentiality.epsilon`)."""
    guarantee, _, key = metric.partition(".")
    if key:
        return number((trial.other_guarantees.get(guarantee) or {}).get(key))
    return trial.metric(metric)


def claim_privacy(trial: Trial, metric: str) -> dict | None:
    """The privacy report an ε metric comes from (its notion, δ and accountant go with the number); None otherwise."""
    guarantee, _, key = metric.partition(".")
    if key == "epsilon":
        return trial.other_guarantees.get(guarantee)
    return trial.privacy if metric == "epsilon" else None


@dataclass(frozen=True)
class ArmValues:
    arm: str
    values: dict[int, float]  # seed -> value, finished trials with the metric only
    qualifiers: tuple[str, ...] = ()  # for an ε metric: `notion, δ = …, accountant` of the arm's trials

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values.values()) if self.values else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values.values()) if len(self.values) > 1 else None

    def text(self) -> str:
        spread = f" ± {fmt(self.sd)}" if self.sd is not None else ""
        seeds = ", ".join(f"s{s}: {fmt(v)}" for s, v in sorted(self.values.items()))
        privacy = f" [{'; '.join(self.qualifiers)}]" if self.qualifiers else ""
        return f"{fmt(self.mean)}{spread} ({seeds}){privacy}" if self.values else "not measured"


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    arms: list[ArmValues]
    held: bool | None  # None: an arm was not measured
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "held", False: "did not hold", None: "not measured"}[self.held]


def arm_values(sweep: Sweep, arm: str, metric: str) -> ArmValues:
    values, qualifiers = {}, set()
    for t in sweep.trials:
        if t.params.get("experiment") == arm and t.state == "finished" and t.seed is not None:
            v = claim_value(t, metric)
            if v is not None:
                values[t.seed] = v
                privacy = claim_privacy(t, metric)
                if privacy is not None:
                    qualifiers.add(privacy_qualifier(privacy))
    return ArmValues(arm, values, tuple(sorted(qualifiers)))


def _less(claim: Claim, lower: float, higher: float) -> bool:
    ok = higher - lower > claim.by
    return ok and (claim.ratio is None or lower <= claim.ratio * higher)


def check_claim(sweep: Sweep, claim: Claim) -> ClaimResult:
    arms = [arm_values(sweep, a, claim.metric) for a in claim.arm_names()]
    experiments = sweep.config.experiments
    assert experiments is not None, "claims are a grid sweep's"
    for a in arms:
        planned = experiments[a.arm].seeds or sweep.config.seeds
        if len(a.values) < len(planned):
            return ClaimResult(claim, arms, None, f"{a.arm} has {len(a.values)} of its {len(planned)} seeds finished "
                                                  "with this metric")
    means = [m for a in arms if (m := a.mean) is not None]  # every arm has its seeds (above)
    if claim.kind == "less":
        (lo, hi), (lo_mean, hi_mean) = arms, means
        seeds = sorted(set(lo.values) & set(hi.values))
        agree = sum(_less(claim, lo.values[s], hi.values[s]) for s in seeds)
        held = bool(_less(claim, lo_mean, hi_mean))
        ratio = f"; ratio {fmt(lo_mean / hi_mean)}" if claim.ratio is not None and hi_mean else ""
        return ClaimResult(claim, arms, held, f"difference of means {fmt(hi_mean - lo_mean)} (needs > {fmt(claim.by)})"
                           f"{ratio}; {agree}/{len(seeds)} seeds agree")
    rho = float(spearmanr(range(len(means)), means).statistic) if len(set(means)) > 1 else 0.0
    monotone = all(b >= a for a, b in zip(means, means[1:]))
    return ClaimResult(claim, arms, monotone and rho > 0,
                       f"{'non-decreasing' if monotone else 'not monotone'}; Spearman ρ = {fmt(rho)}")


def check_claims(sweep: Sweep) -> list[ClaimResult]:
    return [check_claim(sweep, c) for c in sweep.config.claims]


def claims_table(results: Sequence[ClaimResult]) -> Table:
    rows = [[r.claim.text, metric_label(r.claim.metric), " · ".join(f"{a.arm}: {a.text()}" for a in r.arms),
             r.detail, r.verdict] for r in results]
    return Table(["claim", "metric", "arms: mean ± sd (per seed)", "test", "verdict"], rows)


def claims_markdown(results: list[ClaimResult]) -> str:
    held = sum(r.held is True for r in results)
    return "\n".join([f"## Claims: {held} of {len(results)} held", "", claims_table(results).markdown(), ""])
