"""Bad inputs end in one clear line on stderr and exit code 2: never a traceback, never partial output.

Each case runs the CLI's `main()` in-process (the code path of `sdp-sweep`, without ~5 s of interpreter start-up per
case); `test_validate_several_problems_one_line_each` and tests/test_config.py run it as a real subprocess. Files live in tests/bad_inputs/ (named after their case); the giant
one-line files are generated here rather than committed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli, run_main

BAD = Path(__file__).resolve().parent / "bad_inputs"
# A trial that would be cheap if it ever got past its checks.
TINY = ["--set", "data.n_train=100", "--set", "data.n_validation=20", "--set", "data.n_test=20",
        "--set", "detector.policy=phone", "--set", "tokenizer.vocab_size=600",
        "--set", "evaluation.exposure=false", "--set", "evaluation.mia=false", "--set", "training.max_steps=2"]

# (command, file in bad_inputs/ (or a generated name), extra args, substring the error line must contain)
CASES: list[tuple[str, str, list[str], str]] = [
    # sweep YAMLs
    ("validate", "sweep_syntax_error.yaml", [], "YAML syntax error"),
    ("validate", "sweep_unknown_key.yaml", [], "bogus_key: unknown key"),
    ("validate", "sweep_unknown_mechanism.yaml", [], "unknown mechanism 'magic'"),
    ("validate", "sweep_empty_search_space.yaml", [], "search space is empty"),
    ("validate", "sweep_wrong_type_num_trials.yaml", [], "num_trials"),
    ("validate", "sweep_missing_search_space_file.yaml", [], "not found"),
    ("validate", "sweep_negative_epsilon.yaml", [], "base.privacy.target_epsilon: must be > 0"),
    ("validate", "sweep_not_mapping.yaml", [], "expected a mapping"),
    ("validate", "sweep_no_mechanisms.yaml", [], "at least one mechanism"),
    ("run", "sweep_unknown_mechanism.yaml", [], "unknown mechanism 'magic'"),
    ("run", "sweep_empty_search_space.yaml", [], "search space is empty"),
    ("run", "sweep_syntax_error.yaml", [], "YAML syntax error"),
    # search spaces
    ("validate", "space_low_above_high.yaml", [], "low must be <= high"),
    ("validate", "space_loguniform_zero_low.yaml", [], "loguniform needs low > 0"),
    ("validate", "space_choice_no_values.yaml", [], "non-empty `values`"),
    ("validate", "space_unknown_type.yaml", [], "parameters.training.batch_size.type"),
    ("validate", "space_empty.yaml", [], "search space is empty"),
    # trial configs
    ("validate", "trial_syntax_error.yaml", [], "YAML syntax error"),
    ("validate", "trial_tab_indent.yaml", [], "YAML syntax error"),
    ("validate", "trial_unknown_key.yaml", [], "training.learning_rat: unknown key"),
    ("validate", "trial_wrong_type.yaml", [], "training.batch_size"),
    ("validate", "trial_negative_epsilon.yaml", [], "privacy.target_epsilon: must be > 0"),
    ("validate", "trial_zero_epsilon.yaml", [], "privacy.target_epsilon: must be > 0"),
    ("validate", "trial_zero_delta.yaml", [], "privacy.delta: must be > 0"),
    ("validate", "trial_delta_one.yaml", [], "privacy.delta: must be < 1"),
    ("validate", "trial_unknown_mechanism.yaml", [], "mechanism"),
    ("validate", "trial_top_level_list.yaml", [], "expected a mapping, got list"),
    ("validate", "trial_top_level_scalar.yaml", [], "expected a mapping, got str"),
    ("validate", "trial_invalid_utf8.yaml", [], "UTF-8"),
    ("validate", "trial_file_without_path.yaml", [], "source=file needs data.path"),
    ("validate", "trial_sdpsgd_gpt2.yaml", [], "sdpsgd needs model.arch: lstm"),
    ("validate", "trial_canary_count_zero.yaml", [], "data.canaries.count: must be >= 1"),
    ("validate", "trial_invalid_regex.yaml", [], "invalid regex for policy 'mine'"),
    ("validate", "trial_canary_no_placeholder.yaml", [], "placeholder"),
    ("trial", "trial_syntax_error.yaml", [], "YAML syntax error"),
    ("trial", "trial_unknown_policy.yaml", [], "unknown policy 'no_such_policy'"),
    ("trial", "trial_invalid_regex.yaml", [], "invalid regex for policy 'mine'"),
    ("trial", "trial_canary_no_placeholder.yaml", [], "placeholder"),
    ("trial", "trial_missing_model_path.yaml", [], "/nonexistent"),
    ("trial", "trial_unreachable_epsilon.yaml", ["--set", "data.n_train=100", "--set", "detector.policy=phone"],
     "ε"),
    # data files, through `detect` and through `trial --data`
    ("detect", "data_empty.jsonl", [], "no records"),
    ("detect", "data_blank_lines.txt", [], "no records"),
    ("detect", "data_binary.jsonl", [], "binary data"),
    ("detect", "data_invalid_utf8.txt", [], "invalid UTF-8 at byte 6"),
    ("detect", "data_invalid_json.jsonl", [], "line 2: invalid JSON"),
    ("detect", "data_not_object.jsonl", [], "must be an object"),
    ("detect", "data_json_array.json", [], "JSON Lines, one object per line, not a JSON array"),
    ("detect", "data_json_array_one_line.json", [], "JSON Lines, one object per line, not a JSON array"),
    ("detect", "data_text_not_string.jsonl", [], "`text` must be a string, got int"),
    ("detect", "data_missing_text.jsonl", [], "keys body, subject hold text and none is named `text`"),
    ("detect", "data_span_outside.jsonl", [], "outside the text"),
    ("detect", "data_span_negative.jsonl", [], "outside the text"),
    ("detect", "data_spans_overlap.jsonl", [], "overlap"),
    ("detect", "data_span_not_int.jsonl", [], "must be integers"),
    ("detect", "data_spans_not_list.jsonl", [], "`spans` must be a list"),
    ("detect", "data_not_parquet.parquet", [], "not a readable Parquet file"),
    ("detect", "data_does_not_exist.jsonl", [], "file not found"),
    ("detect", "GIANT.jsonl", [], "longer than 1,000,000"),
    ("detect", "GIANT.txt", [], "longer than 1,000,000"),
    ("trial", "data_empty.jsonl", TINY, "no records"),
    ("trial", "data_binary.jsonl", TINY, "binary data"),
    ("trial", "data_invalid_utf8.txt", TINY, "invalid UTF-8"),
    ("trial", "data_not_object.jsonl", TINY, "must be an object"),
    ("trial", "data_spans_overlap.jsonl", TINY, "overlap"),
    ("trial", "data_span_outside.jsonl", TINY, "outside the text"),
    ("trial", "data_few_records.jsonl", TINY, "cannot be split"),
    ("trial", "data_label_not_int.jsonl", TINY, "`label` must be a non-negative integer"),
    ("trial", "GIANT.jsonl", TINY, "longer than 1,000,000"),
    ("trial", "data_folder", TINY, "a folder, not a file: --data takes one file"),
    # reports
    ("report", "report_dir_is_file.txt", [], "no such sweep folder"),
    ("report", "report_no_results", [], "result"),
    # privacy ledgers
    ("epsilon", "ledger_not_json.json", [], "cannot read a ledger"),
    ("epsilon", "ledger_missing.json", [], "ledger"),
    ("epsilon", "ledger_list.json", [], "no ledger"),
]

# `--set` problems: no file, so the line names the offending value instead.
SET_CASES: list[tuple[list[str], str, str]] = [
    (["trial", "--set", "privacy.target_epsilon=-1"], "privacy.target_epsilon", "must be > 0"),
    (["trial", "--set", "privacy.delta=0"], "privacy.delta", "must be > 0"),
    (["trial", "--set", "no_equals_sign"], "no_equals_sign", "key.path=value"),
    (["trial", "--set", "training.batch_size=[1, 2"], "training.batch_size", "training.batch_size"),
    (["trial", "--set", "training.bogus=1"], "training.bogus", "no setting 'bogus' in training"),
    (["run", str(REPO / "sweeps" / "quickstart.yaml"), "--set", "data.canaries.count=30"], "--set",
     "a sweep's trial settings are under base: --set base.data.canaries.count=30"),
    (["trial", "--set", "mechanism.name=magic"], "magic", "mechanism"),
    (["epsilon", "--sample-rate", "0.01", "--steps", "100", "--sigma", "1", "--delta", "0"], "delta", "delta"),
    (["epsilon", "--sample-rate", "2", "--steps", "100", "--sigma", "1"], "sample", "sample"),
    (["epsilon", "--sample-rate", "0.01", "--steps", "100", "--target-epsilon", "1e-9"], "1e-09", "ε"),
]


@pytest.fixture(scope="module")
def giant(tmp_path_factory) -> Path:
    """One record of 1,200,000 characters, as JSONL and as plain text."""
    d = tmp_path_factory.mktemp("giant")
    text = "call me at 555-0100 " * 60_000
    (d / "GIANT.jsonl").write_text('{"text": "%s"}\n' % text)
    (d / "GIANT.txt").write_text(text + "\n")
    return d


def _assert_one_clean_line(proc, name: str, expected: str, allow_many: bool = False) -> list[str]:
    err = proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {err}"
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "no error line"
    if not allow_many:
        assert len(lines) == 1, err
    for line in lines:
        assert name in line, f"{name!r} not named in {line!r}"
    assert any(expected in line for line in lines), f"{expected!r} not in {err!r}"
    return lines


def _ids(case) -> str:
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_bad_input(case, giant, tmp_path):
    command, name, extra, expected = case
    path = giant / name if name.startswith("GIANT") else BAD / name
    out = tmp_path / "out"
    if command == "validate":
        args = ["validate", str(path)]
    elif command == "trial":
        args = ["trial", "--data", str(path), *extra] if path.suffix not in (".yaml",) else ["trial", str(path), *extra]
        args += ["--out", str(out)]
    elif command == "detect":
        args = ["detect", str(path), "--no-cache", "--out", str(out / "detected.jsonl")]
    elif command == "report":
        args = ["report", str(path), "--out", str(out)]
    elif command == "epsilon":
        args = ["epsilon", "--ledger", str(path)]
    elif command == "run":
        args = ["run", str(path)]
    else:
        raise AssertionError(command)
    proc = run_main(*args, cwd=tmp_path)
    _assert_one_clean_line(proc, str(path) if command != "trial" or path.suffix == ".yaml" else path.name, expected,
                           allow_many=command == "validate")
    assert not out.exists(), "partial output left behind"
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir()), list(tmp_path.iterdir())


@pytest.mark.parametrize("case", SET_CASES, ids=lambda c: " ".join(c[0][1:]))
def test_bad_override(case, tmp_path):
    args, named, expected = case
    out = tmp_path / "out"
    extra = ["--out", str(out)] if args[0] in ("trial", "run") else []
    proc = run_main(*args, *extra, cwd=tmp_path)
    _assert_one_clean_line(proc, named, expected)
    assert not out.exists()


@pytest.mark.parametrize("command", [["trial"], ["run", str(REPO / "sweeps" / "quickstart.yaml")]], ids=lambda c: c[0])
def test_an_assignment_without_equals_fails_before_the_stack_loads(command, tmp_path):
    """`--set training.epochs` is refused before torch, Ray or the accountants are imported."""
    script = ("import sys; from sdp_core.cli import main; "
              f"code = main({[*command, '--set', 'training.epochs', '--out', str(tmp_path / 'out')]!r}); "
              "print(code, sorted(m for m in ('torch', 'ray', 'dp_accounting') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.stdout.split()[0] == "2" and proc.stdout.strip().endswith("[]"), proc.stdout + proc.stderr
    assert proc.stderr.strip() == "error: --set expects key.path=value, got 'training.epochs'"


def test_validate_several_problems_one_line_each(tmp_path):
    """Several problems in one file: one line each, every line naming the file."""
    f = tmp_path / "many.yaml"
    f.write_text("privacy: {target_epsilon: -1, delta: 2}\ntraining: {batch_size: 0, bogus: 1}\n")
    proc = run_cli("validate", str(f), cwd=tmp_path)
    lines = _assert_one_clean_line(proc, str(f), "privacy.target_epsilon", allow_many=True)
    assert len(lines) == 4, lines


def test_files_are_small():
    assert len(CASES) >= 30
    for p in BAD.rglob("*"):
        if p.is_file():
            assert p.stat().st_size < 4096, p
