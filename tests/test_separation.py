"""What a budget of trials can separate, stated before any trial runs: checked against scipy's exact Mann–Whitney
test and a brute-force enumeration of its null distribution, and on the shipped sweeps."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy.stats import mannwhitneyu

from sdp_core.config.loading import load_sweep_config
from sdp_core.separation import RANKING_ALPHA, budget_line, rankings, reversed_pairs_allowed, smallest_p_value
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
        assert smallest_p_value(cfg.per_cell, cfg.per_cell) <= RANKING_ALPHA / steps, (name, mechanisms)
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
