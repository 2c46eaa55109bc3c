"""Pareto plots: utility against canary exposure, ε and cost (plus any other objective), drawn twice from the
same points: interactive plotly for `index.html`, matplotlib PNGs for terminals and papers.

Markers: colour = mechanism; star = on the sweep's Pareto front; circle = dominated; grey × = stopped early
(partial metrics). The dashed staircase is the front of the two plotted quantities alone. A metric with a 95 %
interval (mean canary exposure) has error bars, and exposure its random-rank floor as a dotted line (a model at the
floor has not memorised the canaries). ε is a trial's formal bound, also where its headline ε is an empirical
estimate (JFT light noise); under a fixed ε target, where every trial spends the same formal ε, there is no ε plot.

The page inlines plotly.js's basic bundle (scatter, bar, pie: `assets/plotly-basic.min.js`, MIT, 1.2 MB against
4.6 MB of the full one), which is all these plots use.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.io as pio
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.report.formatting import (
    epsilon_meaning,
    fmt,
    fmt_value,
    format_epsilon,
    mechanism_name,
    metric_label,
    sigma_text,
)
from sdp_core.report.load import Trial
from sdp_core.report.pareto import Analysis, non_dominated
from sdp_core.report.power import EMPIRICAL_METRICS, NO_POWER

OTHER_COLOR = "#17becf"
STOPPED_COLOR = "#a8a8a8"
FONT = "Inter, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
PNG_DPI = 130
FRONT_LABEL = "Pareto front (all objectives)"
X_AXES = ("exposure_mean", "epsilon", "train_seconds")
"""Always plotted against utility when measured (ε only where it varies), after the sweep's own objectives."""
FIXED_EPSILON_SPREAD = 0.01
"""Formal ε values within this relative spread are one fixed target: an ε axis would show calibration noise."""
FLOORS = {"exposure_mean": "exposure_floor", "exposure_max": "exposure_floor"}
"""The chance level of an x metric: exposure's random-rank floor (a model at it has not memorised the canaries)."""
PLOTLY_JS = Path(__file__).parent / "assets" / "plotly-basic.min.js"


def plotly_js() -> str:
    """The plotly.js bundle the page inlines once."""
    return PLOTLY_JS.read_text(encoding="utf-8")


def plotted(t: Trial, metric: str) -> float | None:
    """A trial's value on a plot axis: a metric, with ε as its formal bound."""
    return t.formal_epsilon if metric == "epsilon" else t.metric(metric)


@dataclass(frozen=True)
class View:
    """One plot: utility (y) against `x`; `mode` says whether smaller or larger x is better."""

    x: str
    mode: str

    @property
    def name(self) -> str:
        return f"utility_vs_{self.x}"


@dataclass(frozen=True)
class Point:
    trial: Trial
    x: float
    y: float
    status: str  # front | dominated | early_stopped
    x_interval: tuple[float, float] | None = None  # the x metric's 95 % interval, when it has one


@dataclass(frozen=True)
class Plot:
    view: View
    title: str
    x_label: str
    y_label: str
    points: list[Point]
    staircase: list[tuple[float, float]]  # the 2-D front of this view, by increasing x
    x_floor: float | None = None  # the x metric's chance level (exposure's random-rank floor), drawn as a line

    def log_axis(self, axis: str) -> bool:
        """Logarithmic when positive values span more than a factor 30 (perplexities of DP vs non-DP models)."""
        values = [getattr(p, axis) for p in self.points]
        return min(values) > 0 and max(values) / min(values) > 30


def _axis_label(metric: str, mode: str, trials: list[Trial]) -> str:
    better = "lower" if mode == "min" else "higher"
    if metric != "epsilon":
        return f"{metric_label(metric)} ({better} is better)"
    return f"ε, formal bound ({epsilon_meaning(trials)})"


def fixed_epsilon(a: Analysis) -> float | None:
    """The one formal ε every finished trial with a noised bound spends (a fixed-ε sweep), or None when they differ.
    (ε = 0 is Redacted's, for detected secrets only: no noise was calibrated to a target.)"""
    values = [e for t in a.sweep.trials if t.state == "finished" and (e := t.formal_epsilon) is not None and e > 0]
    if values and max(values) <= min(values) * (1 + FIXED_EPSILON_SPREAD):
        return max(values)
    return None


def views(a: Analysis) -> list[View]:
    modes = {o.metric: o.mode for o in a.sweep.config.objectives}
    xs = dict.fromkeys([*(o.metric for o in a.sweep.config.objectives if o != a.utility), *X_AXES])
    if fixed_epsilon(a) is not None:
        xs.pop("epsilon", None)
    # Without a control that memorised, an attack's axis plots noise (report.power): it is not drawn.
    return [View(x, modes.get(x, "min")) for x in xs if not (a.power.blind and x in EMPIRICAL_METRICS)]


def build_plot(a: Analysis, view: View) -> Plot | None:
    """The points of one view (None when no trial has both values)."""
    front = {t.trial_id for t in a.front}
    points = []
    for t in a.sweep.trials:
        x, y = plotted(t, view.x), t.metric(a.utility.metric)
        if t.state in ("finished", "early_stopped") and x is not None and y is not None:
            status = t.state if t.state == "early_stopped" else ("front" if t.trial_id in front else "dominated")
            points.append(Point(t, x, y, status, t.interval(view.x)))
    if not points:
        return None
    finished = [p for p in points if p.status != "early_stopped"]
    staircase = []
    if finished:
        mask = non_dominated([[p.x, p.y] for p in finished], [view.mode, a.utility.mode])
        staircase = sorted({(p.x, p.y) for p, keep in zip(finished, mask) if keep})
    trials = [p.trial for p in points]
    y_label = _axis_label(a.utility.metric, a.utility.mode, trials)
    x_label = _axis_label(view.x, view.mode, trials)
    title = f"{metric_label(a.utility.metric)} vs {metric_label(view.x)}"
    floor = FLOORS.get(view.x)
    floors = [f for p in points if floor and (f := p.trial.metric(floor)) is not None]
    return Plot(view, title, x_label, y_label, points, staircase, min(floors) if floors else None)


def build_plots(a: Analysis) -> list[Plot]:
    return [p for p in (build_plot(a, v) for v in views(a)) if p is not None]


def hover_text(t: Trial, a: Analysis, status: str) -> str:
    """Everything needed to recognise and re-run a point: metrics, ε, σ, seed, hyper-parameters, mechanism."""
    e = html.escape
    where = {"front": "on the Pareto front", "dominated": "dominated", "early_stopped": "stopped early"}[status]
    metrics = dict.fromkeys((a.utility.metric, "val_private_perplexity", "exposure_mean", "mia_auc", "train_seconds",
                             *(o.metric for o in a.sweep.config.objectives)))
    lines = [f"<b>{e(t.trial_id)} · {e(mechanism_name(t.mechanism))}</b> ({where})",
             e(format_epsilon(t.privacy)) + f" · σ = {e(sigma_text(t.privacy.get('events', [])))}",
             " · ".join(f"{e(metric_label(m))} {NO_POWER if a.power.blind and m in EMPIRICAL_METRICS else fmt(t.metric(m))}"
                        for m in metrics if m != "epsilon" and t.metric(m) is not None),
             f"seed {t.seed}"]
    lines += [f"also {e(format_epsilon(g))}" for g in t.other_guarantees.values()]
    lines += ["<i>hyper-parameters</i>"] + [f"  {e(k)} = {e(fmt_value(v))}" for k, v in t.params.items()]
    settings = t.mechanism_settings
    if settings:
        lines += [f"<i>mechanism {e(t.mechanism)}</i>"] + [f"  {e(k)} = {e(fmt_value(v))}" for k, v in settings.items()]
    return "<br>".join(lines)


def _groups(plot: Plot, a: Analysis) -> list[tuple[str, str, str, list[Point]]]:
    """(label, colour, status, points) per mechanism and status, early-stopped trials last, in one grey group."""
    order = list(dict.fromkeys([*a.sweep.config.mechanisms, *(p.trial.mechanism for p in plot.points)]))
    groups = []
    for m in order:
        for status in ("dominated", "front"):
            pts = [p for p in plot.points if p.trial.mechanism == m and p.status == status]
            if pts:
                groups.append((mechanism_name(m), (MECHANISM_SETTINGS[m].colour if m in MECHANISM_SETTINGS else OTHER_COLOR), status, pts))
    stopped = [p for p in plot.points if p.status == "early_stopped"]
    if stopped:
        groups.append(("stopped early (partial)", STOPPED_COLOR, "early_stopped", stopped))
    return groups


# ------------------------------------------------------------------------------------------------- plotly

def plotly_figure(plot: Plot, a: Analysis) -> dict:
    """The figure as a plain dict (built without plotly's per-property validation, which is slow for 500 points)."""
    traces = []
    if len(plot.staircase) > 1:
        xs, ys = zip(*plot.staircase)
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", name="best trade-off in this view",
                           line=dict(color="#555", dash="dash", width=1.2, shape="hv"), hoverinfo="skip"))
    shown = set()
    for label, color, status, pts in _groups(plot, a):
        marker = {"front": dict(symbol="star", size=15, line=dict(color="#111", width=1)),
                  "dominated": dict(symbol="circle", size=8, opacity=0.6, line=dict(color="white", width=0.5)),
                  "early_stopped": dict(symbol="x", size=8)}[status]
        trace: dict[str, Any] = dict(
            type="scatter", x=[p.x for p in pts], y=[p.y for p in pts], mode="markers", name=label,
            legendgroup=label, showlegend=label not in shown, marker=dict(color=color, **marker),
            text=[hover_text(p.trial, a, status) for p in pts], hovertemplate="%{text}<extra></extra>")
        if any(p.x_interval for p in pts):
            trace["error_x"] = dict(type="data", symmetric=False, color=color, thickness=1, width=0,
                                    array=[p.x_interval[1] - p.x if p.x_interval else 0 for p in pts],
                                    arrayminus=[p.x - p.x_interval[0] if p.x_interval else 0 for p in pts])
        traces.append(trace)
        shown.add(label)
    # A legend entry for the star itself (the per-mechanism entries show their colour).
    traces.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=FRONT_LABEL,
                       marker=dict(symbol="star", size=13, color="white", line=dict(color="#111", width=1))))
    shapes, annotations = [], []
    if plot.x_floor is not None:
        shapes.append(dict(type="line", xref="x", yref="paper", x0=plot.x_floor, x1=plot.x_floor, y0=0, y1=1,
                           line=dict(color="#888", dash="dot", width=1.2)))
        annotations.append(dict(x=plot.x_floor, y=1, xref="x", yref="paper", text=f"floor {fmt(plot.x_floor)}",
                                showarrow=False, xanchor="left", yanchor="top", font=dict(size=11, color="#666")))
    layout = dict(
        # The template's layout only: its per-trace defaults are for trace types these plots do not draw.
        template=dict(layout=pio.templates["plotly_white"].layout.to_plotly_json()), shapes=shapes,
        annotations=annotations, height=460, margin=dict(l=64, r=16, t=16, b=110),
        font=dict(family=FONT, size=13, color="#222"), hoverlabel=dict(align="left", font=dict(family=FONT, size=12)),
        legend=dict(orientation="h", yanchor="top", y=-0.17, x=0, font=dict(size=12)),
        xaxis=dict(title=dict(text=plot.x_label), type="log" if plot.log_axis("x") else "linear", zeroline=False),
        yaxis=dict(title=dict(text=plot.y_label), type="log" if plot.log_axis("y") else "linear", zeroline=False),
    )
    return dict(data=traces, layout=layout)


def plotly_div(plot: Plot, a: Analysis) -> str:
    """An HTML fragment drawing the plot with the page's one inlined plotly.js (`plotly_js`; no CDN: offline)."""
    return pio.to_html(plotly_figure(plot, a), full_html=False, include_plotlyjs=False, validate=False,
                       div_id=plot.view.name, default_width="100%", default_height="460px",
                       config={"displaylogo": False, "responsive": True,
                               "modeBarButtonsToRemove": ["lasso2d", "select2d"]})


# --------------------------------------------------------------------------------------------- matplotlib

def draw(ax: Axes, plot: Plot, a: Analysis) -> None:
    """Draw one view on matplotlib axes (the same encoding as the plotly figure)."""
    if len(plot.staircase) > 1:
        xs, ys = zip(*plot.staircase)
        ax.step(xs, ys, where="post", color="#555", linestyle="--", linewidth=1, label="best trade-off in this view")
    labelled = set()
    for label, color, status, pts in _groups(plot, a):
        style: dict[str, Any] = {"front": dict(marker="*", s=170, edgecolors="#111", linewidths=0.8, zorder=3),
                 "dominated": dict(marker="o", s=30, alpha=0.6, edgecolors="white", linewidths=0.4, zorder=2),
                 "early_stopped": dict(marker="x", s=30, zorder=1)}[status]
        ax.scatter([p.x for p in pts], [p.y for p in pts], color=color, label=None if label in labelled else label,
                   **style)
        ranged = [(p, p.x_interval) for p in pts if p.x_interval]
        if ranged:
            xerr = [[p.x - low for p, (low, _) in ranged], [high - p.x for p, (_, high) in ranged]]
            ax.errorbar([p.x for p, _ in ranged], [p.y for p, _ in ranged], xerr=xerr, fmt="none", ecolor=color,
                        elinewidth=0.8, alpha=0.7)
        labelled.add(label)
    if plot.x_floor is not None:
        ax.axvline(plot.x_floor, color="#888", linestyle=":", linewidth=1,
                   label=f"random-rank floor {fmt(plot.x_floor)}")
    ax.scatter([], [], marker="*", s=120, color="white", edgecolors="#111", label=FRONT_LABEL)
    ax.set_xscale("log" if plot.log_axis("x") else "linear")
    ax.set_yscale("log" if plot.log_axis("y") else "linear")
    ax.set_xlabel(plot.x_label, fontsize=9)
    ax.set_ylabel(plot.y_label, fontsize=9)
    ax.set_title(plot.title, fontsize=11)
    ax.grid(True, color="#e5e5e5", linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper right")  # loc="best" is slow with many points


def write_pngs(plots: list[Plot], a: Analysis, out_dir: Path) -> list[str]:
    """`pareto.png` with every view, plus one PNG per view cropped from it. Returns the file names.

    One render for all files: drawing a figure costs about half a second here, encoding a crop almost nothing.
    """
    cols = min(len(plots), 3) or 1
    rows = math.ceil(len(plots) / cols) or 1
    fig = Figure(figsize=(5.4 * cols, 4.3 * rows), dpi=PNG_DPI, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(len(plots))]
    for ax, plot in zip(axes, plots):
        draw(ax, plot, a)
    fig.suptitle(f"{a.sweep.config.name}: {len(a.front)} Pareto-front trials of {len(a.sweep.trials)}", fontsize=12)
    canvas.draw()
    image = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
    image.save(out_dir / "pareto.png")
    names = ["pareto.png"]
    renderer = canvas.get_renderer()
    for ax, plot in zip(axes, plots):
        tight = ax.get_tightbbox(renderer)
        assert tight is not None  # the axes are drawn
        box = tight.padded(8)  # display pixels, origin at the bottom left
        crop = (max(0, int(box.x0)), max(0, int(image.height - box.y1)),
                min(image.width, int(box.x1)), min(image.height, int(image.height - box.y0)))
        image.crop(crop).save(out_dir / f"{plot.view.name}.png")
        names.append(f"{plot.view.name}.png")
    return names
