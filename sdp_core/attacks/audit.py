"""Empirical lower bounds on ε from canary scores of one trained model.

Input: attack scores (higher = "more likely inserted", e.g. canary exposure) of *member* canaries, which were
inserted into training, and *non-member* canaries of the same format, which were not. Two analyses:

- `one_run` (default; Steinke, Nasr & Jagielski 2023, *Privacy Auditing with One (1) Training Run*, Thm. 3.1
  and its (ε, δ) extension): the auditor guesses "in" for the k highest scores and "out" for the k lowest,
  abstaining on the rest. If training is (ε, δ)-DP and each of the m canaries of the pool was inserted
  independently with probability 1/2, the number W of correct guesses among r = 2k satisfies, with
  q = e^ε/(1+e^ε) and B ~ Binom(r, q),
      P[W ≥ v] ≤ P[B ≥ v] + 2m·δ·max_{1≤i≤v} P[v > B ≥ v − i]/i.
  The bound is the largest ε whose p-value is still below 1 − `confidence`.
- `clopper_pearson` (Jagielski, Ullman & Oprea 2020): a threshold test with false-positive and false-negative
  rates FPR, FNR has ε ≥ ln((1 − δ − FPR)/FNR) and ln((1 − δ − FNR)/FPR) under (ε, δ)-DP; the rates are
  replaced by Clopper–Pearson upper bounds. That analysis assumes independent trials (one training run per
  canary); using many canaries of one run as trials is the common shortcut, not a theorem.

Both try several guesses / thresholds on the same scores; a Bonferroni correction over them keeps the result a
valid bound at the stated confidence. Assumptions: member and non-member canaries are drawn alike (ours are
independent uniform secrets of one format, each inserted with probability 1/2 independently of the others, as
`one_run` requires: `data.canaries`); scores are computed from the final model only. A canary inserted in n
records is a group of n: `epsilon_lower_bound` is on that group's ε. Record-level (ε, δ)-DP makes the group
(n·ε, n·e^{(n−1)ε}·δ)-DP (group privacy), so `one_run` also reports `epsilon_lower_bound_per_record`, the
largest record-level ε that this group guarantee, at the configured δ, cannot explain; it is what compares with
a ledger's ε.

The relation: a canary goes into an existing training record (`data.canaries`), so the two worlds the audit tells
apart have the same records, one of them with its text changed. The bound is on ε for replace-one neighbours
(`neighbouring` in the result), and compares with a trial's replace-one ε, which for DP (accounted for add/remove
neighbours) is larger than its reported ε, up to about twice it: a DP trial's audit may exceed its add/remove ε.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import numpy as np
from scipy import optimize, special, stats

from sdp_core.errors import UserError
from sdp_core.privacy.relations import REPLACE_ONE

Method = Literal["one_run", "clopper_pearson"]


def one_run_p_value(m: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """P-value of `correct` right guesses out of `guesses` among m canaries under (ε, δ)-DP (Steinke et al. 2023)."""
    q = special.expit(epsilon)  # accuracy of ε-DP randomized response: the best any guess can do
    tail = stats.binom.sf(correct - 1, guesses, q)  # P[Binom(r, q) ≥ v]
    if delta == 0 or correct == 0:
        return float(tail)
    i = np.arange(1, correct + 1)
    slack = np.max((stats.binom.sf(correct - i - 1, guesses, q) - tail) / i)
    return float(min(1.0, tail + 2 * m * delta * slack))


def group_delta(delta: float, epsilon: float, group_size: int) -> float:
    """δ of a group of n records under record-level (ε, δ)-DP: n·e^{(n−1)ε}·δ, capped at 1."""
    if delta == 0:
        return 0.0
    return math.exp(min(0.0, math.log(group_size) + (group_size - 1) * epsilon + math.log(delta)))


def one_run_epsilon(m: int, guesses: int, correct: int, delta: float, alpha: float, group_size: int = 1) -> float:
    """The one-run ε lower bound at level `alpha` (Steinke et al. 2023): the largest ε under which `correct` right
    of `guesses` is still rejected (p ≤ alpha). With `group_size` n > 1, ε is record-level and each canary is a
    group of n records, hence (n·ε, n·e^{(n−1)ε}·δ)-DP."""

    def p_value(epsilon: float) -> float:
        return one_run_p_value(m, guesses, correct, group_size * epsilon, group_delta(delta, epsilon, group_size))

    return _largest_rejected(p_value, alpha)


def _largest_rejected(p_value, alpha: float) -> float:
    """sup{ε ≥ 0 : p_value(ε) ≤ alpha} for a p-value increasing in ε (0 when even ε = 0 is not rejected)."""
    if p_value(0.0) > alpha:
        return 0.0
    hi = 1.0
    while p_value(hi) <= alpha:  # ends: the p-value tends to 1 as ε grows
        hi *= 2
    return float(optimize.brentq(lambda e: p_value(e) - alpha, hi / 2 if hi > 1 else 0.0, hi, xtol=1e-6))


def _one_run(members: np.ndarray, nonmembers: np.ndarray, delta: float, alpha: float, group_size: int,
             rng: np.random.Generator) -> dict:
    scores = np.concatenate([members, nonmembers])
    inserted = np.concatenate([np.ones(len(members), bool), np.zeros(len(nonmembers), bool)])
    # Ties are broken at random: an order that depends on the input layout would leak who is a member.
    order = np.lexsort((rng.permutation(len(scores)), -scores))
    m = len(scores)
    ks = _guess_sizes(m)
    # The most this audit can show: every guess right. Of k guesses each way at most min(k, inserted) and
    # min(k, held out) can be, so it depends on how many canaries the coin flips inserted (δ = 1e-5, 95 %, m =
    # 1000: 5.16 with 500 inserted, 4.47 with 480 or 520; ~1.4 for m = 20).
    right = {k: min(k, len(members)) + min(k, len(nonmembers)) for k in ks}
    ceiling = max(one_run_epsilon(m, 2 * k, right[k], delta, alpha / len(ks), group_size) for k in ks)
    best = {"epsilon_lower_bound": 0.0, "epsilon_lower_bound_per_record": 0.0, "canaries": m, "guesses": 0,
            "correct": 0, "ceiling": ceiling}
    for k in ks:
        correct = int(inserted[order[:k]].sum() + (~inserted[order[m - k :]]).sum())
        eps = one_run_epsilon(m, 2 * k, correct, delta, alpha / len(ks))
        if eps > best["epsilon_lower_bound"]:
            best.update(epsilon_lower_bound=eps, guesses=2 * k, correct=correct)
        if group_size > 1:
            per_record = one_run_epsilon(m, 2 * k, correct, delta, alpha / len(ks), group_size)
            best["epsilon_lower_bound_per_record"] = max(best["epsilon_lower_bound_per_record"], per_record)
    if group_size == 1:
        best["epsilon_lower_bound_per_record"] = best["epsilon_lower_bound"]
    return best


def _guess_sizes(m: int) -> list[int]:
    """The k of the one-run guesses tried on m canaries (k highest "in", k lowest "out"): m/2, m/4, ..., 1."""
    return sorted({max(1, m // 2 >> j) for j in range(int(math.log2(max(m // 2, 1))) + 1)})


def gaussian_mu(epsilon: float, delta: float) -> float:
    """μ of the Gaussian mechanism (μ-GDP, Dong, Roth & Su 2022) that is exactly (ε, δ)-DP: the root of
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (their Corollary 2.13)."""

    def excess(mu: float) -> float:
        return float(stats.norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
                     - delta)

    return float(optimize.brentq(excess, 1e-9, 2 * epsilon + 50))


def perfect_attack_bound(epsilon: float, m: int, delta: float = 1e-5, confidence: float = 0.95) -> float:
    """The one-run bound (`_one_run`'s guesses and Bonferroni correction) that the best attack on a Gaussian
    mechanism exactly (ε, δ)-DP would show on m canaries in expectation: each canary's score N(μ, 1) if inserted,
    N(0, 1) if not (`gaussian_mu`; the likelihood-ratio test, the strongest there is), m/2 of each, and at each k
    the expected right guesses (Steinke, Nasr & Jagielski 2023, §7: the idealised DP-SGD setting). What a bound of 0
    must be compared with: below it, an audit of m canaries cannot tell a model at ε from a private one."""
    if epsilon <= 0:
        return 0.0
    mu, half, alpha = gaussian_mu(epsilon, delta), m / 2, 1 - confidence
    ks = _guess_sizes(m)
    best = 0.0
    for k in ks:
        # The thresholds above (below) which k canaries are expected: those guessed "in" ("out").
        top = optimize.brentq(lambda t: half * (stats.norm.sf(t - mu) + stats.norm.sf(t)) - k, -60, 60)
        low = optimize.brentq(lambda t: half * (stats.norm.cdf(t - mu) + stats.norm.cdf(t)) - k, -60, 60)
        right = round(half * (stats.norm.sf(top - mu) + stats.norm.cdf(low)))
        best = max(best, one_run_epsilon(m, 2 * k, right, delta, alpha / len(ks)))
    return best


def _clopper_pearson_upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    return np.where(k < n, stats.beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1)), 1.0)


def _clopper_pearson(members: np.ndarray, nonmembers: np.ndarray, delta: float, alpha: float) -> dict:
    thresholds = np.concatenate([np.unique(np.concatenate([members, nonmembers])), [np.inf]])
    fn = np.searchsorted(np.sort(members), thresholds, side="left")  # members below the threshold
    fp = len(nonmembers) - np.searchsorted(np.sort(nonmembers), thresholds, side="left")
    a = alpha / (2 * len(thresholds))
    fnr, fpr = _clopper_pearson_upper(fn, len(members), a), _clopper_pearson_upper(fp, len(nonmembers), a)
    with np.errstate(divide="ignore"):  # 1 − δ − rate ≤ 0: that side proves nothing (−inf)
        eps = np.maximum(np.log(np.maximum(1 - delta - fpr, 0) / fnr), np.log(np.maximum(1 - delta - fnr, 0) / fpr))
    best = int(np.argmax(eps))
    return {"epsilon_lower_bound": max(0.0, float(eps[best])), "tpr": float(1 - fn[best] / len(members)),
            "fpr": float(fp[best] / len(nonmembers))}


def empirical_epsilon(member_scores: Sequence[float], nonmember_scores: Sequence[float], delta: float = 1e-5,
                      confidence: float = 0.95, method: Method = "one_run", group_size: int = 1,
                      seed: int = 0) -> dict:
    """Lower bound on ε that holds with probability ≥ `confidence` (see the module docstring for assumptions).

    Returns `epsilon_lower_bound` (of a canary's group of `group_size` records), `delta`, `confidence`, `notion`
    ("empirical lower bound"), `neighbouring` (replace-one: see the module docstring), `accountant`
    ("audit:<method>"), `method`, `members`, `nonmembers`, `group_size`, and the attack's operating point: for
    one_run `canaries` (m), `guesses` (r), `correct` (v) and `epsilon_lower_bound_per_record`, and `ceiling`, the
    record-level bound with every guess right (the most these members and non-members can show); for
    clopper_pearson `tpr`, `fpr`.
    """
    members, nonmembers = np.asarray(member_scores, float), np.asarray(nonmember_scores, float)
    if method not in ("one_run", "clopper_pearson"):
        raise UserError(f"audit method must be one_run or clopper_pearson, not {method!r}")
    if method == "clopper_pearson" and (len(members) == 0 or len(nonmembers) == 0):
        raise UserError("a clopper_pearson audit needs scores of both inserted (member) and held-out canaries")
    if len(members) + len(nonmembers) == 0:
        raise UserError("an ε audit needs the scores of some canaries")
    if not 0 < confidence < 1:
        raise UserError(f"audit confidence must be in (0, 1), got {confidence}")
    alpha = 1 - confidence
    if method == "one_run":
        result = _one_run(members, nonmembers, delta, alpha, group_size, np.random.default_rng(seed))
    else:
        result = _clopper_pearson(members, nonmembers, delta, alpha)
    return {**result, "delta": delta, "confidence": confidence, "notion": "empirical lower bound",
            "neighbouring": REPLACE_ONE, "accountant": f"audit:{method}", "method": method, "members": len(members),
            "nonmembers": len(nonmembers), "group_size": group_size}
