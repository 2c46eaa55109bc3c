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

from sdp_core.privacy.light_noise import ESTIMATE
from sdp_core.report.findings import ClaimResult, claims_table
from sdp_core.report.pareto import Analysis
from sdp_core.report.load import Trial
from sdp_core.report.plots import Plot, epsilon_meaning, fixed_epsilon, formal_epsilon, plotly_div, plotly_js
from sdp_core.report.statement import SweepCost, caveat
from sdp_core.report.tables import (
    DASH,
    EPSILON_COLUMN,
    MODEL_COLUMN,
    Table,
    charges_table,
    cost_table,
    counts_line,
    detector_table,
    policy_types_notes,
    recall_estimate_table,
    review_recall_table,
    fmt,
    format_epsilon,
    front_note,
    frontier_table,
    headline,
    mechanism_name,
    mechanism_table,
    metric_label,
    reading_notes,
    uncertainty_note,
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


DETAIL_COLUMNS = ("σ", "hyper-parameters", MODEL_COLUMN, "wall time")
"""Columns of a trial table shown in the detail row under each trial rather than as columns of their own."""
TRIAL_ID_COLUMNS = ("trial", "best trial")


def short_epsilon(t: Trial) -> str:
    """The ε cell of a trial table: the formal bound and notion (`3 · SDP`); for an empirical estimate the formal
    bound, with the estimate beside it (`5.03 · SDP, formal (estimate 3)`)."""
    notion = t.privacy.get("notion", "?")
    if t.epsilon is None:
        return format_epsilon(t.privacy)
    if t.privacy.get("guarantee") == ESTIMATE:
        bound = formal_epsilon(t)
        return f"{fmt(bound) if bound is not None else '∞'} · {notion}, formal (estimate {fmt(t.epsilon)})"
    return f"{fmt(t.epsilon)} · {notion}" + (", does not hold here" if t.privacy.get("holds") is False else "")


def _cell(column: str, value: str) -> str:
    """A cell's HTML: a kept model links to its folder (the report is OUT/report/)."""
    e = html.escape
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
        t = trials.get(row[id_column]) if split else None
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
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


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


def render(a: Analysis, plots: list[Plot], cost: SweepCost, claims: list[ClaimResult] = ()) -> str:
    """The whole page as one string."""
    e = html.escape
    sweep = a.sweep
    objectives = ", ".join(f"{metric_label(o.metric)} ({o.mode})" for o in sweep.config.objectives)
    figures = "".join(f'<div class="plot"><h3>{e(p.title)}</h3>{plotly_div(p, a)}</div>' for p in plots)
    fixed = fixed_epsilon(a)
    spent = [t for t in sweep.trials if t.state == "finished" and (formal_epsilon(t) or 0) > 0]  # fixed_epsilon's
    fixed_note = (f" Every finished trial spends the same formal ε = {fmt(fixed)} ({epsilon_meaning(spent)}), so no "
                  "plot has an ε axis; the privacy axis is what the trials differ in." if fixed is not None else
                  " ε is the formal bound.")
    mechanisms = dict.fromkeys([*sweep.config.mechanisms, *(t.mechanism for t in sweep.trials)])
    caveats = "".join(f"<li><b>{e(mechanism_name(m))}</b>: {e(caveat(m))}</li>" for m in mechanisms if caveat(m))
    unfinished = unfinished_table(a)
    detector = detector_table(a)
    plots_body = (f'<script>{plotly_js()}</script><div class="plots">{figures}</div>' if plots else
                  "<p>No finished or early-stopped trial has the plotted metrics.</p>")
    sections = [Section("claims", f"Claims: {sum(r.held is True for r in claims)} of {len(claims)} held",
                        _table(claims_table(claims)),
                        "Each paper's claim as an ordering of arms by the mean over their seeds, with how many "
                        "seeds agree. A claim that did not hold here is reported as such.")] if claims else []
    sections += [
        Section("plots", "Pareto plots", plots_body,
                "Colour: mechanism. ★ on the sweep's Pareto front; ● dominated; grey × stopped early (partial "
                "metrics). Dashed: the best trade-off of the two plotted quantities alone. Bars: 95 % intervals; "
                "dotted: the random-rank floor (not memorised)." + e(fixed_note) + " Hover a point for its "
                "configuration; drag to zoom, double-click to reset."),
        Section("frontier", "Pareto front",
                f"<p>{e(front_note(a))}</p>" if not a.front else _table(frontier_table(a), a),
                f"Finished trials no other finished trial beats on every objective ({e(objectives)}), best "
                f"{e(metric_label(a.utility.metric))} first. {e(uncertainty_note(a))} Each re-runs with its data and "
                "initialisation (<code>sdp-sweep trial frontier/&lt;trial&gt;.yaml</code>); its DP noise is secret, "
                "so the trained model itself is the one kept under <code>models/</code>."),
        Section("mechanisms", "Best model of each mechanism",
                _table(mechanism_table(a), a) + f'<ul class="notes">{caveats}</ul>',
                f"Best finished trial of each mechanism by {e(metric_label(a.utility.metric))}, as in the papers' "
                "tables; “finished” counts finished trials out of all trials of the mechanism."),
    ]
    if unfinished.rows:
        sections.append(Section("unfinished", "Trials without comparable results", _table(unfinished),
                                "Infeasible and failed trials have no metrics; early-stopped ones have partial "
                                "metrics. None of them can be on the front."))
    if detector.rows:
        types = "".join(f"<li>{e(n)}</li>" for n in policy_types_notes(a))
        sections.append(Section("detector", "Detector",
                                _table(detector) + (f'<ul class="notes">{types}</ul>' if types else ""),
                                "Share of training tokens the policy redacts, and of each split's non-space "
                                "characters it masks beside the share gold spans cover: what it masks beyond the "
                                "gold share is text Redacted, JFT's phase 1 and CRT's public set lose to false "
                                "positives. Recall against gold spans with 95 % Wilson intervals where the data has "
                                "them."))
    estimate = recall_estimate_table(a)
    if estimate.rows:
        method = next((t.detector["recall_estimate"].get("method", "") for t in sweep.trials
                       if isinstance((t.detector or {}).get("recall_estimate"), dict)), "")
        sections.append(Section("recall-estimate", "Detector recall without gold spans", _table(estimate),
                                f"The data has no gold spans, so recall per secret type is estimated ({e(method)}). "
                                "It cannot see secrets in formats the generators lack, types the policy does not "
                                "claim, or secrets that are no value of a type: a person's review of sampled records "
                                "(sdp-sweep detect --review) is the measure to trust."))
    reviewed = review_recall_table(a)
    if reviewed.rows:
        sections.append(Section("review-recall", "Detector recall on reviewed records", _table(reviewed),
                                "Recall against the labels a person gave sampled records (sdp-sweep detect "
                                "--review; the labels file beside the data): a secret counts as found only when "
                                "the policy masks all of it. 95 % Wilson intervals. Counts of the training data's "
                                "records, which no trial's ε covers."))
    notes = "".join(f"<li>{e(n)}</li>" for n in cost.notes)
    counted = ("<p>Trials counted, each with what it is charged:</p>" + _table(charges_table(a, cost.charges))
               if cost.charges else "")
    sections.append(Section(
        "cost", "The sweep's own privacy cost",
        (_table(cost_table(cost.bounds)) if cost.bounds else "") + counted + f'<ul class="notes">{notes}</ul>',
        f"Every ε above is one trial's guarantee and does not count the selection among {len(sweep.trials)} trials "
        f"on the same data. These bounds do, under the stated conditions; {e(cost.source)}."))
    reading = "".join(f'<p class="counts">{e(n)}</p>' for n in reading_notes(a))
    nav = "".join(f'<a href="#{s.anchor}">{e(s.title)}</a>' for s in sections)
    files = " · ".join(f'<a href="{f}">{f}</a> ({e(what)})' for f, what in FILES)
    versions = sorted({", ".join(f"{k} {v}" for k, v in t.versions.items()) for t in sweep.trials if t.versions})
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(sweep.config.name)}: privacy–utility report</title><style>{CSS}</style></head>
<body><main>
<header><p class="eyebrow">sdp-sweep report</p><h1>{e(sweep.config.name)}</h1>
<p class="meta">{len(sweep.trials)} trials of {e(", ".join(mechanism_name(m) for m in mechanisms))} · objectives:
{e(objectives)} · generated {time.strftime("%Y-%m-%d %H:%M")}</p></header>
<div class="headline"><p class="lead">{e(headline(a))}</p><p class="counts">{e(counts_line(a))}</p>{reading}</div>
<nav>{nav}</nav>
{"".join(s.html() for s in sections)}
<footer><p>Files: {files}</p><p>Versions: {e("; ".join(versions)) or "—"}</p></footer>
</main></body></html>
"""
