"""`sdp-sweep audit`: exposures of given canary values from a saved model, never printing the values."""

from __future__ import annotations

import argparse
import json
import math

import pytest
from test_attacks_helpers import digit_tokenizer, one_thread  # noqa: F401

from sdp_core.attacks.exposure import exposure_exact
from sdp_core.attacks.cli import add_audit_arguments, run_audit
from sdp_core.config import ModelConfig
from sdp_core.config.canary import CanaryFormat
from sdp_core.errors import UserError
from sdp_core.models import build_model
from sdp_core.models.checkpoint import save_model

FORMAT = "My ID is {dddd}"
SECRETS = ["1234", "9081"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = digit_tokenizer()
    cfg = ModelConfig(arch="gpt2", preset="gpt2-tiny")
    return save_model(tmp_path_factory.mktemp("model"), build_model(cfg, len(tok), 64), tok, cfg, 64)


def _audit(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_audit_arguments(parser)
    return run_audit(parser.parse_args(list(argv)))


def test_json_reports_exposures_without_the_values(model_dir, capsys):
    args = [str(model_dir), "--canary", FORMAT, "--json"] + [a for s in SECRETS for a in ("--secret", s)]
    assert _audit(*args) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert not any(s in out for s in SECRETS)
    from sdp_core.models.checkpoint import load_model

    model, tok, _ = load_model(model_dir)
    expected = [exposure_exact(model, tok, CanaryFormat.parse(FORMAT), s)["exposure"] for s in SECRETS]
    assert report["exposures"] == pytest.approx(expected)
    assert report["space_size"] == 10**4 and report["exposure_max"] == max(report["exposures"])
    assert 0 < report["summary"]["top_share"] < 1


def test_context_scores_the_canary_where_it_was_inserted(model_dir, capsys):
    from sdp_core.attacks.candidates import default_context
    from sdp_core.models.checkpoint import load_model

    assert _audit(str(model_dir), "--canary", FORMAT, "--context", "USR: ", "--secret", SECRETS[0], "--json") == 0
    report = json.loads(capsys.readouterr().out)
    model, tok, _ = load_model(model_dir)
    context = default_context(tok, "USR: ")
    assert report["exposures"] == pytest.approx([exposure_exact(model, tok, CanaryFormat.parse(FORMAT), SECRETS[0],
                                                                context=context)["exposure"]])
    assert report["floor"] == pytest.approx(1 / math.log(2), abs=1e-3)


def test_without_secrets_the_enumeration_is_summarised_by_the_top_share_not_its_rank(model_dir, capsys):
    """The most likely candidate ranks first in any model, so its exposure (log2 |R| = 13.29 bits) is not shown as
    if it measured memorisation: its share of the probability against a uniform model's is."""
    assert _audit(str(model_dir), "--canary", FORMAT, "--json") == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert _audit(str(model_dir), "--canary", FORMAT) == 0
    out = " ".join(capsys.readouterr().out.split())
    ratio = summary["top_share"] * 10**4
    assert (f"The most likely of the 10,000 candidates (unnamed) holds {summary['top_share']:.3g} of their "
            f"probability: {ratio:.1f} × the 0.0001 of a model indifferent to them") in out
    assert "ranks first whatever the model" in out and "13.29" not in out


def test_without_a_terminal_the_enumeration_prints_its_progress_by_tenths(model_dir, capsys):
    assert _audit(str(model_dir), "--canary", FORMAT, "--secret", SECRETS[0], "--json") == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "scoring candidates: 0% (0 of 10,000)"
    assert lines[-1].startswith("scoring candidates: 100% (10,000 of 10,000) in ")
    assert 2 <= len(lines) <= 11


def test_estimate_mode(model_dir, capsys):
    assert _audit(str(model_dir), "--canary", FORMAT, "--method", "estimate", "--secret", "1234",
                  "--sample-size", "500", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "estimate" and len(report["exposures"]) == 1


def test_user_errors_come_before_loading_the_model(tmp_path):
    missing = str(tmp_path / "nothing")
    with pytest.raises(UserError, match="use method estimate"):
        _audit(missing, "--canary", "ID {dddddddd}")
    with pytest.raises(UserError, match="needs the canary values"):
        _audit(missing, "--canary", FORMAT, "--method", "estimate")
    with pytest.raises(UserError, match="does not fit"):
        _audit(missing, "--canary", FORMAT, "--secret", "12")


def test_audit_help_says_where_membership_inference_is():
    from tests.conftest import run_main

    r = run_main("audit", "--help")
    text = " ".join(r.stdout.split())
    assert "canary exposure of a saved trial model (membership inference and the empirical ε lower bound run " \
           "inside each trial, which knows its members: result.json's attacks)" in text


def test_a_suffix_after_the_placeholder_is_announced_before_the_long_scoring(model_dir, capsys):
    assert _audit(str(model_dir), "--canary", FORMAT + ".", "--secret", SECRETS[0], "--json") == 0
    err = capsys.readouterr().err
    assert ("note: the text after the placeholder ('.') is scored after every one of the 10,000 candidates: one more "
            "model step each") in err and "--method estimate ranks against a sample instead" in err
    assert _audit(str(model_dir), "--canary", FORMAT, "--secret", SECRETS[0], "--json") == 0
    assert "note:" not in capsys.readouterr().err


def test_loading_and_scoring_print_nothing_of_transformers(model_dir):
    """No weights-loading bar and no deprecation notice from transformers: stderr holds the audit's own lines."""
    from tests.conftest import run_cli

    r = run_cli("audit", str(model_dir), "--canary", "My ID is {dd}", "--secret", "12", "--json")
    assert r.returncode == 0, r.stderr
    assert [line.split(":")[0] for line in r.stderr.splitlines()] == ["scoring candidates"] * 2, r.stderr
