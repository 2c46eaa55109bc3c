"""The sweep report: a Pareto front of utility against empirical privacy and cost, read from stored trial rows.

`build_report(sweep_dir)` writes `<sweep_dir>/report/` (or the folder asked for), atomically (complete or absent):
`index.html` (self-contained, interactive), `pareto.png` and one PNG per plot, `summary.md`, `trials.parquet`,
`trials.csv`, `frontier/<trial>.yaml` (re-runnable configs of the front) and `privacy_statement.md`.
Nothing is re-run: the report only reads `sweep.yaml`, `trials/*.json` and `sweep_cost.json`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sdp_core.errors import UserError
from sdp_core.io import atomic_directory
from sdp_core.report.curve import curve_table, ranking_table
from sdp_core.report.curve_plot import CURVE_NAME, write_curve_png
from sdp_core.report.findings import ClaimResult, check_claims, claims_markdown
from sdp_core.report.headline import (counts_line, front_note, headline, reading_notes, sweep_title,
                                     uncertainty_note)
from sdp_core.report.html import render
from sdp_core.report.load import Trial, load_sweep
from sdp_core.report.pareto import Analysis, analyse
from sdp_core.report.plots import build_plots, write_pngs
from sdp_core.report.power import power_statement
from sdp_core.report.statement import SweepCost, privacy_statement, sweep_cost, sweep_epsilon
from sdp_core.report.tables import SEARCH_BOUND, family_table, frontier_table, mechanism_table, trials_frame

__all__ = ["build_report"]


def summary_markdown(a: Analysis, claims: list[ClaimResult], cost: SweepCost) -> str:
    curve = (["## Utility against ε", "", curve_table(a).markdown(), "", ranking_table(a).markdown(), "",
              f"![utility against ε]({CURVE_NAME}.png)", ""] if a.ladder else [])
    families = family_table(a)
    power = (["## Empirical privacy: power and canary families", "", power_statement(a.power, a.dropped, a.trial_tokens), "",
              *([families.markdown(), ""] if families else [])]
             if families is not None or a.power.control is not None else [])
    return "\n".join([f"# Sweep `{sweep_title(a)}`", "", headline(a), "", counts_line(a), "", *power,
                      *[line for note in reading_notes(a) for line in (note, "")], *curve,
                      *([claims_markdown(claims)] if claims else []),
                      "## Best model of each mechanism", "", mechanism_table(a).markdown(), "",
                      "## Pareto front", "", front_note(a) or frontier_table(a, sweep_epsilon(cost)).markdown(), "",
                      *([SEARCH_BOUND, ""] if a.front else []),
                      *([uncertainty_note(a), ""] if uncertainty_note(a) else [])])


def frontier_yaml(a: Analysis, trial: Trial) -> str:
    header = (f"# Pareto-front trial {trial.trial_id} of sweep {a.sweep.config.name}; re-run it (same seed) with:\n"
              f"#   sdp-sweep trial frontier/{trial.trial_id}.yaml\n")
    return header + yaml.safe_dump(trial.config, sort_keys=False, allow_unicode=True)


def report_folder(sweep_dir: Path, out_dir: Path | None) -> Path:
    """`out_dir`, by default `<sweep_dir>/report/` (a sweep's folder is `reports/<sweep-name>/`).

    The report folder is replaced as a whole, so it must be neither the sweep folder (nor hold it), nor a
    folder of something else.
    """
    sweep_dir = Path(sweep_dir).resolve()
    out = (Path(out_dir) if out_dir is not None else sweep_dir / "report").resolve()
    if out == sweep_dir or out in sweep_dir.parents:
        raise UserError("the report would replace the sweep's own results: choose another report folder", str(out))
    if out.is_dir() and any(out.iterdir()) and not (out / "index.html").is_file():
        raise UserError("exists and is not a report (no index.html): choose another report folder", str(out))
    return out


def front_trial_ids(sweep_dir: Path) -> set[str]:
    """The ids of the trials on the sweep's Pareto front."""
    return {t.trial_id for t in analyse(load_sweep(sweep_dir)).front}


def build_report(sweep_dir: Path, out_dir: Path | None = None) -> Path:
    """Build the report of the sweep stored in `sweep_dir` into `out_dir` (default `<sweep_dir>/report/`).

    Raises UserError (one line) when the folder holds no results or a corrupt one. Returns the report folder.
    """
    out = report_folder(sweep_dir, out_dir)
    sweep = load_sweep(sweep_dir)
    a = analyse(sweep)
    plots = build_plots(a)
    cost = sweep_cost(sweep)  # every trial that touched the data, the positive control included
    claims = check_claims(a.sweep)
    with atomic_directory(out) as tmp:
        (tmp / "index.html").write_text(render(a, plots, cost, claims), encoding="utf-8")
        write_pngs(plots, a, tmp)
        if a.ladder:
            write_curve_png(a, tmp)
        (tmp / "summary.md").write_text(summary_markdown(a, claims, cost), encoding="utf-8")
        (tmp / "privacy_statement.md").write_text(privacy_statement(a, cost), encoding="utf-8")
        frame = trials_frame(a)
        frame.to_parquet(tmp / "trials.parquet", index=False)
        frame.to_csv(tmp / "trials.csv", index=False)
        (tmp / "frontier").mkdir()
        for t in a.front:
            (tmp / "frontier" / f"{t.trial_id}.yaml").write_text(frontier_yaml(a, t), encoding="utf-8")
    return out
