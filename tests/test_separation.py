"""What a budget of trials can separate, stated before any trial runs: checked against scipy's exact Mann–Whitney
test and a brute-force enumeration of its null distribution, and on the shipped sweeps."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy.stats import mannwhitneyu

from sdp_core.config.loading import load_sweep_config
from sdp_core.errors import ConfigError
from sdp_core.separation import (RANKING_ALPHA, budget_line, look_level, rankings, reversed_pairs_allowed,
                                 sequential_looks, smallest_p_value)
from sdp_core.sweep.preflight import resolve_sweep
from sdp_core.config.sweep import sweep_number, trial_id
from tests.conftest import REPO, run_main


@pytest.mark.parametrize("n,m", [(2, 2), (3, 3), (3, 5), (4, 4), (5, 5), (6, 4)])
def test_the_smallest_p_value_is_scipys_exact_test_of_a_clean_split(n, m):
    clean = mannwhitneyu(list(range(n)), list(range(n, n + m)), alternative="two-sided", method="exact")
    assert smallest_p_value(n, m) == pytest.approx(clean.pvalue, rel=1e-12)


def _brute_force_allowed(n: int, level: float) -> int | None:
    """The largest U whose two-sided exact p-value, 2·P(U ≤ u) counted over every split of 2n ranks, is ≤ level."""
    counts = [0] * (n * n + 1)
    for lower in itertools.combinations(range(2 * n), n):  # the ranks of one side
        counts[sum(lower) - n * (n - 1) // 2] += 1  # its U: rank sum less its minimum
    total, below, allowed = math.comb(2 * n, n), 0, None
    for u in range(n * n // 2 + 1):
        below += counts[u]
        if min(1.0, 2 * below / total) > level:
            break
        allowed = u
    return allowed


@pytest.mark.parametrize("n,steps", [(3, 3), (4, 1), (4, 3), (5, 3), (6, 3), (7, 2)])
def test_the_reversed_pairs_a_step_allows_match_the_enumerated_null_distribution(n, steps):
    assert reversed_pairs_allowed(n, RANKING_ALPHA / steps) == _brute_force_allowed(n, RANKING_ALPHA / steps)


def test_validate_states_what_the_quickstart_budget_can_separate():
    result = run_main("validate", str(REPO / "sweeps" / "quickstart.yaml"))
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[1]
    cfg = load_sweep_config(REPO / "sweeps" / "quickstart.yaml")
    assert "budget:" in line and f"{cfg.per_cell} trials per mechanism" in line


@pytest.mark.parametrize("name", ["quickstart", "tradeoff"])
def test_the_shipped_sweeps_budgets_can_separate_every_step_of_their_rankings(name):
    """Every ranking the report will test (each ε of a ladder) can pass: a clean split of n against n trials reaches
    Holm's first level, α over the ranking's steps."""
    cfg = load_sweep_config(REPO / "sweeps" / f"{name}.yaml")
    ranked = [ms for ms in rankings(cfg).values() if len(ms) > 1]
    assert ranked, name  # a shipped sweep ranks something
    for mechanisms in ranked:
        steps = len(mechanisms) - 1
        assert smallest_p_value(cfg.per_cell, cfg.per_cell) <= look_level(cfg) / steps, (name, mechanisms)
    assert "cannot separate" not in budget_line(cfg)


def test_rankings_group_mechanisms_by_the_notion_their_trials_state():
    """A ranking never compares guarantees that cover different things: DP-SGD and ATDP (both DP) are ranked, JFT
    (SDP) and CRT (confidentiality) stand alone, ATDP after a redacted base joins SDP, No-DP is not ranked."""
    cfg = load_sweep_config(REPO / "sweeps" / "quickstart.yaml", ["mechanisms=[nodp,dpsgd,jft,crt,atdp]"])
    assert rankings(cfg) == {(None, "DP"): ["dpsgd", "atdp"], (None, "SDP"): ["jft"],
                             (None, "confidentiality"): ["crt"]}
    redacted_base = load_sweep_config(REPO / "sweeps" / "quickstart.yaml",
                                      ["mechanisms=[jft,atdp]", "base.mechanism={name: atdp, base: redacted}"])
    assert rankings(redacted_base) == {(None, "SDP"): ["jft", "atdp"]}
    alone = load_sweep_config(REPO / "sweeps" / "quickstart.yaml", ["mechanisms=[jft,crt]"])
    assert "no two mechanisms state the same notion" in budget_line(alone)


def test_a_budget_too_small_says_so_and_how_many_trials_would_do():
    cfg = load_sweep_config(REPO / "sweeps" / "quickstart.yaml", ["trials_per_mechanism=3",
                                                                  "mechanisms=[dpsgd,jft,crt,atdp]"])
    line = budget_line(cfg)
    assert "the 2 DP mechanisms (DP-SGD, ATDP)" in line and "JFT (SDP), CRT (confidentiality) alone" in line
    assert "the smallest p-value is 0.1, above Holm's first level 0.05/1" in line
    assert "4 trials per mechanism could" in line  # 2/C(6, 3) = 0.1 > 0.05 ≥ 2/C(8, 4) = 0.029


def test_run_states_the_budget_before_it_starts_ray(tmp_path):
    """The line comes before Ray is reached: here an address where no cluster answers stops the run right after."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_main("run", str(REPO / "sweeps" / "quickstart.yaml"), "--out", str(tmp_path / "out"),
                      "--address", f"127.0.0.1:{port}")
    assert result.returncode == 2 and "no Ray cluster answers" in result.stderr
    assert result.stdout.startswith("budget: 4 trials per mechanism; the report orders the 2 DP mechanisms (DP-SGD, "
                                    "ATDP) at ε = 3")


# ------------------------------------------------------------------------------------- adaptive looks


def _adaptive(extra: tuple[str, ...] = ()):
    return load_sweep_config(REPO / "sweeps" / "quickstart.yaml", ["mechanisms=[dpsgd,atdp]", "trials_per_mechanism=5",
                                                                  "adaptive={max_trials_per_mechanism: 9, step: 2}",
                                                                  *extra])


# DP-SGD's and ATDP's utilities, trial by trial (the first 5, then 2 more at each later look; lower is better).
SPLITS = {
    # 2 of 25 pairs reversed at 5: p = 0.032 passes 0.05 but not 0.05/3; a clean 7 against 7 then passes
    "second look": ([1, 2, 3, 4, 6.5, 0.5, 0.6, 20, 21], [5, 6, 7, 8, 9, 10, 11, 0, 0]),
    "first look": ([1, 2, 3, 4, 5, 10, 10, 10, 10], [6, 7, 8, 9, 10.5, 1, 1, 1, 1]),
    "tied": ([1, 4, 5, 8, 9, 12, 13, 16, 17], [2, 3, 6, 7, 10, 11, 14, 15, 18]),
}


@pytest.mark.parametrize("case", SPLITS)
def test_the_looks_stop_where_scipys_exact_test_first_passes_at_alpha_over_the_looks(case):
    """The sequential rule against a hand computation: look j tests each mechanism's first n_j trials with scipy's
    exact two-sided Mann–Whitney at 0.05/3 (3 planned looks: 5, 7 and 9 trials); the first look that passes stops,
    and with none the family is tied at the cap."""
    cfg = _adaptive()
    assert cfg.looks == [5, 7, 9] and look_level(cfg) == pytest.approx(0.05 / 3)
    dpsgd, atdp = SPLITS[case]
    cells = {c.mechanism: c for c in cfg.cells}
    outcomes = {trial_id(sweep_number(cfg, cells[m], i)): v for m, vs in (("dpsgd", dpsgd), ("atdp", atdp))
                for i, v in enumerate(vs)}
    expected_taken, expected_pass = 3, False
    for j, n in enumerate([5, 7, 9]):
        p = mannwhitneyu(dpsgd[:n], atdp[:n], alternative="two-sided", method="exact").pvalue
        if p <= 0.05 / 3:
            expected_taken, expected_pass = j + 1, True
            break
    (family,) = sequential_looks(cfg, outcomes).values()
    assert (family.taken, family.passed, family.due) == (expected_taken, expected_pass, [5, 7, 9][expected_taken - 1])
    assert {"second look": 2, "first look": 1, "tied": 3}[case] == family.taken  # each case is the one it says

    # Before a look's trials are all stored, the family waits for them: it is due that look's trials.
    partial = {t: v for t, v in outcomes.items() if t != trial_id(sweep_number(cfg, cells["atdp"], 4))}
    (waiting,) = sequential_looks(cfg, partial).values()
    assert (waiting.taken, waiting.due, waiting.ranking) == (0, 5, None)


def test_an_adaptive_budget_whose_first_look_cannot_pass_is_refused():
    """4 against 4 trials reach at best p = 2/C(8, 4) = 0.029, above 0.05 over 3 looks: refused before any trial."""
    path = REPO / "sweeps" / "quickstart.yaml"
    with pytest.raises(ConfigError, match="plan at least 5 trials per mechanism"):
        resolve_sweep(path, ["mechanisms=[dpsgd,atdp]", "adaptive={max_trials_per_mechanism: 8, step: 2}"])
    line = budget_line(_adaptive())
    assert "looks at 5, 7, 9 trials per mechanism (cap 9), each at family-wise 0.05/3 = 0.0167" in line
    assert "11 trials planned, at most 19" in line  # 2 × 5 and the control; each mechanism 4 more at the cap
