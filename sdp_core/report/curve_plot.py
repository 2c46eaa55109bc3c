"""The ε ladder's curve drawn twice from the same points (`curve.curve_points`): interactive plotly for `index.html`,
a matplotlib PNG (`utility_vs_target_epsilon.png`). Per mechanism, in its colour: its best trial at each ε (solid
line), the median of its trials (dotted) with their range as a bar; No-DP's best as a dashed horizontal line.
"""

from __future__ import annotations

from pathlib import Path

import plotly.io as pio
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.report.curve import REFERENCE, CurvePoint, curve_points, reference_trials
from sdp_core.report.formatting import epsilon_meaning, fmt, mechanism_name, metric_label
from sdp_core.report.pareto import Analysis
from sdp_core.report.plots import FONT, OTHER_COLOR, PNG_DPI

CURVE_NAME = "utility_vs_target_epsilon"
CURVE_TITLE = "utility against ε, per mechanism"


def colour(mechanism: str) -> str:
    return MECHANISM_SETTINGS[mechanism].colour if mechanism in MECHANISM_SETTINGS else OTHER_COLOR


def _by_mechanism(a: Analysis) -> dict[str, list[CurvePoint]]:
    out: dict[str, list[CurvePoint]] = {}
    for p in curve_points(a):
        out.setdefault(p.mechanism, []).append(p)
    return out


def _labels(a: Analysis) -> tuple[str, str]:
    trials = [t for p in curve_points(a) for t in p.trials]
    better = "lower" if a.utility.mode == "min" else "higher"
    return (f"ε target ({epsilon_meaning(trials)})", f"{metric_label(a.utility.metric)} ({better} is better)")


def _reference(a: Analysis) -> float | None:
    trials = reference_trials(a)
    return trials[0].metric(a.utility.metric) if trials else None


def curve_figure(a: Analysis) -> dict:
    """The curve as a plain plotly figure dict."""
    traces: list[dict] = []
    for m, points in _by_mechanism(a).items():
        xs = [p.epsilon for p in points]
        traces.append(dict(type="scatter", x=xs, y=[p.best for p in points], mode="lines+markers", legendgroup=m,
                           name=mechanism_name(m), line=dict(color=colour(m), width=2.2), marker=dict(size=8),
                           hovertemplate="%{y:.4g} at ε = %{x:g} (best trial)<extra>" + mechanism_name(m) + "</extra>"))
        traces.append(dict(type="scatter", x=xs, y=[p.median for p in points], mode="lines+markers", legendgroup=m,
                           showlegend=False, line=dict(color=colour(m), width=1, dash="dot"),
                           marker=dict(size=5, symbol="diamond"),
                           error_y=dict(type="data", symmetric=False, color=colour(m), thickness=1, width=4,
                                        array=[max(p.values) - p.median for p in points],
                                        arrayminus=[p.median - min(p.values) for p in points]),
                           hovertemplate="median %{y:.4g} at ε = %{x:g}<extra>" + mechanism_name(m) + "</extra>"))
    shapes, annotations = [], []
    reference = _reference(a)
    if reference is not None:
        shapes.append(dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=reference, y1=reference,
                           line=dict(color=colour(REFERENCE), dash="dash", width=1.5)))
        annotations.append(dict(x=1, y=reference, xref="paper", yref="y", xanchor="right", yanchor="bottom",
                                showarrow=False, text=f"{mechanism_name(REFERENCE)} (no privacy) {fmt(reference)}",
                                font=dict(size=11, color=colour(REFERENCE))))
    x_label, y_label = _labels(a)
    layout = dict(
        template=dict(layout=pio.templates["plotly_white"].layout.to_plotly_json()), shapes=shapes,
        annotations=annotations, height=460, margin=dict(l=64, r=16, t=16, b=90),
        font=dict(family=FONT, size=13, color="#222"),
        legend=dict(orientation="h", yanchor="top", y=-0.17, x=0, font=dict(size=12)),
        xaxis=dict(title=dict(text=x_label), type="log", tickvals=a.ladder, ticktext=[f"{e:g}" for e in a.ladder]),
        yaxis=dict(title=dict(text=y_label), zeroline=False))
    return dict(data=traces, layout=layout)


def curve_div(a: Analysis) -> str:
    """An HTML fragment drawing the curve with the page's one inlined plotly.js."""
    return pio.to_html(curve_figure(a), full_html=False, include_plotlyjs=False, validate=False, div_id=CURVE_NAME,
                       default_width="100%", default_height="460px",
                       config={"displaylogo": False, "responsive": True})


def write_curve_png(a: Analysis, out_dir: Path) -> str:
    """`utility_vs_target_epsilon.png`, the same encoding as the plotly figure; returns the file name."""
    fig = Figure(figsize=(7.0, 4.6), dpi=PNG_DPI, layout="constrained")
    FigureCanvasAgg(fig)  # savefig renders through the Agg canvas, with no pyplot state
    ax = fig.add_subplot(1, 1, 1)
    for m, points in _by_mechanism(a).items():
        xs = [p.epsilon for p in points]
        ax.plot(xs, [p.best for p in points], color=colour(m), marker="o", linewidth=2, label=mechanism_name(m))
        medians = [p.median for p in points]
        ax.errorbar(xs, medians, yerr=[[p.median - min(p.values) for p in points],
                                       [max(p.values) - p.median for p in points]],
                    color=colour(m), linestyle=":", marker="D", markersize=3, linewidth=1, capsize=3)
    reference = _reference(a)
    if reference is not None:
        ax.axhline(reference, color=colour(REFERENCE), linestyle="--", linewidth=1.2,
                   label=f"{mechanism_name(REFERENCE)} (no privacy) {fmt(reference)}")
    x_label, y_label = _labels(a)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(a.ladder, [f"{e:g}" for e in a.ladder])
    ax.set_xlabel(x_label, fontsize=9)
    ax.set_ylabel(y_label, fontsize=9)
    ax.set_title(f"{a.sweep.config.name}: {CURVE_TITLE} (solid: best trial; dotted: median, bars: range)",
                 fontsize=10)
    ax.grid(True, color="#e5e5e5", linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False)
    fig.savefig(out_dir / f"{CURVE_NAME}.png")
    return f"{CURVE_NAME}.png"
