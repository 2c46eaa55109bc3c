"""Configs: unknown keys rejected, every problem one line with its YAML path, overrides validated, YAML round trip."""

from __future__ import annotations

import pytest
import yaml

from sdp_core.config import parse_model
from sdp_core.config.loading import dump_yaml, load_trial_config
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import ConfigError, UserError
from tests.conftest import run_cli, run_main


def _write(tmp_path, text: str, name: str = "cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_validate_and_round_trip_through_yaml():
    cfg = TrialConfig()
    again = parse_model(TrialConfig, yaml.safe_load(dump_yaml(cfg)))
    assert again == cfg


def test_every_problem_is_reported_with_its_yaml_path(tmp_path):
    path = _write(tmp_path, "privacy:\n  target_epsilon: 0\n  delta: 2\ntraining:\n  batchsize: 3\n")
    with pytest.raises(ConfigError) as e:
        load_trial_config(path)
    lines = e.value.lines()
    assert f"{path}: privacy.target_epsilon: must be > 0" in lines
    assert f"{path}: privacy.delta: must be < 1" in lines
    assert f"{path}: training.batchsize: unknown key (did you mean batch_size?)" in lines
    assert len(lines) == 3


def test_mechanism_fields_are_checked_per_mechanism(tmp_path):
    path = _write(tmp_path, "mechanism:\n  name: atdp\n  w: 1.5\n")
    with pytest.raises(ConfigError, match=r"mechanism\.w: must be <= 1"):
        load_trial_config(path)
    with pytest.raises(ConfigError, match="sdpsgd needs model.arch: lstm"):
        load_trial_config(None, ["mechanism.name=sdpsgd"])


def test_overrides_are_validated_like_the_file(tmp_path):
    cfg = load_trial_config(None, ["training.batch_size=64", "privacy.accountant=prv"])
    assert cfg.training.batch_size == 64 and cfg.privacy.accountant == "prv"
    with pytest.raises(ConfigError, match="training.batch_size"):
        load_trial_config(None, ["training.batch_size=many"])
    with pytest.raises(UserError, match="key.path=value"):
        load_trial_config(None, ["training.batch_size"])


@pytest.mark.parametrize("text,expected", [
    ("privacy: {target_epsilon: -1}\n", "privacy.target_epsilon: must be > 0"),
    ("bogus: 1\n", "bogus: unknown key"),
    ("privacy: [1, 2\n", "YAML syntax error"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_validate_command_prints_one_line_per_problem_and_exits_2(tmp_path, text, expected):
    path = _write(tmp_path, text)
    proc = run_main("validate", str(path))  # in this process; the shipped configs' test below is a real subprocess
    assert proc.returncode == 2
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_validate_accepts_the_shipped_configs():
    from tests.conftest import REPO

    files = sorted(str(p) for p in (REPO / "sweeps").glob("*.yaml"))
    assert files, "the repository ships sweep configs"
    proc = run_cli("validate", *files)
    assert proc.returncode == 0, proc.stderr
