"""A mechanism defined outside `sdp_core/` (here, in this file) is one registration away from trials and reports."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from pydantic import Field

from sdp_core.config import MECHANISM_SETTINGS, MechanismSettings, parse_model, register_settings
from sdp_core.config.sweep import SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError
from sdp_core.mechanisms import MECHANISMS, MechanismPlan, TrialData, register_mechanism
from sdp_core.mechanisms.base import calibrate, private_phase
from sdp_core.report import build_report
from sdp_core.sweep.store import SweepStore
from sdp_core.trial import run_trial
from tests.conftest import small_trial_dict


CAVEAT = "Half-DP trains on a share of the records with DP-SGD and ignores the rest (a test mechanism)."


class HalfDPConfig(MechanismSettings):
    """A toy mechanism: DP-SGD on a share of the training rows only."""

    name: Literal["halfdp"] = "halfdp"
    display_name: ClassVar[str] = "Half-DP"
    colour: ClassVar[str] = "#123456"
    notion: ClassVar[str] = "DP"
    caveat: ClassVar[str] = CAVEAT
    share: float = Field(0.5, gt=0, le=1)


def halfdp(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    rows = max(1, int(len(d.train) * cfg.mechanism.share))
    phase = private_phase("half", d.train.subset(range(rows)), cfg, cfg.training.epochs)
    phases, ledger = calibrate([phase], cfg, notion="DP", held_out=d.validation)
    return MechanismPlan(phases, ledger, {"rows": rows})


@pytest.fixture
def half_dp():
    register_settings(HalfDPConfig)
    register_mechanism("halfdp", halfdp)
    yield
    MECHANISMS.pop("halfdp"), MECHANISM_SETTINGS.pop("halfdp")


def test_a_mechanism_registered_in_a_test_file_trains_and_shows_in_the_report(half_dp, tmp_path):
    trial = small_trial_dict(name="half-0", mechanism={"name": "halfdp", "share": 0.5})
    result = run_trial(parse_model(TrialConfig, trial))
    row = result.to_dict()
    assert row["mechanism"] == {"rows": row["detector"]["windows"]["rows"] // 2} and row["privacy"]["notion"] == "DP"
    assert 0.99 * 3.0 <= row["privacy"]["epsilon"] <= 3.0

    sweep = parse_model(SweepConfig, {"name": "half", "base": small_trial_dict(), "mechanisms": ["halfdp"],
                                      "search_space": {"parameters": {"mechanism.share":
                                                                      {"type": "uniform", "low": 0.2, "high": 0.8}}}})
    store = SweepStore(tmp_path / "sweep")
    store.create(sweep)
    objectives = [o.metric for o in sweep.objectives]
    store.write_row(result.in_sweep("trial_0000", {"mechanism.share": 0.5}, objectives).to_dict())
    page = (build_report(store.root) / "index.html").read_text()
    assert "Half-DP" in page and CAVEAT in page


def test_an_unknown_or_misconfigured_mechanism_is_one_line_with_its_path(half_dp):
    with pytest.raises(ConfigError, match=r"mechanism: .*unknown mechanism 'quarterdp'"):
        parse_model(TrialConfig, {"mechanism": {"name": "quarterdp"}})
    with pytest.raises(ConfigError, match=r"mechanism\.share: must be <= 1"):
        parse_model(TrialConfig, {"mechanism": {"name": "halfdp", "share": 2}})
