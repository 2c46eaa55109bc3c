"""The privacy axis's power: a No-DP control trained at a tiny budget does not memorise, and the report then says
"no power: cannot tell" wherever it would show an attack's number and leaves the privacy objective off the front;
a control that memorised leads the privacy sections with its numbers. The control is never on the front or in a
mechanism's table; a control that changes the data is refused."""

from __future__ import annotations

import json

import pytest
from conftest import small_trial_dict

from sdp_core.config import parse_model
from sdp_core.config.loading import control_trial_config
from sdp_core.config.sweep import CONTROL_TRIAL, SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError
from sdp_core.report import build_report
from sdp_core.report.load import load_sweep
from sdp_core.report.pareto import analyse
from sdp_core.report.power import NO_POWER, SEPARATION_P
from sdp_core.report.tables import mechanism_table
from sdp_core.trial import run_trial
from tests.synthetic_sweep import write_synthetic_sweep

FINGERPRINT = "0f" * 16  # the synthetic sweep's data


@pytest.fixture(scope="module")
def tiny_control() -> dict:
    """A real No-DP trial at a budget far too small to memorise (two steps), as the sweep stores its control."""
    cfg = parse_model(TrialConfig, small_trial_dict(
        mechanism={"name": "nodp"}, training={"max_steps": 2},
        data={"canaries": {"format": "My ID is {dddd}", "count": 40, "repeats": 2}}, evaluation={"exposure": True}))
    row = run_trial(cfg).in_sweep(CONTROL_TRIAL, {"control": True}, ["val_perplexity", "exposure_mean"]).to_dict()
    row["detector"]["data_fingerprint"] = FINGERPRINT  # stored beside the synthetic rows, as of their data
    return row


def _sweep_with(tmp_path, control: dict):
    directory = write_synthetic_sweep(tmp_path / "sweep", n_trials=12, intervals=True, audit=True)
    (directory / "trials" / f"{CONTROL_TRIAL}.json").write_text(json.dumps(control))
    return directory


def test_a_control_that_did_not_memorise_blinds_every_empirical_number(tmp_path, tiny_control):
    assert tiny_control["metrics"]["exposure_p_value"] >= SEPARATION_P  # two steps: nothing memorised
    directory = _sweep_with(tmp_path, tiny_control)
    a = analyse(load_sweep(directory))
    assert a.power.blind and a.dropped == ["exposure_mean"]
    assert [o.metric for o in a.objectives] == ["val_perplexity"]
    assert CONTROL_TRIAL not in {t.trial_id for t in a.front} | {t.trial_id for t in a.sweep.trials}
    assert all(CONTROL_TRIAL not in row for row in mechanism_table(a).rows)
    report = build_report(directory, tmp_path / "report")
    html, summary, statement = ((report / f).read_text() for f in ("index.html", "summary.md",
                                                                    "privacy_statement.md"))
    front = summary.split("## Pareto front")[1]
    assert NO_POWER in front
    assert "No power: cannot tell" in statement.split("## What the Pareto-front models protect")[0]
    assert "Empirical check" in statement and f"canary exposure {NO_POWER}" in statement
    assert "dropped from the front" in html and html.index('id="power"') < html.index('id="frontier"')
    assert "not memorised" not in front and "did not separate the trials" not in summary  # dropped, said once


def test_a_control_that_memorised_leads_with_its_numbers(tmp_path, tiny_control):
    control = json.loads(json.dumps(tiny_control))
    control["metrics"].update(exposure_mean=6.5, exposure_mean_low=5.1, exposure_mean_high=7.9, exposure_auc=0.83,
                              exposure_p_value=0.0004)
    directory = _sweep_with(tmp_path, control)
    a = analyse(load_sweep(directory))
    assert a.power.separated and not a.dropped and [o.metric for o in a.objectives][-1] == "exposure_mean"
    summary = (build_report(directory, tmp_path / "report") / "summary.md").read_text()
    assert NO_POWER not in summary
    power = summary.split("## Empirical privacy: power and canary families")[1]
    assert power.index("Power: the No-DP control") < power.index("## Best model of each mechanism")
    assert "6.5 [5.1, 7.9]" in power and "p = 0.0004" in power


def test_a_control_trains_without_dp_on_the_sweeps_own_data():
    base = {"name": "s", "base": {"data": {"canaries": {"count": 10}}}, "mechanisms": ["dpsgd"],
            "search_space": {"parameters": {"training.learning_rate": {"type": "uniform", "low": 1e-3, "high": 2e-3}}}}
    sweep = parse_model(SweepConfig, {**base, "control": {"set": {"training.max_tokens": 600_000}}})
    control = control_trial_config(sweep)
    assert (control.mechanism.name, control.training.max_tokens, control.name) == ("nodp", 600_000, CONTROL_TRIAL)
    assert control.data == sweep.base.data and sweep.trial_count == sweep.num_trials + 1
    for bad in ({"data.canaries.repeats": 20}, {"detector.policy": "phone"}, {"mechanism.name": "dpsgd"}):
        with pytest.raises(ConfigError, match="own data"):
            parse_model(SweepConfig, {**base, "control": {"set": bad}})
    with pytest.raises(ConfigError, match="positive control is measured by canary exposure"):
        parse_model(SweepConfig, {**base, "base": {}, "control": {}})
