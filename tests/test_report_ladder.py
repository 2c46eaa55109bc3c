"""The report of an ε ladder: the curve's points are the stored trials' (best, median, range per mechanism and ε),
No-DP is the reference line, crossings are named, the rank tests run at each ε, each mechanism's hypervolume is the
volume its trials dominate, the search's cost is given per ε; a sweep with one ε still draws the one-ε report."""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics

import dp_accounting
import numpy as np
import pandas as pd
import pytest

from sdp_core.privacy.accountants import rdp as rdp_module
from sdp_core.report import build_report
from sdp_core.report.curve import HYPERVOLUME_MARGIN, curve_points, hypervolume, hypervolumes, ranking_table
from sdp_core.report.curve_plot import curve_figure
from sdp_core.report.headline import headline
from sdp_core.report.load import load_sweep
from sdp_core.report.pareto import analyse
from sdp_core.report.statement import sweep_cost
from tests.synthetic_sweep import write_ladder_sweep, write_synthetic_sweep


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    return write_ladder_sweep(tmp_path_factory.mktemp("ladder") / "sweep")


@pytest.fixture(scope="module")
def report(ladder, tmp_path_factory):
    return build_report(ladder, tmp_path_factory.mktemp("ladder-report") / "report")


def _rows(directory) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((directory / "trials").glob("*.json"))]


def _stored_curve(directory) -> dict[tuple[str, float], list[float]]:
    """Each (mechanism, ε target) cell's val perplexities, read from the stored rows."""
    cells: dict[tuple[str, float], list[float]] = {}
    for row in _rows(directory):
        mechanism = row["config"]["mechanism"]["name"]
        if mechanism != "nodp" and row["state"] == "finished":
            cells.setdefault((mechanism, row["config"]["privacy"]["target_epsilon"]), []).append(
                row["metrics"]["val_perplexity"])
    return cells


def test_the_curve_is_the_stored_trials_best_median_and_range_at_each_epsilon(ladder, report):
    stored = _stored_curve(ladder)
    a = analyse(load_sweep(ladder))
    points = {(p.mechanism, p.epsilon): p for p in curve_points(a)}
    assert set(points) == set(stored) and len(stored) == 4 * 3
    for cell, values in stored.items():
        p = points[cell]
        assert (p.best, p.median, p.worst) == (min(values), statistics.median(values), max(values))
        assert len(p.values) == 3  # the sweep's equal budget
    figure = curve_figure(a)
    solid = {t["name"]: dict(zip(t["x"], t["y"])) for t in figure["data"] if t.get("showlegend", True)}
    assert solid["DP-SGD"] == {e: min(stored[("dpsgd", e)]) for e in (1.0, 3.0, 8.0)}
    nodp = min(r["metrics"]["val_perplexity"] for r in _rows(ladder) if r["config"]["mechanism"]["name"] == "nodp")
    (line,) = figure["layout"]["shapes"]
    assert line["y0"] == line["y1"] == nodp  # No-DP's best: the reference without privacy
    summary = (report / "summary.md").read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| JFT (SDP) |"))
    jft = sorted(stored[("jft", 1.0)])
    assert f"| {jft[0]:.1f} · {statistics.median(jft):.1f} ({jft[0]:.1f}–{jft[-1]:.1f}, 3) |" in row
    frame = pd.read_parquet(report / "trials.parquet")
    assert set(frame["privacy.target_epsilon"].dropna()) == {1.0, 3.0, 8.0}  # ε is a column, not a constant


def test_the_report_leads_with_the_curve_and_names_each_notion_and_the_rank_verdicts(report):
    html = (report / "index.html").read_text()
    sections = re.findall(r'<section id="(\w+)"', html)
    assert sections[0] == "curve" and 'id="utility_vs_target_epsilon"' in html
    assert (report / "utility_vs_target_epsilon.png").is_file()
    summary = (report / "summary.md").read_text()
    lead = summary.splitlines()[2]
    # the hedge first, each notion's rank tests on their own: DP-SGD, CRT alone in theirs, JFT and ATDP (SDP) ranked
    assert lead.startswith("Rank tests within each notion, DP: DP-SGD alone, not ranked; SDP: at ε = 1, 3, 8: JFT "
                           "leads but is not separated from ATDP with 3 trials each; run 1 more each; "
                           "confidentiality: CRT alone, not ranked.")
    assert "Val perplexity against ε (δ = 1e-5, RDP): DP covers every record, entirely; SDP covers the tokens" in lead
    assert "and within it JFT has the best trial at every ε" in lead
    assert "Check first" not in lead  # every private cell worse than No-DP, and better at a larger ε
    assert "DP-SGD reaches" not in lead and "CRT reaches" not in lead  # no crossing across notions
    assert "never ranked against each other" in lead
    assert "| ε = 3 | SDP | JFT ≈ ATDP |" in summary and "DP-SGD |" not in summary.split("## Utility against ε")[1].split(
        "mechanisms by their best trial")[1].split("##")[0]


def test_a_crossing_is_named_where_the_best_mechanism_changes(tmp_path):
    """DP-SGD's perplexity falls faster with ε than ATDP's here: it takes the lead between ε = 3 and ε = 8."""
    directory = write_ladder_sweep(tmp_path / "s", mechanisms=("jft", "atdp"), ppl={"jft": 12.0, "atdp": 30.0},
                                   slope={"jft": 8.0, "atdp": 1.0})
    text = headline(analyse(load_sweep(directory)))
    assert "the best trial is ATDP's at ε = 1, ATDP's at ε = 3, JFT's at ε = 8" in text
    assert "JFT overtakes ATDP between ε = 3 and ε = 8" in text


def test_mechanisms_of_different_notions_are_never_ranked_or_crossed(tmp_path):
    """DP-SGD (DP) and ATDP (SDP here) differ by far at every ε, yet neither is ranked above the other, leads the
    other, or reaches the other's utility: each stands alone in its notion."""
    directory = write_ladder_sweep(tmp_path / "s", mechanisms=("dpsgd", "atdp"), ppl={"dpsgd": 12.0, "atdp": 30.0},
                                   slope={"dpsgd": 8.0, "atdp": 1.0})
    a = analyse(load_sweep(directory))
    text = headline(a)
    assert "DP: DP-SGD alone, not ranked; SDP: ATDP alone, not ranked." in text
    assert "overtakes" not in text and "reaches" not in text and "best trial" not in text
    assert ranking_table(a).rows == []


def test_a_private_cell_beating_no_dp_or_worsening_with_epsilon_is_flagged_after_the_hedge(tmp_path):
    """JFT's perplexity here is below No-DP's and rises with ε (slope < 0); ATDP's is above No-DP's and falls. The
    flagged cells are exactly those the stored rows show: a cell's best below No-DP's best, or above the same
    mechanism's best at the next smaller ε."""
    directory = write_ladder_sweep(tmp_path / "s", mechanisms=("jft", "atdp", "nodp"), ppl={"jft": 5.0},
                                   slope={"jft": -0.5})
    rows = _rows(directory)
    best: dict[tuple[str, float], float] = {}
    for r in rows:
        key = (r["config"]["mechanism"]["name"], r["config"]["privacy"]["target_epsilon"])
        best[key] = min(best.get(key, math.inf), r["metrics"]["val_perplexity"])
    nodp = min(v for (m, _), v in best.items() if m == "nodp")
    below = {(m, e) for (m, e), v in best.items() if m != "nodp" and v < nodp}
    rising = {(m, lo, hi) for m in ("jft", "atdp") for lo, hi in ((1.0, 3.0), (3.0, 8.0))
              if best[(m, hi)] > best[(m, lo)]}
    assert below == {("jft", e) for e in (1.0, 3.0, 8.0)} and {m for m, *_ in rising} == {"jft"}
    text = headline(analyse(load_sweep(directory)))
    assert text.startswith("Rank tests within each notion, SDP: at ε = ")
    check = text[text.index("Check first: "):text.index("; a private model should")]
    assert check.count("beats No-DP's best") == len(below) and check.count("worsens from") == len(rising)
    shown = lambda v: f"{v:.3g}" if v < 10 else f"{v:.1f}"  # noqa: E731 (the report's 3 significant digits)
    for m, e in below:
        assert f"JFT (SDP) at ε = {e:g} ({shown(best[(m, e)])}) beats No-DP's best ({shown(nodp)})" in check
    for m, lo, hi in rising:
        assert (f"JFT (SDP) worsens from ε = {lo:g} ({shown(best[(m, lo)])}) to ε = {hi:g} "
                f"({shown(best[(m, hi)])})") in check
    assert "ATDP" not in check
    assert text.index("Rank tests") < text.index("Check first") < text.index("Val perplexity against ε")


def _brute_hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """The volume of the union of the boxes [p, reference], cell by cell on the grid of every point's coordinates."""
    grids = [np.unique(np.concatenate([points[:, k], [reference[k]]])) for k in range(points.shape[1])]
    volume = 0.0
    for cell in itertools.product(*(range(len(g) - 1) for g in grids)):
        low = np.array([g[i] for g, i in zip(grids, cell)])
        if (points <= low).all(axis=1).any():
            volume += float(np.prod([g[i + 1] - g[i] for g, i in zip(grids, cell)]))
    return volume


def test_hypervolume_is_the_volume_the_trials_dominate(ladder):
    rng = np.random.default_rng(0)
    for _ in range(20):
        points = rng.random((rng.integers(1, 7), 3))
        assert hypervolume(points, np.full(3, 1.1)) == pytest.approx(_brute_hypervolume(points, np.full(3, 1.1)))
    a = analyse(load_sweep(ladder))
    h = hypervolumes(a)
    assert h.axes == ["val_perplexity", "exposure_mean", "epsilon"]
    trials = [t for p in curve_points(a) for t in p.trials]
    values = np.array([[t.metric("val_perplexity"), t.metric("exposure_mean"), t.formal_epsilon] for t in trials])
    scaled = (values - values.min(axis=0)) / (values.max(axis=0) - values.min(axis=0))
    reference = np.full(3, 1 + HYPERVOLUME_MARGIN)
    for m in ("dpsgd", "jft", "crt", "atdp"):
        mine = scaled[[t.mechanism == m for t in trials]]
        assert h.by_mechanism[m] == pytest.approx(_brute_hypervolume(mine, reference) / reference.prod())
        assert h.trials[m] == 9


def _dp_accounting_epsilon(events: list[dict]) -> float:
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(rdp_module.ORDERS))
    for e in events:
        accountant.compose(dp_accounting.PoissonSampledDpEvent(
            e["sample_rate"], dp_accounting.GaussianDpEvent(e["noise_multiplier"])), e["steps"])
    return accountant.get_epsilon(1e-5)


def test_the_search_cost_is_given_per_epsilon_and_notion_and_conditional_bounds_apart(ladder, report):
    cost = sweep_cost(load_sweep(ladder))
    for epsilon in (1.0, 3.0, 8.0):
        events = [e for r in _rows(ladder) if r["config"]["mechanism"]["name"] == "dpsgd"
                  and r["config"]["privacy"]["target_epsilon"] == epsilon for e in r["privacy"]["events"]]
        bound = cost.bounds[f"trials at ε = {epsilon:g}, DP"]
        assert bound["trials"] == 3 and bound["epsilon"] == pytest.approx(_dp_accounting_epsilon(events), rel=1e-3)
    assert not any("Papernot" in name for name in cost.bounds)
    assert all("does not meet these conditions" in c["conditions"] for c in cost.conditional.values())
    html = (report / "index.html").read_text()
    cost_html = html[html.index('<section id="cost"'):]
    assert "The sweep&#x27;s own ε: " in cost_html and "<details><summary>What would hold if" in cost_html


def test_a_sweep_with_one_epsilon_draws_the_one_epsilon_report(tmp_path):
    """No curve, no per-ε cost, the same sections as before the ladder; its reading notes name the ladder as the
    next step. A ladder of one rung is that sweep too."""
    directory = write_synthetic_sweep(tmp_path / "s", 24, seed=4, intervals=True)
    html = (build_report(directory, tmp_path / "r") / "index.html").read_text()
    assert re.findall(r'<section id="(\w+)"', html) == ["power", "plots", "frontier", "mechanisms", "unfinished",
                                                         "detector", "cost"]
    assert "utility_vs_target_epsilon" not in html and not (tmp_path / "r" / "utility_vs_target_epsilon.png").exists()
    assert "trials at ε =" not in html
    assert "Next, the trade-off over ε: an ε ladder" in html and "sweeps/tradeoff.yaml" in html
    one = write_ladder_sweep(tmp_path / "one", ladder=(3.0,), mechanisms=("dpsgd", "jft"))
    a = analyse(load_sweep(one))
    assert a.ladder == [] and headline(a).startswith("The best model of each guarantee: at ε = 3 (DP, add/remove")
