"""The non-dominated sort against brute force, and which trials may be on the front."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdp_core.config.sweep import Objective
from sdp_core.report.load import Trial
from sdp_core.report.pareto import non_dominated, fronts_by_notion, pareto_front


def brute_force(points: list[tuple[float, ...]], modes: list[str]) -> list[bool]:
    """Point i is on the front iff no j is at least as good everywhere and strictly better somewhere."""

    def better_or_equal(a: float, b: float, mode: str) -> bool:
        return a <= b if mode == "min" else a >= b

    def dominates(a: tuple, b: tuple) -> bool:
        return all(better_or_equal(x, y, m) for x, y, m in zip(a, b, modes)) and a != b

    return [not any(dominates(q, p) for q in points) for p in points]


@st.composite
def point_sets(draw) -> tuple[list[tuple[float, ...]], list[str]]:
    k = draw(st.integers(1, 4))
    modes = draw(st.lists(st.sampled_from(["min", "max"]), min_size=k, max_size=k))
    # Few distinct values, so ties and duplicate points are common.
    value = st.integers(0, 4).map(float) | st.floats(-1e6, 1e6, allow_nan=False)
    points = draw(st.lists(st.tuples(*[value] * k), max_size=30))
    return points, modes


@settings(max_examples=150, deadline=None)
@given(point_sets())
def test_non_dominated_matches_brute_force(case):
    points, modes = case
    assert non_dominated(points, modes).tolist() == brute_force(points, modes)


def test_non_dominated_seeded_random_with_duplicates():
    rng = random.Random(7)
    for _ in range(200):
        k = rng.randint(1, 4)
        modes = [rng.choice(["min", "max"]) for _ in range(k)]
        points = [tuple(float(rng.randint(0, 3)) for _ in range(k)) for _ in range(rng.randint(0, 25))]
        points += rng.sample(points, min(3, len(points)))  # exact duplicates
        assert non_dominated(points, modes).tolist() == brute_force(points, modes)


def test_non_dominated_examples():
    assert non_dominated([[1, 5], [2, 2], [3, 3], [2, 2]], ["min", "min"]).tolist() == [True, True, False, True]
    assert non_dominated([[1, 5], [2, 2], [3, 3]], ["max", "min"]).tolist() == [False, True, True]
    assert non_dominated(np.zeros((0, 3)), ["min"] * 3).tolist() == []
    with pytest.raises(ValueError):
        non_dominated([[1.0, float("nan")]], ["min", "min"])
    with pytest.raises(ValueError):
        non_dominated([[1.0, 2.0, 3.0]], ["min", "min"])


def _trial(trial_id: str, state: str, ppl: float | None, exposure: float | None) -> Trial:
    metrics = {k: v for k, v in (("val_perplexity", ppl), ("exposure_mean", exposure)) if v is not None}
    return Trial(trial_id=trial_id, state=state, seed=0, mechanism="dpsgd", params={}, metrics=metrics, privacy={},
                 config={}, detector={}, canaries=None, other_guarantees={}, timings={}, versions={}, error=None)


def test_front_holds_only_finished_trials_with_every_objective():
    objectives = [Objective(metric="val_perplexity", mode="min"), Objective(metric="exposure_mean", mode="min")]
    trials = [
        _trial("a", "finished", 30.0, 2.0),
        _trial("b", "finished", 40.0, 1.0),
        _trial("c", "finished", 35.0, 3.0),  # dominated by a
        _trial("d", "early_stopped", 10.0, 0.5),  # would dominate everything, but its metrics are partial
        _trial("e", "infeasible", None, None),
        _trial("f", "failed", None, None),
        _trial("g", "finished", 5.0, None),  # an objective is missing
    ]
    assert [t.trial_id for t in pareto_front(trials, objectives)] == ["a", "b"]


def test_a_difference_inside_the_exposure_interval_does_not_rank_trials():
    """Trial b has worse perplexity than a and a lower mean exposure, but inside a's interval: a dominates it.
    Trial c's exposure is lower beyond both intervals: it stays on the front beside a."""
    ppl = {"a": 10.0, "b": 12.0, "c": 15.0}
    exposure = {"a": (2.0, 1.2, 2.8), "b": (1.6, 0.9, 2.3), "c": (0.3, 0.1, 0.5)}  # mean, low, high
    objectives = [Objective(metric="val_perplexity", mode="min"), Objective(metric="exposure_mean", mode="min")]
    trials = [_trial(t, "finished", ppl[t], exposure[t][0]) for t in "abc"]
    assert [t.trial_id for t in pareto_front(trials, objectives)] == ["a", "b", "c"]  # exact values: b looks better
    for t in trials:
        t.metrics.update(exposure_mean_low=exposure[t.trial_id][1], exposure_mean_high=exposure[t.trial_id][2])
    assert [t.trial_id for t in pareto_front(trials, objectives)] == ["a", "c"]


def test_a_trial_is_taken_off_the_front_only_by_one_of_its_own_notion():
    """a (DP) dominates b (SDP) on every objective, but their ε cover different things: each notion has its own
    front, so b stays; c (SDP) is dominated by b, of its own notion, and goes."""
    objectives = [Objective(metric="val_perplexity", mode="min"), Objective(metric="exposure_mean", mode="min")]
    trials = [_trial("a", "finished", 10.0, 1.0), _trial("b", "finished", 20.0, 2.0), _trial("c", "finished", 25.0, 3.0)]
    for t, notion in zip(trials, ("DP", "SDP", "SDP")):
        t.privacy["notion"] = notion
    assert [t.trial_id for t in pareto_front(trials, objectives)] == ["a"]  # one front over both notions
    assert [t.trial_id for t in fronts_by_notion(trials, objectives)] == ["a", "b"]
