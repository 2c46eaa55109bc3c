"""The report readable at a glance: ε as the formal bound where a trial's headline ε is an estimate, no ε axis
under a fixed ε, exposure's intervals and floor on its plot, trial tables with a detail row, plotly's basic bundle."""

from __future__ import annotations

import json
import re

import pytest

from sdp_core.privacy.light_noise import ESTIMATE
from sdp_core.report import build_report
from sdp_core.report.load import load_sweep
from sdp_core.report.pareto import analyse
from sdp_core.report.plots import build_plots, plotly_figure, views
from tests.synthetic_sweep import LIGHT_NOISE_FORMAL_EPSILON, write_synthetic_sweep


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    return write_synthetic_sweep(tmp_path_factory.mktemp("glance") / "sweep", 40, seed=5, intervals=True)


def _rows(directory):
    return {p.stem: json.loads(p.read_text()) for p in sorted((directory / "trials").glob("*.json"))}


def test_the_epsilon_plot_places_a_light_noise_trial_at_its_formal_bound(sweep_dir):
    a = analyse(load_sweep(sweep_dir))
    (plot,) = [p for p in build_plots(a) if p.view.x == "epsilon"]
    estimates = {t for t, r in _rows(sweep_dir).items()
                 if r["state"] == "finished" and r["privacy"].get("guarantee") == ESTIMATE}
    assert estimates
    for point in plot.points:
        row = _rows(sweep_dir)[point.trial.trial_id]
        privacy = row["privacy"]["formal"] if point.trial.trial_id in estimates else row["privacy"]
        assert point.x == pytest.approx(privacy["epsilon"])
    assert {round(p.x) for p in plot.points if p.trial.trial_id in estimates} == {LIGHT_NOISE_FORMAL_EPSILON}
    assert plot.x_label.startswith("ε, formal bound (")


def test_under_a_fixed_epsilon_there_is_no_epsilon_axis(tmp_path):
    directory = write_synthetic_sweep(tmp_path / "sweep", 30, seed=2, intervals=True)
    for path in (directory / "trials").glob("*.json"):  # no light-noise trial: every formal ε is the target
        row = json.loads(path.read_text())
        if row["privacy"].get("guarantee") == ESTIMATE:
            path.unlink()
    a = analyse(load_sweep(directory))
    assert [v.x for v in views(a)] == ["exposure_mean", "train_seconds"]
    html = (build_report(directory, tmp_path / "report") / "index.html").read_text()
    assert re.search(r"Every finished trial spends the same formal ε = 3 \([^)]*δ = 1e-5, RDP\), so no plot has an "
                     r"ε axis", html)
    assert 'id="utility_vs_epsilon"' not in html


def test_the_exposure_plot_has_the_intervals_and_the_floor(sweep_dir):
    a = analyse(load_sweep(sweep_dir))
    (plot,) = [p for p in build_plots(a) if p.view.x == "exposure_mean"]
    figure = plotly_figure(plot, a)
    rows = _rows(sweep_dir)
    for trace in figure["data"]:
        if "error_x" in trace:
            for x, plus, minus in zip(trace["x"], trace["error_x"]["array"], trace["error_x"]["arrayminus"]):
                assert x + plus == pytest.approx(1.3 * x) and x - minus == pytest.approx(0.7 * x)
    assert sum("error_x" in t for t in figure["data"]) >= 3
    (floor,) = figure["layout"]["shapes"]
    assert floor["x0"] == floor["x1"] == 1.44 == min(r["metrics"]["exposure_floor"] for r in rows.values()
                                                       if "exposure_floor" in r["metrics"])


def test_trial_tables_show_the_formal_bound_and_a_detail_row(sweep_dir, tmp_path):
    html = (build_report(sweep_dir, tmp_path / "report") / "index.html").read_text()
    frontier = html[html.index('id="frontier"'):html.index('id="mechanisms"')]
    first = re.search(r'<tr class="trial[^"]*">(.*?)</tr>', frontier).group(1)
    header = re.search(r"<thead><tr>(.*?)</tr></thead>", frontier).group(1)
    assert "hyper-parameters" not in header and "σ" not in header and ">ε<" in header
    assert first.count("<td") == header.count("<th")
    assert frontier.count('<tr class="detail') == frontier.count('<tr class="trial')
    assert "hyper-parameters</b> learning_rate=" in frontier
    estimate_cells = re.findall(r"<td title=\"[^\"]*empirical estimate[^\"]*\">([^<]*)</td>", html)
    assert estimate_cells and all(c.startswith(f"{LIGHT_NOISE_FORMAL_EPSILON:g} · SDP, formal (estimate 3")
                                  for c in estimate_cells)


def test_the_page_inlines_the_basic_bundle_only(sweep_dir, tmp_path):
    from plotly.offline import get_plotlyjs

    html = (build_report(sweep_dir, tmp_path / "report") / "index.html").read_text()
    assert get_plotlyjs()[:2000] not in html and html.count("plotly.js (basic - minified)") == 1
    assert len(html.encode()) < 1_600_000  # the full bundle alone is 4.6 MB
    assert html.count('"scatter"') >= 3 and '"template":{"layout"' in html.replace(" ", "")


@pytest.mark.parametrize("epsilon,shown", [(0.001, "0.001"), (4e-4, "0.0004"), (2.994, "3"), (5.1631, "5.17"),
                                           (3.0 - 1e-6, "3")])
def test_no_line_prints_a_nonzero_epsilon_as_zero_or_below_itself(epsilon, shown):
    """Every line that prints an ε (the trial's summary, the live table, `sdp-sweep epsilon`, the report, the formal
    bound beside an estimate) prints it with 3 significant digits rounded up: never 0.000 for 0.001, never 2.99
    for 2.994 (an upper bound printed below itself)."""
    from sdp_core.privacy import privacy_report
    from sdp_core.privacy.cli import _line
    from sdp_core.privacy.relations import qualifiers
    from sdp_core.report.formatting import format_epsilon
    from sdp_core.row import TrialRow
    from sdp_core.sweep.live import epsilon_text

    report = privacy_report(epsilon, 1e-5, "DP", "rdp", [])
    row = TrialRow(name="t", state="finished", seed=0, config={"mechanism": {"name": "dpsgd"}}, privacy=report,
                   metrics={"val_perplexity": 20.0})
    assert f"ε={shown} (DP" in row.summary_line()
    assert epsilon_text(report).startswith(f"{shown} (DP")
    assert format_epsilon(report).startswith(f"ε = {shown} (DP")
    assert epsilon <= float(_line(report).split()[2]) <= epsilon * 1.0001  # `sdp-sweep epsilon`: 5 digits
    estimate = {**report, "guarantee": ESTIMATE, "formal": report}
    assert qualifiers(estimate).endswith(f"formal bound ε={shown}")
