"""What a trial releases beside its model: every number is the same for two neighbouring datasets or listed as
outside ε wherever ε is printed, and a trial whose noise is reproducible says its ε does not hold."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.loaders import save_jsonl
from sdp_core.data.records import Record
from sdp_core.preparation import prepare_trial_data
from sdp_core.report import build_report
from sdp_core.report.load import load_sweep
from sdp_core.trial import run_trial
from tests.conftest import run_main, small_trial_dict
from tests.synthetic_sweep import write_ladder_sweep, write_synthetic_sweep

MODEL_OUTPUTS = re.compile(r"^(metrics\.(val|test)_|metrics\.(exposure|mia|empirical)|attacks\.|config\.|model\.)")
"""What a result holds that is not released beside the model: the trained model's own evaluation (a function of the
ε-protected model and of held-out or drawn records), the config the user wrote, and the model's parameter counts."""


def _leaves(value: Any, key: str = "") -> dict[str, Any]:
    """Every leaf of a result by dotted key, list positions as their index."""
    if isinstance(value, dict):
        return {k: v for name, item in value.items() for k, v in _leaves(item, f"{key}.{name}" if key else name).items()}
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        return {k: v for i, item in enumerate(value) for k, v in _leaves(item, f"{key}.{i}").items()}
    return {key: value}


def _listed(key: str, not_covered: list[str]) -> bool:
    """Whether an item of `not_covered` names `key`, or a section holding it, as `a.b` (list positions left out)."""
    parts = [p for p in key.split(".") if not p.isdigit()]
    return any(f"`{'.'.join(parts[:n])}`" in item for n in range(1, len(parts) + 1) for item in not_covered)


def _neighbours(tmp_path: Path) -> tuple[Path, Path, str]:
    """Two JSONL files of 250 CustomerSim dialogs (200 of them train) that differ in one training record's tracking
    number, a secret the policy flags: replace-one neighbours under SDP. The new value is one the tokenizer cuts into
    fewer tokens (the dialogs' speaker tags), so the training data's token counts differ."""
    records = generate_customersim(250, 7)
    first = save_jsonl(records, tmp_path / "a" / "chats.jsonl")
    cfg = _config(first, {"name": "dpsgd"})
    prepared = prepare_trial_data(cfg)
    train = {r.text for r in prepared.data.fetch_records().splits.train}
    i = next(i for i, r in enumerate(records) if r.text in train and len(r.spans or ()) == 3)
    span = next(s for s in records[i].spans or () if s.label == "tracking_number")
    old = records[i].text[span.start:span.end]
    tokens = lambda value: len(prepared.data.tokenizer(value).input_ids)  # noqa: E731
    new = "USRSYSUSR1"
    assert tokens(new) != tokens(old)
    text = records[i].text[:span.start] + new + records[i].text[span.end:]
    records[i] = Record(text, records[i].spans)
    second = save_jsonl(records, tmp_path / "b" / "chats.jsonl")
    return first, second, new


def _config(path: Path, mechanism: dict) -> TrialConfig:
    return parse_model(TrialConfig, small_trial_dict(
        data={"source": "file", "path": str(path), "max_length": 128}, mechanism=mechanism,
        training={"max_steps": None, "epochs": 1, "max_tokens": 8_000}))


@pytest.mark.parametrize("mechanism", [{"name": "dpsgd"}, {"name": "jft", "phase1_mode": "light_noise"}],
                         ids=["dpsgd", "jft-light-noise"])
def test_neighbouring_datasets_release_the_same_numbers_or_list_them_outside_epsilon(tmp_path, mechanism):
    """Two datasets that differ in one record's secret (SDP's replace-one relation), each through a whole trial held
    to a token budget: every number a result releases beside its model is equal, or its key is listed in
    `privacy.not_covered`, which the console prints under ε and the privacy statement lists. The steps, q and σ
    (the ledger) are equal: `training.max_tokens` counts a private record at the held-out records' mean length."""
    first, second, new = _neighbours(tmp_path)
    rows = [run_trial(_config(path, mechanism), path.parent / "out") for path in (first, second)]
    released = [_leaves(json.loads((path.parent / "out" / "result.json").read_text())) for path in (first, second)]
    keys = {k for leaves in released for k in leaves if not MODEL_OUTPUTS.match(k)}
    differ = sorted(k for k in keys if released[0].get(k) != released[1].get(k))
    assert any(k.startswith("detector.") for k in differ)  # the training data's statistics do differ
    not_covered = rows[0].privacy["not_covered"]
    assert not_covered == rows[1].privacy["not_covered"]
    assert [k for k in differ if not _listed(k, not_covered)] == []
    assert rows[0].ledger == rows[1].ledger and rows[0].metrics["tokens"] == rows[1].metrics["tokens"]
    assert rows[0].privacy["unit"] == rows[1].privacy["unit"]
    assert rows[0].metrics["steps"] < 200 / 16  # the budget held: fewer steps than an epoch
    line = rows[0].not_covered_line()  # each item by its opening words
    assert all(re.match(r"[^,:(]+", item).group().strip() in line for item in not_covered) and len(line) < 400
    assert new not in json.dumps(rows[1].to_dict())

    sweep = write_synthetic_sweep(tmp_path / "sweep", 12, seed=1)
    stored = json.loads(next((sweep / "trials").glob("*.json")).read_text())
    ours = rows[1].in_sweep(stored["trial_id"], {}, []).to_dict()
    ours["detector"]["data_fingerprint"] = stored["detector"]["data_fingerprint"]  # one front needs one dataset
    (sweep / "trials" / f"{stored['trial_id']}.json").write_text(json.dumps(ours))
    statement = (build_report(sweep, tmp_path / "report") / "privacy_statement.md").read_text()
    section = statement[statement.index("## Not covered by ε"):]
    assert all(f"- {item}." in section for item in not_covered)


def test_a_trial_with_reproducible_noise_says_everywhere_that_its_epsilon_does_not_hold(tmp_path):
    """`privacy.reproducible_noise` derives the noise from the published seed: the console line, result.json and
    the report say the guarantee does not hold, and the report never counts the trial among guaranteed ones (its
    headline, its best model of a notion, the sweep's composed cost)."""
    from sdp_core.report.curve import curve_points
    from sdp_core.report.pareto import analyse
    from sdp_core.sweep.live import epsilon_text

    cfg = parse_model(TrialConfig, small_trial_dict(mechanism={"name": "dpsgd"}, privacy={"reproducible_noise": True}))
    row = run_trial(cfg, tmp_path / "trial")
    saved = json.loads((tmp_path / "trial" / "result.json").read_text())
    assert saved["privacy"]["holds"] is False and "does not hold" in saved["privacy"]["condition"]
    assert "ε=" in row.summary_line() and "the guarantee does not hold" in row.summary_line()
    assert "the guarantee does not hold" in epsilon_text(saved["privacy"])  # the sweep's live line
    ledger = run_main("epsilon", "--ledger", str(tmp_path / "trial" / "result.json"))
    assert ledger.returncode == 0 and "ε = " in ledger.stdout and "the guarantee does not hold" in ledger.stdout

    sweep = write_synthetic_sweep(tmp_path / "sweep", 12, seed=1)
    before = {t.trial_id: t for t in load_sweep(sweep).trials}
    target = next(t for t in before.values() if t.guaranteed and t.state == "finished")
    path = sweep / "trials" / f"{target.trial_id}.json"
    stored = json.loads(path.read_text())
    stored["privacy"].update(holds=saved["privacy"]["holds"], condition=saved["privacy"]["condition"])
    path.write_text(json.dumps(stored))
    trial = next(t for t in load_sweep(sweep).trials if t.trial_id == target.trial_id)
    assert not trial.guaranteed and trial.formal_epsilon is None
    report = build_report(sweep, tmp_path / "report")
    summary = (report / "summary.md").read_text()
    headline = summary.split("\n\n")[1]
    assert f"trial {target.trial_id})" not in headline
    lines = [line for line in summary.splitlines() if f"| {target.trial_id} " in line and "ε =" in line]
    assert lines and all("does not hold" in line for line in lines)
    statement = (report / "privacy_statement.md").read_text()
    assert target.trial_id in statement[statement.index("without a formal guarantee") - 200:]

    ladder = write_ladder_sweep(tmp_path / "ladder", per_cell=2)  # over an ε ladder it stands at no ε
    stored = json.loads((ladder / "trials" / "trial_0000.json").read_text())
    stored["privacy"].update(holds=saved["privacy"]["holds"], condition=saved["privacy"]["condition"])
    (ladder / "trials" / "trial_0000.json").write_text(json.dumps(stored))
    placed = {t.trial_id for point in curve_points(analyse(load_sweep(ladder))) for t in point.trials}
    assert "trial_0000" not in placed and "trial_0001" in placed


def test_the_token_budget_reads_no_private_record():
    """`training.max_tokens` holds a private phase to steps counted from N and the held-out records alone: training
    records of any length (here every padding position counted as trained on) get the same steps, so the same σ."""
    from sdp_core.mechanisms.base import private_phase, within_token_budget

    cfg = parse_model(TrialConfig, small_trial_dict(training={"max_steps": None, "epochs": 2, "max_tokens": 20_000}))
    data = prepare_trial_data(cfg).data
    padded = data.train.with_weights(torch.ones_like(data.train.weights))
    assert padded.valid.sum() > 1.3 * data.train.valid.sum()
    phases = [[private_phase("dp", train, cfg, 2)] for train in (data.train, padded)]
    steps = [within_token_budget(p, cfg.training.max_tokens, "DP", data.validation)[0].total_steps for p in phases]
    assert steps[0] == steps[1] < phases[0][0].total_steps


def test_a_private_record_counts_the_same_tokens_in_neighbouring_datasets(tmp_path):
    """The two neighbouring datasets' training rows hold different numbers of tokens, yet a private phase counts
    the same tokens per record in both, under DP (held-out records) and under SDP (a flagged run at the held-out
    records' mean tokens per run)."""
    from sdp_core.mechanisms.base import private_phase, tokens_per_unit

    first, second, _ = _neighbours(tmp_path)
    prepared = [prepare_trial_data(_config(path, {"name": "dpsgd"})).data for path in (first, second)]
    assert prepared[0].train.valid.sum() != prepared[1].train.valid.sum()
    phases = [private_phase("dp", d.train, _config(first, {"name": "dpsgd"}), 1) for d in prepared]
    for notion in ("DP", "SDP"):
        counts = [tokens_per_unit(phase, notion, d.validation) for phase, d in zip(phases, prepared)]
        assert counts[0] == counts[1]
