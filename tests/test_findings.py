"""Grid sweeps (`experiments` × seeds), the claims their report checks, and the detector made to miss secrets."""

from __future__ import annotations

import pytest

from sdp_core.config import parse_model
from sdp_core.config.loading import arm_trial_config, load_sweep_config
from sdp_core.config.sweep import SweepConfig
from sdp_core.data.records import Record, Span
from sdp_core.detectors.miss import drop_missed, is_missed
from sdp_core.errors import ConfigError
from sdp_core.report.findings import check_claim
from sdp_core.report.load import Sweep, parse_trial
from sdp_core.sweep.driver import grid_configs
from tests.conftest import REPO, run_main, small_trial_dict


def grid_dict(**fields) -> dict:
    return {"name": "g", "base": small_trial_dict(), "seeds": [0, 1],
            "experiments": {"a": {"set": {"mechanism": {"name": "dpsgd"}}},
                            "b": {"set": {"mechanism": {"name": "jft"}, "training.max_steps": 2}, "seeds": [7]}},
            **fields}


def test_grid_derives_its_trials_and_mechanisms_and_round_trips():
    cfg = parse_model(SweepConfig, grid_dict())
    assert cfg.num_trials == 3 and cfg.mechanisms == ["dpsgd", "jft"]
    trials = grid_configs(cfg)
    assert [t["trial_id"] for t in trials] == ["a-s0", "a-s1", "b-s7"]
    b = trials[2]["trial"]
    assert b["seed"] == 7 and b["name"] == "b-s7" and b["training"]["max_steps"] == 2 and b["mechanism"]["name"] == "jft"
    assert trials[0]["trial"]["training"]["max_steps"] == 6  # the base's value where the arm sets nothing
    again = parse_model(SweepConfig, cfg.model_dump(mode="json"))  # what OUT/sweep.yaml stores reloads as is
    assert again == cfg


@pytest.mark.parametrize("fields, message", [
    ({"search_space": {"parameters": {"training.learning_rate": {"type": "uniform", "low": 0.1, "high": 0.2}}}},
     "search_space: not used with `experiments`"),
    ({"num_trials": 9}, "num_trials: not used with `experiments`"),
    ({"early_stopping": True}, "early_stopping: a grid runs every arm to the end"),
    ({"seeds": [0, 0]}, "non-empty list of distinct seeds"),
    ({"experiments": {"a": {"set": {}, "seeds": []}}}, "non-empty list of distinct seeds"),
    ({"experiments": {"a": {"set": {"seed": 3}}}}, "`seed` and `name` come from the arm"),
    ({"experiments": {"bad-name": {"set": {}}}}, "must be letters, digits and _"),
    ({"claims": [{"text": "x", "metric": "val_perplexity", "lower": "a", "higher": "zzz"}]}, "arm 'zzz' is not in"),
    ({"claims": [{"text": "x", "metric": "val_perplexity", "kind": "increasing", "arms": ["a"]}]}, "at least two"),
])
def test_grid_mistakes_are_config_errors(fields, message):
    with pytest.raises(ConfigError) as e:
        parse_model(SweepConfig, grid_dict(**fields))
    assert message in str(e.value)


def test_an_arm_that_is_not_a_valid_trial_is_named_with_its_problem(tmp_path):
    import yaml

    path = tmp_path / "g.yaml"
    objectives = [{"metric": "val_perplexity", "mode": "min"}]  # the base measures no exposure
    path.write_text(yaml.safe_dump(grid_dict(experiments={"a": {"set": {"training.batch_size": 0}}},
                                             objectives=objectives)))
    result = run_main("validate", str(path))
    assert result.returncode == 2
    assert "experiments.a.set: training.batch_size: must be >= 1" in result.stderr
    assert result.stderr.count("\n") == 1


def test_shipped_findings_sweep_compares_dp_arms_at_equal_private_steps():
    cfg = load_sweep_config(REPO / "sweeps" / "findings.yaml")
    assert len(cfg.seeds) >= 3 and cfg.claims
    steps = {arm: arm_trial_config(cfg, arm, 0).training.private_max_steps for arm in cfg.experiments}
    assert all(arm_trial_config(cfg, arm, 0).privacy.target_epsilon == 3.0 for arm in cfg.experiments)
    # the compute claim: ATDP's private steps fixed in advance at 15 % of JFT's, its utility compared with JFT's
    compute = next(c for c in cfg.claims if c.lower == "atdp_redacted" and c.metric == "val_perplexity")
    assert compute.higher == "jft" and steps["atdp_redacted"] <= 0.15 * steps["jft"]
    short = {c.lower for c in cfg.claims if c.kind == "less" and steps[c.lower] != 60}  # meant to use less compute
    assert {a for a, s in steps.items() if s != 60} == short == {"atdp_redacted", "atdp_redacted_missed"}
    headline = {c.lower for c in cfg.claims if c.kind == "less"} | {c.higher for c in cfg.claims if c.kind == "less"}
    assert all(len(cfg.experiments[a].seeds or cfg.seeds) >= 3 for a in headline if not a.startswith(("crt", "red")))


# ---------------------------------------------------------------------------------------------- claims


def sweep_of(values: dict[str, dict[int, float | None]], claims: list[dict]) -> Sweep:
    arms = {a: {"set": {}, "seeds": sorted(seeds)} for a, seeds in values.items()}  # None: that seed failed
    cfg = parse_model(SweepConfig, grid_dict(experiments=arms, claims=claims))
    trials = [parse_trial({"trial_id": f"{a}-s{s}", "state": "finished" if v is not None else "failed", "seed": s,
                           "params": {"experiment": a, "seed": s}, "metrics": {"m": v} if v is not None else {},
                           "mechanism": {"bayesian_confidentiality": {"epsilon": v, "delta": 1e-5, "notion": "x",
                                                                      "accountant": "rdp"}}}, None)
              for a, seeds in values.items() for s, v in seeds.items()]
    return Sweep(None, cfg, trials, None)


@pytest.mark.parametrize("lower, higher, by, ratio, held, agree", [
    ({0: 1.0, 1: 2.0, 2: 3.0}, {0: 5.0, 1: 6.0, 2: 1.0}, 0, None, True, "2/3 seeds agree"),
    ({0: 1.0, 1: 2.0, 2: 3.0}, {0: 5.0, 1: 6.0, 2: 1.0}, 2.5, None, False, "2/3 seeds agree"),  # the mean decides
    ({0: 5.0}, {0: 4.5}, -1, None, True, "1/1"),  # "within 1": the lower arm may be up to 1 above
    ({0: 10.0}, {0: 100.0}, 0, 0.15, True, "ratio 0.1"),
    ({0: 20.0}, {0: 100.0}, 0, 0.15, False, "ratio 0.2"),
    ({0: None}, {0: 1.0}, 0, None, None, "lo has 0 of its 1 seeds finished"),
    ({0: 1.0, 1: None}, {0: 5.0, 1: 6.0}, 0, None, None, "lo has 1 of its 2 seeds finished"),  # partial: no verdict
])
def test_less_claims_compare_means_and_count_agreeing_seeds(lower, higher, by, ratio, held, agree):
    claim = {"text": "t", "metric": "m", "lower": "lo", "higher": "hi", "by": by, "ratio": ratio}
    sweep = sweep_of({"lo": lower, "hi": higher}, [claim])
    result = check_claim(sweep, sweep.config.claims[0])
    assert result.held is held and agree in result.detail


@pytest.mark.parametrize("series, held", [([0.0, 0.5, 0.5, 2.0], True), ([0.0, 1.0, 0.5, 2.0], False),
                                          ([1.0, 1.0, 1.0, 1.0], False)])
def test_increasing_claims_need_a_non_decreasing_trend(series, held):
    arms = {f"g{i}": {0: v} for i, v in enumerate(series)}
    claim = {"text": "t", "metric": "bayesian_confidentiality.epsilon", "kind": "increasing", "arms": list(arms)}
    sweep = sweep_of(arms, [claim])
    assert check_claim(sweep, sweep.config.claims[0]).held is held


def test_an_epsilon_in_a_claim_carries_its_notion_delta_and_accountant():
    values = {"lo": {0: 1.0}, "hi": {0: 2.0}}
    claims = [{"text": "t", "metric": m, "lower": "lo", "higher": "hi"} for m in ("bayesian_confidentiality.epsilon", "m")]
    sweep = sweep_of(values, claims)
    guarantee, plain = (check_claim(sweep, c) for c in sweep.config.claims)
    assert all(a.text().endswith("[x, δ = 1e-5, RDP]") for a in guarantee.arms)
    assert not any("δ" in a.text() for a in plain.arms)  # not a privacy number: no qualifier


# --------------------------------------------------------------------------------------- missed secrets


def test_a_detector_misses_about_gamma_of_the_distinct_values_and_always_the_same_ones():
    values = [f"secret-{i}" for i in range(20_000)]
    for rate in (0.1, 0.3, 0.5):
        missed = sum(is_missed(v, rate, seed=0) for v in values) / len(values)
        assert abs(missed - rate) < 0.015
    assert {v for v in values if is_missed(v, 0.1, 0)} <= {v for v in values if is_missed(v, 0.3, 0)}  # nested
    record = Record("call Jane Roe or Jane Roe", (Span(5, 13), Span(17, 25)))
    spans = [list(record.spans)] * 200
    out = drop_missed([record] * 200, spans, 0.5, seed=3)
    assert all(o == out[0] for o in out) and len(out[0]) in (0, 2)  # by value, not by occurrence
    assert drop_missed([record], [list(record.spans)], 0.0, seed=3) == [list(record.spans)]
