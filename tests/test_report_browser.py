"""`index.html` in headless Chromium, offline: the plots render, the console stays clean, the decision columns fit
1280 px and no table needs horizontal scrolling there, a screenshot is saved.

The browser is Debian's `chromium` package: the `chromium` fixture installs it with `apt-get install chromium`
when it is missing (the pip packages that drive a browser download their own build, which needs a network this
project's machines may not have). The tests skip only when apt itself cannot be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sdp_core.report import build_report
from tests.synthetic_sweep import write_ladder_sweep, write_synthetic_sweep

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: anything not inlined fails to load
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--window-size=1400,2000"]


def _apt(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; installed with apt when missing. Skips only when apt itself cannot be reached."""
    path = shutil.which("chromium")
    if path:
        return path
    if shutil.which("apt-get") is None:
        pytest.skip("chromium is missing and there is no apt-get")
    try:
        update = _apt("update", timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("apt-get update timed out: package mirrors unreachable")
    if update.returncode != 0:
        pytest.skip(f"apt-get update failed: {update.stderr.strip().splitlines()[-1:]}")
    install = _apt("install", "-y", "chromium", timeout=900)
    assert install.returncode == 0, install.stderr
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    sweep = write_synthetic_sweep(root / "sweep", 60, seed=3, intervals=True, audit=True)
    return build_report(sweep, root / "report") / "index.html"


def open_page(chromium: str, page: Path, tmp_path: Path, *action: str, width: int = 1400
              ) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    flags = [f for f in FLAGS if not f.startswith("--window-size")] + [f"--window-size={width},2000"]
    return subprocess.run([chromium, *flags, f"--user-data-dir={profile}", *action, page.as_uri()],
                          capture_output=True, text=True, timeout=180)


# Appended to a copy of the page: measures every table after layout and writes the numbers into the DOM, which
# `--dump-dom` returns (the page itself carries no test code).
MEASURE = """<script>window.addEventListener("load", () => setTimeout(() => {
  const out = [...document.querySelectorAll("section")].map(s => ({id: s.id,
    tables: [...s.querySelectorAll("div.scroll")].map(d => ({scroll: d.scrollWidth, client: d.clientWidth,
      headers: [...d.querySelectorAll("th")].map(th => [th.textContent, th.getBoundingClientRect().right])}))}));
  const pre = document.createElement("pre"); pre.id = "measured";
  pre.textContent = JSON.stringify({width: window.innerWidth, sections: out}); document.body.appendChild(pre);
}, 500));</script>"""


def measure(chromium: str, page: Path, tmp_path: Path, width: int = 1280) -> tuple[dict, str]:
    """Every table's widths and headers' right edges, measured in the laid-out page, and the page's DOM."""
    import json

    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    result = open_page(chromium, probe, tmp_path, "--dump-dom", width=width)
    assert result.returncode == 0, result.stderr[-2000:]
    measured = json.loads(re.search(r'<pre id="measured">(.*?)</pre>', result.stdout, re.S).group(1)
                          .replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    return measured, result.stdout


def test_decision_columns_fit_1280px_without_horizontal_scrolling(chromium, page, tmp_path):
    measured, _ = measure(chromium, page, tmp_path)
    sections = {s["id"]: s["tables"] for s in measured["sections"]}
    for name in ("frontier", "mechanisms"):
        (table,) = sections[name]
        headers = dict(table["headers"])
        for column in ("mechanism", "ε", "audit ε ≥", "val perplexity", "private-token perplexity", "canary exposure",
                       "MIA AUC"):
            assert 0 < headers[column] <= measured["width"], (name, column, headers)
    assert len(sections["detector"]) == 2  # the policies, then recall per gold label
    for name, tables in sections.items():
        for table in tables:
            assert table["scroll"] <= table["client"], (name, table)  # no horizontal scroll box anywhere


def test_plots_render_offline_without_console_errors(chromium, page, tmp_path):
    result = open_page(chromium, page, tmp_path, "--dump-dom")
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    graphs = re.findall(r'<div id="(utility_vs_\w+)" class="plotly-graph-div js-plotly-plot"', dom)
    assert graphs == ["utility_vs_exposure_mean", "utility_vs_epsilon", "utility_vs_train_seconds"]
    # Plotly drew every graph: an SVG per graph, scatter traces and their markers.
    assert dom.count('<svg class="main-svg"') >= 2 * len(graphs)
    assert dom.count('class="point"') >= 60
    assert "Pareto front" in dom and "The best model of each guarantee: at ε = 3 (" in dom
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console


def test_screenshot(chromium, page, tmp_path):
    shot = tmp_path / "report.png"
    result = open_page(chromium, page, tmp_path, f"--screenshot={shot}", "--hide-scrollbars")
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 50_000  # a blank page is a few kB
    keep = os.environ.get("SDP_REPORT_SCREENSHOT")
    if keep:  # for a person to look at: SDP_REPORT_SCREENSHOT=/tmp/report.png pytest tests/test_report_browser.py
        shutil.copy(shot, keep)


def test_an_epsilon_ladder_report_draws_its_curve_and_fits_1280px(chromium, tmp_path):
    page = build_report(write_ladder_sweep(tmp_path / "ladder"), tmp_path / "report") / "index.html"
    measured, dom = measure(chromium, page, tmp_path)
    assert measured["sections"][0]["id"] == "curve" and len(measured["sections"][0]["tables"]) == 2
    for section in measured["sections"]:
        for table in section["tables"]:
            assert table["scroll"] <= table["client"], (section["id"], table)
    curve = dom[dom.index('<div id="utility_vs_target_epsilon"'):]
    assert '<svg class="main-svg"' in curve[:200_000] and curve.count('class="point"') >= 12


def test_a_report_with_long_policy_names_fits_1280px(chromium, tmp_path):
    """The detector tables of a sweep on data without gold spans, as `prepare` stores them: the policy's name is
    the union `general` resolves to (one word of 80 characters), every split's masked share, the recall estimate
    per claimed type and a review; no table is wider than its container at 1280 px."""
    import json

    from sdp_core.detectors.estimate import CARRIERS
    from sdp_core.detectors.registry import get_policy

    policies = [get_policy("general").name, get_policy("strict").name]
    sweep = write_synthetic_sweep(tmp_path / "sweep", 12, seed=3, intervals=True, audit=True)
    share = {"value": 0.0834, "low": 0.0829, "high": 0.0839, "n": 412_345}
    rate = {"value": 0.9925, "low": 0.9801, "high": 0.9972, "k": 397, "n": 400}
    for i, path in enumerate(sorted((sweep / "trials").glob("*.json"))):
        row = json.loads(path.read_text())
        detector = row["detector"]
        for key in ("recall", "missing_rate", "precision", "recall_per_label"):
            detector.pop(key)
        detector.update(policy=policies[i % 2], masked_char_share=dict.fromkeys(("train", "validation", "test"), share),
                        recall_estimate={"method": "insertion", "cannot_see": "formats no generator knows",
                                         "warn_below": 0.95, "per_type": {t: {**rate, "warn": False} for t in CARRIERS}},
                        review={"records": 120, "secrets": rate, "per_type": {"name": rate, "email": rate}})
        path.write_text(json.dumps(row))
    page = build_report(sweep, tmp_path / "report") / "index.html"
    measured, dom = measure(chromium, page, tmp_path)
    sections = {s["id"]: s["tables"] for s in measured["sections"]}
    assert {"detector", "recall-estimate", "review-recall"} <= set(sections)
    assert len(policies[0]) > 70 and policies[0] in dom.replace("<wbr>", "")
    for name, tables in sections.items():
        for table in tables:
            assert table["scroll"] <= table["client"], (name, table)
