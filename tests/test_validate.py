"""`sdp-sweep validate` and `run` check every key of a sweep file before anything starts: search-space paths,
objective and claim metrics (against `sdp_core.config.metrics`), with the closest known name; one line each, exit 2."""

from __future__ import annotations

import difflib

import pytest

from sdp_core.config import parse_model
from sdp_core.config.metrics import METRICS
from sdp_core.config.trial import TrialConfig
from sdp_core.trial import run_trial
from tests.conftest import REPO, run_main, small_trial_dict

QUICKSTART = (REPO / "sweeps" / "quickstart.yaml").read_text()


def _sweep(tmp_path, text: str):
    (tmp_path / "search_spaces").mkdir(exist_ok=True)
    (tmp_path / "search_spaces" / "quickstart.yaml").write_text((REPO / "search_spaces" / "quickstart.yaml").read_text())
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_an_objective_typo_fails_validate_with_the_metric_it_meant(tmp_path):
    path = _sweep(tmp_path, QUICKSTART.replace("metric: val_perplexity", "metric: val_perplexty"))
    r = run_main("validate", str(path))
    assert r.returncode == 2 and "ok" not in r.stdout
    assert r.stderr.splitlines() == [f"{path}: objectives.0.metric: unknown metric 'val_perplexty' (did you mean "
                                     "val_perplexity?); docs/config.md lists every metric"]


def test_run_refuses_an_objective_typo_before_anything_starts(tmp_path):
    path = _sweep(tmp_path, QUICKSTART.replace("metric: exposure_mean", "metric: exposure_mean_"))
    out = tmp_path / "out"
    r = run_main("run", str(path), "--out", str(out))
    assert r.returncode == 2 and "did you mean exposure_mean?" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not out.exists()


def test_every_search_space_path_is_a_setting(tmp_path):
    path = _sweep(tmp_path, "name: t\nmechanisms: [dpsgd, atdp]\nobjectives: [{metric: val_perplexity, mode: min}]\n"
                  "search_space:\n  parameters:\n"
                  "    training.learnig_rate: {type: loguniform, low: 1.0e-4, high: 1.0e-2}\n"
                  "    mechanism.ww: {type: uniform, low: 0.1, high: 0.9}\n"
                  "    trainng.epochs: {type: int, low: 1, high: 2}\n"
                  "    detector.patterns.ids: {type: choice, values: ['ID-\\d+']}\n")
    r = run_main("validate", str(path))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"{path}: search_space.training.learnig_rate: no setting 'learnig_rate' in training (did you mean "
        "learning_rate?)",
        f"{path}: search_space.mechanism.ww: no setting 'ww' in mechanism (did you mean w?)",
        f"{path}: search_space.trainng.epochs: no setting 'trainng' in a trial config (did you mean training?)",
    ]


def test_unknown_keys_anywhere_name_the_closest_key(tmp_path):
    text = QUICKSTART.replace("n_train: 1000", "n_trian: 1000").replace("concurrency: 2", "concurency: 2")
    r = run_main("validate", str(_sweep(tmp_path, text)))
    assert r.returncode == 2
    assert {line.split(": ", 1)[1] for line in r.stderr.splitlines()} == {
        "base.data.n_trian: unknown key (did you mean n_train?)", "concurency: unknown key (did you mean concurrency?)"}


def test_grid_arm_settings_and_claim_metrics_are_checked(tmp_path):
    path = _sweep(tmp_path, "name: g\nobjectives: [{metric: val_perplexity, mode: min}]\nexperiments:\n  a: {set: {training.epoch: 2}}\n  b: {}\nseeds: [0]\n"
                  "claims:\n  - {text: x, metric: val_perplexit, lower: a, higher: b}\n")
    r = run_main("validate", str(path))
    assert r.returncode == 2
    assert sorted(line.split(": ", 1)[1] for line in r.stderr.splitlines()) == [
        "claims.0.metric: unknown metric 'val_perplexit' (did you mean val_perplexity?); docs/config.md lists "
        "every metric",
        "experiments.a.set.training.epoch: no setting 'epoch' in training (did you mean epochs?)"]


def test_an_attack_metric_needs_its_attack(tmp_path):
    text = QUICKSTART.replace("metric: exposure_mean", "metric: mia_auc").replace(
        "  model: {arch: gpt2", "  evaluation: {mia: false}\n  model: {arch: gpt2")
    r = run_main("validate", str(_sweep(tmp_path, text)))
    assert r.returncode == 2 and r.stderr.strip().endswith("objectives.1.metric: mia_auc needs base.evaluation.mia: true")


def test_the_shipped_sweeps_validate():
    for path in sorted((REPO / "sweeps").glob("*.yaml")):
        r = run_main("validate", str(path))
        assert r.returncode == 0, r.stderr


def test_a_trial_produces_only_declared_metrics(tmp_path):
    """Every metric key of a real (tiny) trial, with exposure and membership inference on, is declared, so an
    objective naming it validates; and `epsilon` comes from its privacy report."""
    cfg = parse_model(TrialConfig, small_trial_dict(
        data={"canaries": {"count": 4, "repeats": 2}}, evaluation={"exposure": True, "mia": True},
        training={"max_steps": 2}))
    result = run_trial(cfg, None)
    undeclared = set(result.metrics) - set(METRICS)
    assert not undeclared, undeclared
    assert {"val_perplexity", "exposure_mean", "mia_auc", "private_steps"} <= set(result.metrics)
    assert "epsilon" in METRICS and result.privacy["epsilon"] > 0


@pytest.mark.parametrize("typo,meant", [("val_perplexty", "val_perplexity"), ("exposure_men", "exposure_mean"),
                                         ("mia_acu", "mia_auc")])
def test_suggestions_agree_with_difflib(typo, meant):
    from sdp_core.config.metrics import unknown_metric

    assert difflib.get_close_matches(typo, list(METRICS), n=1) == [meant]
    assert f"did you mean {meant}?" in unknown_metric(typo)
