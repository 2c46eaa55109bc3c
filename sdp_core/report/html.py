"""`index.html`: one self-contained page (inline CSS, plotly.js's basic bundle inlined once, no network) that leads
with the answer.

Trial tables keep the decision columns in view at 1280 px (trial, mechanism, ε, utility, exposure, MIA): the ε
cell is the number and notion, its full qualifiers (neighbouring relation, δ, accountant; an estimate's formal
bound) in its tooltip and in a detail row under the trial, beside σ, the hyper-parameters, the saved model and the
wall time.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from typing import Sequence

from sdp_core.privacy.light_noise import ESTIMATE
from sdp_core.privacy.numbers import epsilon_number
from sdp_core.report.curve import curve_table, ranking_table
from sdp_core.report.curve_plot import CURVE_TITLE, curve_div
from sdp_core.report.findings import ClaimResult, claims_table
from sdp_core.report.formatting import DASH, epsilon_meaning, format_epsilon, mechanism_name, metric_label
from sdp_core.report.headline import (counts_line, front_note, headline, reading_notes, sweep_title,
                                     uncertainty_note)
from sdp_core.report.load import Trial
from sdp_core.report.pareto import Analysis
from sdp_core.report.power import power_statement
from sdp_core.report.plots import Plot, fixed_epsilon, plotly_div, plotly_js
from sdp_core.report.statement import WOULD_HOLD, SweepCost, caveat, sweep_epsilon
from sdp_core.report.tables import (
    COMPUTE_METRICS,
    DETECTOR_TABLES,
    EPSILON_COLUMN,
    MODEL_COLUMN,
    POLICY_COLUMN,
    REPLACE_ONE_COLUMN,
    SEARCH_COLUMN,
    Table,
    charges_table,
    cost_table,
    family_table,
    frontier_table,
    mechanism_table,
    policy_types_notes,
    recall_estimate_table,
    review_recall_table,
    unfinished_table,
)

CSS = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #e3e6ec; --accent: #2456c7; --soft: #f5f7fb; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--ink);
  font: 15px/1.55 Inter, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 40px 32px 64px; }
.eyebrow { text-transform: uppercase; letter-spacing: .08em; font-size: 12px; color: var(--muted); margin: 0; }
h1 { font-size: 30px; margin: 4px 0 2px; letter-spacing: -.01em; }
h2 { font-size: 20px; margin: 44px 0 6px; padding-top: 8px; border-top: 1px solid var(--line); }
.meta, .caption { color: var(--muted); font-size: 13.5px; margin: 2px 0 12px; }
.headline { background: var(--soft); border-left: 4px solid var(--accent); border-radius: 6px; padding: 18px 22px;
  margin: 22px 0 8px; }
.headline .lead { font-size: 18.5px; line-height: 1.5; margin: 0 0 8px; font-weight: 500; }
.headline .counts { margin: 0; color: var(--muted); }
nav { display: flex; flex-wrap: wrap; gap: 6px 18px; font-size: 14px; margin: 14px 0 0; }
nav a, footer a { color: var(--accent); text-decoration: none; }
nav a:hover, footer a:hover { text-decoration: underline; }
/* Fixed columns: a plot takes its width when its script runs, before later plots join the grid. */
.plots { display: grid; grid-template-columns: 1fr 1fr; gap: 18px; }
@media (max-width: 1100px) { .plots { grid-template-columns: 1fr; } }
.plot { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px 4px; min-width: 0; }
.plot h3 { font-size: 15px; margin: 2px 4px 0; }
.scroll { overflow-x: auto; }
tr.detail td { color: var(--muted); font-size: 12.5px; padding-top: 0; white-space: normal; }
tr.detail b { font-weight: 600; }
tbody tr.trial:has(+ tr.detail) td { border-bottom: none; }
tbody tr:nth-child(even) { background: none; }
tbody tr.band td { background: #fafbfd; }
table { border-collapse: collapse; width: 100%; font-size: 13.5px; margin: 6px 0 4px; }
th { text-align: left; font-weight: 600; color: var(--muted); border-bottom: 2px solid var(--line);
  padding: 7px 10px; white-space: nowrap; }
td { padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
tbody tr:nth-child(even) { background: #fafbfd; }
td.nowrap { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--soft);
  padding: 1px 5px; border-radius: 4px; }
ul.notes { color: var(--muted); font-size: 13.5px; padding-left: 20px; }
footer { margin-top: 48px; padding-top: 14px; border-top: 1px solid var(--line); color: var(--muted); font-size: 13px; }
"""

FILES = (("summary.md", "headline tables"), ("privacy_statement.md", "what was protected"),
         ("trials.csv", "every trial"), ("trials.parquet", "every trial"), ("pareto.png", "static plots"),
         ("frontier/", "re-runnable trial configs"))


DETAIL_COLUMNS = ("σ", REPLACE_ONE_COLUMN, "hyper-parameters", MODEL_COLUMN, SEARCH_COLUMN,
                  *map(metric_label, COMPUTE_METRICS), "wall time")
"""Columns of a trial table shown in the detail row under each trial rather than as columns of their own (its
compute, steps, tokens and wall time, among them: the metrics that decide keep the row's width)."""
TRIAL_ID_COLUMNS = ("trial", "best trial")


def short_epsilon(t: Trial) -> str:
    """The ε cell of a trial table: the formal bound and notion (`3 · SDP`); for an empirical estimate the formal
    bound, with the estimate beside it (`5.03 · SDP, formal (estimate 3)`)."""
    notion = t.privacy.get("notion", "?")
    if t.epsilon is None:
        return format_epsilon(t.privacy)
    if t.privacy.get("guarantee") == ESTIMATE:
        bound = t.formal_epsilon
        estimate = epsilon_number(t.epsilon)
        return f"{epsilon_number(bound) if bound is not None else '∞'} · {notion}, formal (estimate {estimate})"
    holds = ", does not hold here" if t.privacy.get("holds") is False else ""
    return f"{epsilon_number(t.epsilon)} · {notion}{holds}"


def _cell(column: str, value: str) -> str:
    """A cell's HTML: a kept model links to its folder (the report is OUT/report/); a policy's name may break after
    each comma of a union (`address_tagger,credit_card,...` has no other place to break and would widen its table
    past the page)."""
    e = html.escape
    if column == POLICY_COLUMN:
        return ",<wbr>".join(e(part) for part in value.split(","))
    return f'<a href="../{e(value)}/">{e(value)}</a>' if column == MODEL_COLUMN and value != DASH else e(value)


def _table(table: Table, a: Analysis | None = None) -> str:
    """A table; with `a`, a trial table: detail columns and ε's qualifiers go to a row under each trial."""
    e = html.escape
    trials = {t.trial_id: t for t in a.sweep.trials} if a is not None else {}
    id_column = next((table.columns.index(c) for c in TRIAL_ID_COLUMNS if c in table.columns), None)
    split = bool(trials) and id_column is not None
    main = [i for i, c in enumerate(table.columns) if not (split and c in DETAIL_COLUMNS)]
    detail = [i for i, c in enumerate(table.columns) if split and (c in DETAIL_COLUMNS or c == EPSILON_COLUMN)]

    def cls(column: str) -> str:
        if column in table.numeric:
            return ' class="num"'
        return ' class="nowrap"' if column == EPSILON_COLUMN and not split else ""

    def header(column: str) -> str:
        if split and column == EPSILON_COLUMN:
            return '<th title="formal bound and notion; relation, δ and accountant in the row below">ε</th>'
        return f"<th{cls(column)}>{e(column)}</th>"

    rows = []
    for n, row in enumerate(table.rows):
        t = trials.get(row[id_column]) if split and id_column is not None else None
        band = " band" if n % 2 else ""
        cells = []
        for i in main:
            column, value = table.columns[i], row[i]
            if t is not None and column == EPSILON_COLUMN:
                cells.append(f'<td title="{e(value)}">{e(short_epsilon(t))}</td>')
            else:
                cells.append(f"<td{cls(column)}>{_cell(column, value)}</td>")
        rows.append(f'<tr class="trial{band}">{"".join(cells)}</tr>')
        details = [(table.columns[i], row[i]) for i in detail if row[i] != DASH]
        if t is not None and details:
            text = " · ".join(_cell(c, v) if c == EPSILON_COLUMN else f"<b>{e(c)}</b> {_cell(c, v)}"
                              for c, v in details)
            rows.append(f'<tr class="detail{band}"><td colspan="{len(main)}">{text}</td></tr>')
    head = "".join(header(table.columns[i]) for i in main)
    note = f'<p class="caption">{e(table.note)}</p>' if table.note else ""
    return (f'{note}<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            '</table></div>')


@dataclass(frozen=True)
class Section:
    """One titled part of the page; `caption` and `body` are HTML."""

    anchor: str
    title: str
    body: str
    caption: str

    def html(self) -> str:
        return (f'<section id="{self.anchor}"><h2>{html.escape(self.title)}</h2>'
                f'<p class="caption">{self.caption}</p>{self.body}</section>')


PLOTS_CAPTION = ("Colour: mechanism. ★ on the sweep's Pareto front; ● dominated; grey × stopped early (partial "
                 "metrics). Dashed: the best trade-off of the two plotted quantities alone. Bars: 95 % intervals; "
                 "dotted: the random-rank floor (not memorised).")
DETECTOR_CAPTION = ("Share of training tokens the policy redacts, and of each split's non-space characters it masks "
                    "beside the share gold spans cover: what it masks beyond the gold share is text Redacted, JFT's "
                    "phase 1 and CRT's public set lose to false positives. Recall against gold spans with 95 % Wilson "
                    "intervals where the data has them.")


def power_section(a: Analysis) -> Section | None:
    """The privacy axis's power first (`report.power`), then each canary family's exposure by mechanism."""
    families = family_table(a)
    if families is None and a.power.control is None:
        return None
    body = f"<p>{html.escape(power_statement(a.power, a.dropped, a.trial_tokens))}</p>" + (_table(families) if families else "")
    return Section("power", "Empirical privacy: power and canary families", body,
                   "A positive control first: a No-DP model on the same data and canaries must be seen to memorise "
                   "before an exposure at the floor can mean “not memorised”.")


def curve_section(a: Analysis) -> Section | None:
    """An ε ladder's curve, its table (with each mechanism's hypervolume) and the rank tests at each ε."""
    if not a.ladder:
        return None
    body = (f'<div class="plot"><h3>{html.escape(CURVE_TITLE)}</h3>{curve_div(a)}</div>' + _table(curve_table(a))
            + _table(ranking_table(a)))
    return Section("curve", "Utility against ε", body, "Each mechanism searched at every ε of the ladder with the "
                   "same number of trials. Solid: its best trial at each ε; dotted with a bar: the median and range of "
                   "its trials; dashed: No-DP's best, the utility without privacy. Hover a point for its value.")


def claims_section(claims: Sequence[ClaimResult]) -> Section | None:
    if not claims:
        return None
    return Section("claims", f"Claims: {sum(r.held is True for r in claims)} of {len(claims)} held",
                   _table(claims_table(claims)), "Each paper's claim as an ordering of arms by the mean over their "
                   "seeds, with how many seeds agree. A claim that did not hold here is reported as such.")


def plots_section(a: Analysis, plots: list[Plot]) -> Section:
    if not plots:
        return Section("plots", "Pareto plots", "<p>No finished or early-stopped trial has the plotted metrics.</p>",
                       PLOTS_CAPTION)
    figures = "".join(f'<div class="plot"><h3>{html.escape(p.title)}</h3>{plotly_div(p, a)}</div>' for p in plots)
    fixed = fixed_epsilon(a)
    spent = [t for t in a.sweep.trials if t.state == "finished" and (t.formal_epsilon or 0) > 0]  # fixed_epsilon's
    epsilon = (f" Every finished trial spends the same formal ε = {epsilon_number(fixed)} ({epsilon_meaning(spent)}), "
               "so no plot has an ε axis; the privacy axis is what the trials differ in." if fixed is not None else
               " ε is the formal bound.")
    return Section("plots", "Pareto plots", f'<div class="plots">{figures}</div>', PLOTS_CAPTION + html.escape(
        epsilon) + " Hover a point for its configuration; drag to zoom, double-click to reset.")


def frontier_section(a: Analysis, cost: SweepCost) -> Section:
    e = html.escape
    objectives = ", ".join(f"{metric_label(o.metric)} ({o.mode})" for o in a.objectives)
    body = _table(frontier_table(a, sweep_epsilon(cost)), a) if a.front else f"<p>{e(front_note(a))}</p>"
    return Section("frontier", "Pareto front", body,
                   f"Finished trials no other finished trial beats on every objective ({e(objectives)}), best "
                   f"{e(metric_label(a.utility.metric))} first. {e(uncertainty_note(a))} Each re-runs with its data "
                   "and initialisation (<code>sdp-sweep trial frontier/&lt;trial&gt;.yaml</code>); its DP noise is "
                   "secret, so the trained model itself is the one kept under <code>models/</code>.")


def mechanisms_section(a: Analysis) -> Section:
    e = html.escape
    caveats = "".join(f"<li><b>{e(mechanism_name(m))}</b>: {e(caveat(m))}</li>" for m in mechanisms(a) if caveat(m))
    return Section("mechanisms", "Best model of each mechanism",
                   _table(mechanism_table(a), a) + f'<ul class="notes">{caveats}</ul>',
                   f"Best finished trial of each mechanism by {e(metric_label(a.utility.metric))}, as in the papers' "
                   "tables; “finished” counts finished trials out of all trials of the mechanism.")


def unfinished_section(a: Analysis) -> Section | None:
    table = unfinished_table(a)
    return Section("unfinished", "Trials without comparable results", _table(table), "Infeasible and failed trials "
                   "have no metrics; early-stopped ones have partial metrics. None of them can be on the front."
                   ) if table.rows else None


def detector_section(a: Analysis) -> Section | None:
    """The policy's numbers, recall per gold label, and what each declared policy masks and leaves in the clear."""
    tables = [t for t in (make(a) for make in DETECTOR_TABLES) if t.rows]
    types = "".join(f"<li>{html.escape(n)}</li>" for n in policy_types_notes(a))
    body = "".join(map(_table, tables)) + (f'<ul class="notes">{types}</ul>' if types else "")
    return Section("detector", "Detector", body, DETECTOR_CAPTION) if tables else None


def review_recall_section(a: Analysis) -> Section | None:
    """Recall against the labels a person gave sampled records (`sdp-sweep detect --review`)."""
    table = review_recall_table(a)
    if not table.rows:
        return None
    return Section("review-recall", "Detector recall on reviewed records", _table(table),
                   "Recall against the labels a person gave sampled records (sdp-sweep detect --review; the labels "
                   "file beside the data): a secret counts as found only when the policy masks all of it. 95 % Wilson "
                   "intervals. Counts of the training data's records, which no trial's ε covers.")


def recall_estimate_section(a: Analysis) -> Section | None:
    """Recall per secret type estimated without gold spans (`detectors.estimate`), where the data has none."""
    table = recall_estimate_table(a)
    if not table.rows:
        return None
    estimate: dict = next((t.detector["recall_estimate"] for t in a.sweep.trials
                           if isinstance((t.detector or {}).get("recall_estimate"), dict)), {})
    cost = estimate.get("cost") if isinstance(estimate.get("cost"), dict) else {}
    spent = (f" It cost {cost.get('inserted', DASH)} inserted secrets, each a detection ({cost.get('seconds', DASH)} s)."
             if cost else "")
    return Section("recall-estimate", "Detector recall without gold spans", _table(table),
                   f"The data has no gold spans, so recall per secret type is estimated "
                   f"({html.escape(str(estimate.get('method', '')))}).{html.escape(spent)} The bar is the recall the "
                   "policy is held to for each type it claims; an interval across it cannot tell. It cannot see "
                   "secrets in formats the generators lack, types the policy does not claim, or secrets that are no "
                   "value of a type: a person's review of sampled records (sdp-sweep detect --review) is the measure "
                   "to trust. Counts from the training data's records, which no trial's ε covers.")


def cost_section(a: Analysis, cost: SweepCost) -> Section:
    e = html.escape
    notes = "".join(f"<li>{e(n)}</li>" for n in cost.notes)
    counted = ("<p>Trials counted, each with what it is charged:</p>" + _table(charges_table(a, cost.charges))
               if cost.charges else "")
    bounds = _table(cost_table(cost.bounds)) if cost.bounds else ""
    would = (f"<details><summary>What would hold if …</summary><p class=\"caption\">{e(WOULD_HOLD)}</p>"
             f"{_table(cost_table(cost.conditional))}</details>" if cost.conditional else "")
    return Section("cost", "The sweep's own privacy cost",
                   f"<p><b>{e(sweep_epsilon(cost))}</b></p>" + bounds + would + counted + f'<ul class="notes">{notes}</ul>',
                   f"Every ε above is one trial's guarantee and does not count the selection among "
                   f"{len(a.sweep.trials)} trials on the same data. These bounds do, under the stated conditions; "
                   f"{e(cost.source)}.")


def mechanisms(a: Analysis) -> list[str]:
    """The sweep's mechanisms, then any other a trial ran, in order."""
    return list(dict.fromkeys([*a.sweep.config.mechanisms, *(t.mechanism for t in a.sweep.trials)]))


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{name}: privacy–utility report</title><style>{css}</style></head>
<body><main>
<header><p class="eyebrow">sdp-sweep report</p><h1>{name}</h1><p class="meta">{meta}</p></header>
<div class="headline">{headline}</div>
<nav>{nav}</nav>
{script}{sections}
<footer><p>Files: {files}</p><p>Versions: {versions}</p></footer>
</main></body></html>
"""


def render(a: Analysis, plots: list[Plot], cost: SweepCost, claims: Sequence[ClaimResult] = ()) -> str:
    """The whole page as one string: the headline, then its sections (`*_section`) and the files and versions."""
    e = html.escape
    sections = [s for s in (curve_section(a), claims_section(claims), power_section(a), plots_section(a, plots),
                            frontier_section(a, cost),
                            mechanisms_section(a), unfinished_section(a), detector_section(a),
                            recall_estimate_section(a), review_recall_section(a), cost_section(a, cost))
                if s is not None]
    objectives = ", ".join(f"{metric_label(o.metric)} ({o.mode})" for o in a.objectives)
    versions = sorted({", ".join(f"{k} {v}" for k, v in t.versions.items()) for t in a.sweep.trials if t.versions})
    lead = (f'<p class="lead">{e(headline(a))}</p><p class="counts">{e(counts_line(a))}</p>'
            + "".join(f'<p class="counts">{e(n)}</p>' for n in reading_notes(a)))
    return PAGE.format(
        name=e(sweep_title(a)), css=CSS, headline=lead,
        meta=e(f"{len(a.sweep.trials)} trials of {', '.join(map(mechanism_name, mechanisms(a)))} · objectives: "
               f"{objectives} · generated {time.strftime('%Y-%m-%d %H:%M')}"),
        nav="".join(f'<a href="#{s.anchor}">{e(s.title)}</a>' for s in sections),
        script=f"<script>{plotly_js()}</script>" if plots or a.ladder else "", sections="".join(s.html() for s in sections),
        files=" · ".join(f'<a href="{f}">{f}</a> ({e(what)})' for f, what in FILES),
        versions=e("; ".join(versions)) or DASH)
