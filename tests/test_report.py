"""The sweep report built from stored trial results: files, front, secrets, ε labels, CLI, atomicity."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from PIL import Image

from sdp_core.config.loading import load_trial_config
from sdp_core.privacy.relations import RELATIONS
from sdp_core.report import build_report
from sdp_core.report.cli import add_report_arguments, run_report
from tests.synthetic_sweep import write_synthetic_sweep

SECRETS = ("482913", "555-0134", "ZQ7XK2")
N_TRIALS = 40
NOTIONS = "DP|SDP|confidentiality|bayesian_confidentiality"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    return write_synthetic_sweep(tmp_path_factory.mktemp("sweep") / "synthetic", N_TRIALS, secrets=SECRETS)


@pytest.fixture(scope="module")
def report(sweep_dir, tmp_path_factory) -> Path:
    return build_report(sweep_dir, tmp_path_factory.mktemp("reports") / "synthetic")


def raw_rows(sweep_dir: Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted((sweep_dir / "trials").glob("*.json"))]


def brute_force_front(rows: list[dict], objectives: list[dict]) -> set[str]:
    """Finished trials with every objective, that no other such trial of the same notion is at least as good as
    everywhere and strictly better than somewhere."""
    sign = {"min": 1.0, "max": -1.0}
    pts = {r["trial_id"]: (r["privacy"].get("notion"), tuple(sign[o["mode"]] * r["metrics"][o["metric"]]
                                                             for o in objectives))
           for r in rows if r["state"] == "finished" and all(o["metric"] in r["metrics"] for o in objectives)}
    return {i for i, (n, p) in pts.items()
            if not any(m == n and all(a <= b for a, b in zip(q, p)) and q != p for m, q in pts.values())}


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_report_arguments(parser)
    return run_report(parser.parse_args(list(argv)))


def test_every_file_exists_and_parses(report, sweep_dir):
    html = (report / "index.html").read_text()
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert html.count('class="plotly-graph-div') == 3
    assert "The best model of each guarantee: at ε = 3 (" in html
    # Offline: no script or stylesheet from the network; plotly.js's basic bundle is inlined once, the full one never.
    assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', html)
    assert html.count("plotly.js (basic - minified) v") == 1 and html.count("* plotly.js v") == 0
    assert len(html.encode()) < 2_000_000
    for name in ("pareto.png", "utility_vs_exposure_mean.png", "utility_vs_epsilon.png", "utility_vs_train_seconds.png"):
        with Image.open(report / name) as im:
            assert im.format == "PNG" and im.width > 300 and im.height > 200

    frame = pd.read_parquet(report / "trials.parquet")
    csv = pd.read_csv(report / "trials.csv")
    assert len(frame) == len(csv) == N_TRIALS
    assert set(frame["state"]) == {"finished", "early_stopped", "infeasible", "failed"}
    for column in ("trial_id", "pareto", "seed", "mechanism", "param.training.learning_rate", "param.training.batch_size",
                   "privacy.epsilon", "privacy.delta", "privacy.notion", "privacy.accountant", "privacy.events",
                   "metric.val_perplexity", "metric.exposure_mean", "version.torch", "config"):
        assert column in frame.columns, column
    finished = frame[frame["state"] == "finished"]
    assert all(isinstance(json.loads(e), list) for e in finished["privacy.events"])
    assert frame["config"].map(lambda c: json.loads(c)["seed"]).tolist() == frame["seed"].tolist()

    summary = (report / "summary.md").read_text()
    assert summary.startswith("# Sweep `synthetic`") and "| mechanism | finished |" in summary
    statement = (report / "privacy_statement.md").read_text()
    assert "## The sweep's own selection" in statement and "does not count" in statement
    assert "basic composition" in statement and "Papernot" in statement


def test_front_is_exactly_the_non_dominated_finished_trials(report, sweep_dir):
    rows = raw_rows(sweep_dir)
    objectives = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())["objectives"]
    expected = brute_force_front(rows, objectives)
    assert expected  # the synthetic sweep has a front
    assert {p.stem for p in (report / "frontier").glob("*.yaml")} == expected
    frame = pd.read_parquet(report / "trials.parquet")
    assert set(frame.loc[frame["pareto"], "trial_id"]) == expected
    assert not frame.loc[frame["state"] != "finished", "pareto"].any()


def test_frontier_configs_rerun_with_their_seed(report, sweep_dir):
    rows = {r["trial_id"]: r for r in raw_rows(sweep_dir)}
    for path in (report / "frontier").glob("*.yaml"):
        cfg = load_trial_config(path)  # a valid trial config, as `sdp-sweep trial` reads it
        assert cfg.model_dump(mode="json") == rows[path.stem]["config"]
        assert cfg.seed == rows[path.stem]["seed"]


def test_no_secret_reaches_any_report_file(report, sweep_dir):
    planted = json.dumps(raw_rows(sweep_dir))
    assert all(s in planted for s in SECRETS)  # the rows do hold them (canary values, detector examples, ...)
    files = [p for p in report.rglob("*") if p.is_file()]
    assert len(files) > 8
    for path in files:
        if path.suffix == ".parquet":  # compressed: look at the values
            text = pd.read_parquet(path).astype(str).to_csv()
        else:
            text = path.read_bytes().decode("utf-8", errors="replace")
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked into {path.name}"


def test_every_epsilon_carries_notion_neighbours_delta_and_accountant(report):
    relations = "|".join(re.escape(r) for r in RELATIONS.values())
    qualified = re.compile(rf"ε = [0-9.e+-]+ \(({NOTIONS}), ({relations}), δ = [0-9.e+-]+, [A-Za-z ]+\)")
    for name in ("summary.md", "privacy_statement.md", "index.html"):
        text = (report / name).read_text()
        if name == "index.html":
            text = re.sub(r"<script.*?</script>", "", text, flags=re.S)  # the page's prose, not plotly.js
        mentions = re.findall(r"ε = [0-9.e+-]+[^\n<|]*", text)
        assert mentions, name
        for m in mentions:
            assert qualified.match(m), f"{name}: {m!r}"


def test_unfinished_trials_are_listed_with_their_reason(report, sweep_dir):
    html = (report / "index.html").read_text()
    for row in raw_rows(sweep_dir):
        if row["state"] in ("infeasible", "failed"):
            assert f"<td>{row['trial_id']}</td>" in html
            assert row["error"].split(":")[0] in html


def test_sweep_cost_file_is_used_when_present(sweep_dir, tmp_path):
    cost = {"basic": {"epsilon": 120.0, "delta": 4e-4, "notion": "SDP", "accountant": "basic_composition",
                      "events": [], "trials": 40, "conditions": "any trials, all released"},
            "random_search": {"epsilon": 7.5, "delta": 1e-5, "notion": "SDP", "accountant": "rdp", "events": [],
                              "mean_trials": 40, "conditions": "Poisson number of trials, only the best released"}}
    copy = tmp_path / "sweep"
    copy.mkdir()
    (copy / "sweep.yaml").write_text((sweep_dir / "sweep.yaml").read_text())
    (copy / "trials").mkdir()
    for f in (sweep_dir / "trials").glob("*.json"):
        (copy / "trials" / f.name).write_text(f.read_text())
    (copy / "sweep_cost.json").write_text(json.dumps(cost))
    out = build_report(copy, tmp_path / "report")
    html = (out / "index.html").read_text()
    assert "ε = 120 (SDP, δ = 4e-4, basic composition)" in html
    assert "ε = 7.5 (SDP, δ = 1e-5, RDP)" in html and "written by the sweep" in html


def test_cli_rebuilds_the_report(sweep_dir, tmp_path, capsys):
    assert run(str(sweep_dir), "--out", str(tmp_path / "again")) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "again" / "index.html")
    assert (tmp_path / "again" / "trials.parquet").is_file()


@pytest.mark.parametrize("damage", ["no_folder", "no_results", "corrupt_json", "bad_state"])
def test_missing_or_corrupt_results_are_one_line_exit_2(damage, sweep_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    if damage != "no_folder":
        (broken / "trials").mkdir(parents=True)
        (broken / "sweep.yaml").write_text((sweep_dir / "sweep.yaml").read_text())
    if damage == "corrupt_json":
        (broken / "trials" / "t0001.json").write_text('{"state": "finished", "metrics": {')
    if damage == "bad_state":
        (broken / "trials" / "t0001.json").write_text('{"state": "exploded"}')
    assert run(str(broken), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
    if damage in ("corrupt_json", "bad_state"):
        assert "t0001.json" in err


def test_a_search_front_over_trials_that_saw_different_data_is_refused(sweep_dir, tmp_path, capsys):
    import json
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(sweep_dir, mixed, ignore=shutil.ignore_patterns("report"))
    row_file = sorted((mixed / "trials").glob("*.json"))[0]
    row = json.loads(row_file.read_text())
    row["detector"]["data_fingerprint"] = "1e" * 16  # this trial trained on other records
    row_file.write_text(json.dumps(row))
    assert run(str(mixed), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "2 different datasets" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_report_folder_is_complete_or_absent(sweep_dir, tmp_path, monkeypatch):
    out = build_report(sweep_dir, tmp_path / "report")
    before = sorted(p.name for p in out.iterdir())

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("sdp_core.report.write_pngs", crash)
    with pytest.raises(RuntimeError):
        build_report(sweep_dir, out)
    assert sorted(p.name for p in out.iterdir()) == before  # the previous report is intact
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # no half-written folder left beside it


def test_default_report_folder_is_inside_the_sweep_folder(sweep_dir, tmp_path):
    copy = tmp_path / "sweep"
    copy.mkdir()
    (copy / "sweep.yaml").write_text((sweep_dir / "sweep.yaml").read_text())
    (copy / "trials").mkdir()
    for f in list((sweep_dir / "trials").glob("*.json"))[:10]:
        (copy / "trials" / f.name).write_text(f.read_text())
    assert run(str(copy)) == 0
    assert (copy / "report" / "index.html").is_file() and len(list((copy / "trials").iterdir())) == 10


@pytest.mark.parametrize("where", ["sweep_folder", "parent_of_sweep", "other_folder"])
def test_report_never_replaces_results_or_other_folders(where, sweep_dir, tmp_path, capsys):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    out = {"sweep_folder": sweep_dir, "parent_of_sweep": sweep_dir.parent, "other_folder": other}[where]
    assert run(str(sweep_dir), "--out", str(out)) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert len(list((sweep_dir / "trials").glob("*.json"))) == N_TRIALS
    assert (other / "keep.txt").read_text() == "mine"


def test_a_sweep_where_nothing_finished_still_reports(sweep_dir, tmp_path):
    broken = tmp_path / "sweep"
    (broken / "trials").mkdir(parents=True)
    (broken / "sweep.yaml").write_text((sweep_dir / "sweep.yaml").read_text())
    for row in raw_rows(sweep_dir):
        if row["state"] in ("infeasible", "failed"):
            (broken / "trials" / f"{row['trial_id']}.json").write_text(json.dumps(row))
    out = build_report(broken, tmp_path / "report")
    assert "No trial finished with a formal privacy guarantee" in (out / "summary.md").read_text()
    assert list((out / "frontier").iterdir()) == []
    assert (out / "pareto.png").is_file() and not pd.read_parquet(out / "trials.parquet")["pareto"].any()


def test_an_empirical_estimate_is_labelled_and_never_the_formal_best_of_the_headline(report, sweep_dir):
    rows = {r["trial_id"]: r for r in raw_rows(sweep_dir) if r["state"] == "finished"}
    estimates = {t for t, r in rows.items() if r["privacy"].get("guarantee") == "empirical estimate"}
    summary = (report / "summary.md").read_text()
    named = re.findall(r"\(trial (\w+)\)", summary.split("\n")[2])  # the headline's best model of each notion
    best = min(named, key=lambda t: rows[t]["metrics"]["val_perplexity"])
    ppl = {t: r["metrics"]["val_perplexity"] for t, r in rows.items()}
    assert estimates and min(ppl[t] for t in estimates) < ppl[best]  # an estimate would have won as a guarantee
    assert not set(named) & estimates
    assert ("ε = 3 (SDP, replace-one neighbours, δ = 1e-5, RDP), empirical estimate; "
            "formal bound ε = 41 (SDP, replace-one neighbours, δ = 1e-5, RDP)") in summary
    frame = pd.read_parquet(report / "trials.parquet").set_index("trial_id")
    assert set(frame.loc[sorted(estimates), "privacy.guarantee"]) == {"empirical estimate"}
    assert set(frame.loc[sorted(estimates), "privacy.formal_epsilon"]) == {41.0}
    assert frame.loc[best, "privacy.guarantee"] == "formal"


def test_the_detector_table_shows_each_splits_masked_share_beside_the_gold_share():
    """What redaction costs the redacted mechanisms, per split: the policy's masked share of characters next to the
    share gold spans cover, counted here from the records themselves."""
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.preparation import prepare_trial_data
    from tests.conftest import small_trial_dict

    prepared = prepare_trial_data(parse_model(TrialConfig, small_trial_dict()))
    for split in ("train", "validation", "test"):
        records = getattr(prepared.data.fetch_records().splits, split)
        chars = sum(not c.isspace() for r in records for c in r.text)
        gold = sum(not r.text[i].isspace() for r in records for i in {i for s in r.spans for i in range(s.start, s.end)})
        assert prepared.detector["gold_char_share"][split]["value"] == pytest.approx(gold / chars)
        masked = prepared.detector["masked_char_share"][split]["value"]
        assert 0 < masked < 1
    # the test policy (phone, order and tracking numbers) masks less than the gold spans (names, addresses, ...) cover
    assert prepared.detector["masked_char_share"]["train"]["value"] < prepared.detector["gold_char_share"]["train"]["value"]


def test_the_statement_lists_what_no_epsilon_covers_membership_inference_among_it(tmp_path):
    """Membership-inference statistics read training records without noise: the privacy statement lists them as
    evaluation outputs ε does not cover (and says when a sweep objective used them), beside what the trials' own
    reports list as not covered."""
    sweep = write_synthetic_sweep(tmp_path / "s", 18, seed=1)
    for path in (sweep / "trials").glob("*.json"):
        row = json.loads(path.read_text())
        if row["privacy"]:
            row["privacy"]["not_covered"] = ["the number of training records N (the sampling rate q = B/N uses it)"]
            path.write_text(json.dumps(row))
    statement = (build_report(sweep, tmp_path / "r") / "privacy_statement.md").read_text()
    section = statement[statement.index("## Not covered by ε"):]
    assert "- the number of training records N" in section
    assert "- membership-inference statistics (AUC, best accuracy, member loss, group statistics): computed without " \
           "noise on training records' secrets" in section
    assert "held-out validation and test records" in section and "objective" not in section
    config = yaml.safe_load((sweep / "sweep.yaml").read_text())
    config["objectives"][1] = {"metric": "mia_auc", "mode": "min"}
    (sweep / "sweep.yaml").write_text(yaml.safe_dump(config))
    statement = (build_report(sweep, tmp_path / "r") / "privacy_statement.md").read_text()
    assert "this sweep's objective mia_auc chose the front with them" in statement
    assert "earlier version" not in statement


def test_rows_stored_before_the_record_was_the_unit_are_named_as_per_row(tmp_path):
    """A row without `privacy.unit` was stored when ε counted rows (windows), not records: the statement says its
    ε does not cover a whole record, and names the trials."""
    sweep = write_synthetic_sweep(tmp_path / "s", 12, seed=1)
    old = []
    for path in sorted((sweep / "trials").glob("*.json"))[:3]:
        row = json.loads(path.read_text())
        if row["privacy"]:
            del row["privacy"]["unit"]
            path.write_text(json.dumps(row))
            old.append(row["trial_id"])
    statement = (build_report(sweep, tmp_path / "r") / "privacy_statement.md").read_text()
    section = statement[statement.index("## Not covered by ε"):]
    assert old and f"- a whole record, for the {len(old)} trial(s) stored by an earlier version ({', '.join(old)})" \
        in section


def test_the_detector_section_has_a_row_per_policy_and_per_gold_label_none_empty(tmp_path):
    """The policy's numbers in one row, recall per gold label in a table of its own: no row of empty cells with its
    label and recall off to the right."""
    html = (build_report(write_synthetic_sweep(tmp_path / "s", 12), tmp_path / "r") / "index.html").read_text()
    detector = html[html.index('<section id="detector"'):html.index('<section id="cost"')]
    rows = re.findall(r'<tr class="trial[^"]*">(.*?)</tr>', detector)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    assert cells and all(all(c.strip() for c in row) for row in cells)
    by_label = {row[1]: row[2] for row in cells if len(row) == 3}
    assert {label: rate.split(" [")[0] for label, rate in by_label.items()} == {"phone": "0.976", "address": "0.868"}
    (policy,) = [row for row in cells if len(row) > 3]
    assert policy[0] == "customersim" and [c.split(" [")[0] for c in policy[-2:]] == ["0.912", "0.006"]


def test_data_without_gold_reports_the_recall_estimate_and_the_recall_on_reviewed_records(tmp_path):
    """A file without gold spans, with a review's labels beside it: the trial's detector summary holds the recall
    estimate per type and the recall on the reviewed records, counted here from the labels (the regexes find
    every phone, order and tracking number of CustomerSim and no name or address); the report shows both, and the
    types a declared policy masks, masks without claiming them (`strict`'s cities and organisations) and leaves in
    the clear, but no reviewed text."""
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.data.customersim import generate_customersim
    from sdp_core.detectors.registry import POLICY_TYPES
    from sdp_core.detectors.review import Labels, labels_path, text_digest
    from sdp_core.preparation import prepare_trial_data
    from tests.conftest import small_trial_dict

    records = generate_customersim(60, seed=3)
    data = tmp_path / "dialogs.jsonl"
    data.write_text("".join(json.dumps({"text": r.text}) + "\n" for r in records))
    reviewed = records[:6]
    Labels({text_digest(r.text): r.spans for r in reviewed}, {}).write(labels_path(data))
    policy = {"policy": "phone,order_number,tracking_number,email", "estimate_per_type": 200}
    prepared = prepare_trial_data(parse_model(TrialConfig, small_trial_dict(data={"source": "file", "path": str(data)},
                                                                            detector=policy)))
    review = prepared.detector["review"]
    found = sum(s.label in ("phone", "order_number", "tracking_number") for r in reviewed for s in r.spans)
    assert review["records"] == 6
    assert (review["secrets"]["k"], review["secrets"]["n"]) == (found, sum(len(r.spans) for r in reviewed))
    assert review["per_type"]["name"]["k"] == 0 and review["per_type"]["phone"]["value"] == 1.0
    estimate = prepared.detector["recall_estimate"]["per_type"]
    assert estimate["email"]["value"] == 1.0 and estimate["name"]["value"] == 0.0 and estimate["name"]["warn"]
    assert prepared.detector["recall_estimate"]["max_per_type"] == 200 and all(e["n"] <= 200 for e in estimate.values())

    sweep = write_synthetic_sweep(tmp_path / "sweep", 6)
    for f in (sweep / "trials").glob("*.json"):
        row = json.loads(f.read_text())
        row["detector"] = {**prepared.detector, "types": POLICY_TYPES["strict"].to_dict("strict")}
        f.write_text(json.dumps(row))
    html = (build_report(sweep, tmp_path / "report") / "index.html").read_text()
    assert "Detector recall on reviewed records" in html and f"{found}/{review['secrets']['n']}" in html
    assert "Detector recall without gold spans" in html and "≥ 0.95" in html and "below it" in html
    assert f"It cost {prepared.detector['recall_estimate']['cost']['inserted']} inserted secrets" in html
    assert "strict masks name, email, phone" in html and "ip_address; it masks city, organisation where" in html
    assert "does not claim them (recall below 0.95 on held-out data); it leaves in the clear nothing" in html
    assert not any(s in html for r in reviewed for s in r.secrets())


def test_the_headline_names_a_policy_as_its_config_does_not_by_its_members(sweep_dir, tmp_path):
    """A policy expands to members (`customersim` -> `address,email,...`) in the detector summary; what an SDP ε
    covers is said with the name the user chose."""
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    named = set()
    for path in (copy / "trials").glob("*.json"):
        row = json.loads(path.read_text())
        named.add(row["config"]["detector"]["policy"])
        row["detector"]["policy"] = "address,email,low_entity,phone"
        path.write_text(json.dumps(row))
    (policy,) = named
    lead = (build_report(copy, tmp_path / "report") / "summary.md").read_text().splitlines()[2]
    assert f"covers the tokens detector policy `{policy}` flags" in lead
    assert "address,email" not in lead


def test_a_report_on_the_users_own_data_is_titled_with_it(tmp_path):
    """`sdp-sweep run sweeps/quickstart.yaml --data emails.jsonl`: its summary, statement and page name the file."""
    sweep = write_synthetic_sweep(tmp_path / "sweep", 6, name="quickstart")
    stored = yaml.safe_load((sweep / "sweep.yaml").read_text())
    stored["base"]["data"].update(source="file", path=str(tmp_path / "emails.jsonl"))
    (sweep / "sweep.yaml").write_text(yaml.safe_dump(stored))
    report = build_report(sweep, tmp_path / "report")
    assert (report / "summary.md").read_text().splitlines()[0] == "# Sweep `quickstart on emails.jsonl`"
    assert (report / "privacy_statement.md").read_text().splitlines()[0] == (
        "# Privacy statement: sweep `quickstart on emails.jsonl`")
    assert "<h1>quickstart on emails.jsonl</h1>" in (report / "index.html").read_text()


def test_a_trial_that_learned_nothing_is_flagged_in_the_headline_and_is_no_mechanisms_best(sweep_dir, tmp_path):
    """The best DP-SGD trial given an untrained loss just above its own (it learned nothing): the headline lists it
    with why, and the mechanism table's best DP-SGD trial is the next one by perplexity, counted from the rows."""
    import math

    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    rows = {p: json.loads(p.read_text()) for p in (copy / "trials").glob("*.json")}
    dpsgd = sorted((r["metrics"]["val_perplexity"], p) for p, r in rows.items()
                   if r["state"] == "finished" and r["config"]["mechanism"]["name"] == "dpsgd")
    (_, flagged), (_, next_best) = dpsgd[:2]
    row = rows[flagged]
    row["metrics"]["untrained_val_loss"] = math.log(row["metrics"]["val_perplexity"]) + 0.1
    flagged.write_text(json.dumps(row))
    report = build_report(copy, tmp_path / "report")
    lead = (report / "summary.md").read_text().splitlines()[2]
    assert f"Learned nothing, so no mechanism's best: {row['trial_id']} (DP-SGD): validation loss" in lead
    summary = (report / "summary.md").read_text()
    table = summary[summary.index("## Best model of each mechanism"):]
    dpsgd_row = next(line for line in table.splitlines() if line.startswith("| DP-SGD |"))
    assert dpsgd_row.split("|")[3].strip() == rows[next_best]["trial_id"]


@pytest.mark.parametrize("with_nodp", [True, False])
def test_the_sweeps_own_epsilon_is_one_sentence_in_the_statement_the_summary_and_the_page(with_nodp, sweep_dir,
                                                                                           tmp_path):
    """With a No-DP trial compared, the sweep's own ε is none and the sentence names each such trial; without one,
    it is one number between the largest charged trial's own ε and their sum (basic composition). The statement,
    the summary and the page print the same sentence."""
    import html as html_module

    from sdp_core.report.load import load_sweep
    from sdp_core.report.statement import sweep_cost, sweep_epsilon

    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    if not with_nodp:
        for path in (copy / "trials").glob("*.json"):
            if json.loads(path.read_text())["config"]["mechanism"]["name"] == "nodp":
                path.unlink()
    cost = sweep_cost(load_sweep(copy))
    sentence = sweep_epsilon(cost)
    report = build_report(copy, tmp_path / "report")
    statement = (report / "privacy_statement.md").read_text()
    summary = (report / "summary.md").read_text()
    page = html_module.unescape((report / "index.html").read_text())
    for text in (statement, summary, page):
        assert text.count("The sweep's own ε") == text.count(sentence) >= 1
    assert f"**{sentence}**" in statement and "bounded below" not in statement
    nodp = [r["trial_id"] for r in raw_rows(copy) if r["config"]["mechanism"]["name"] == "nodp"
            and r["state"] != "infeasible"]
    if with_nodp:
        assert sentence.startswith("The sweep's own ε: none. It ran") and nodp
        assert all(f"{t}, No-DP" in sentence for t in nodp)
    else:
        # the synthetic light-noise trials' formal ε is a stated number, not their events' (left out of the floor)
        estimates = {r["trial_id"] for r in raw_rows(copy) if "formal" in (r.get("privacy") or {})}
        own = [c["epsilon"] for t, c in cost.charges.items() if t not in estimates]
        epsilon = float(re.search(r"ε = ([0-9.]+)", sentence).group(1))
        assert max(own) <= epsilon * 1.01 and epsilon <= sum(c["epsilon"] for c in cost.charges.values())
