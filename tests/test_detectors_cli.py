"""`sdp-sweep detect`: statistics without secrets, redacted examples, JSONL output, one-line errors."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re

import pytest
from scipy.stats import binomtest

from sdp_core.cli import main
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.loaders import save_jsonl
from sdp_core.detectors.cli import add_detect_arguments, run_detect
from sdp_core.errors import UserError

REGEX_POLICY = "phone,order_number,tracking_number,address"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_detect_arguments(parser)
    return run_detect(parser.parse_args(argv))


@pytest.fixture
def data(tmp_path):
    records = generate_customersim(20, seed=5)
    path = tmp_path / "dialogs.jsonl"
    save_jsonl(records, path)
    return records, path


def test_statistics_recall_and_output(tmp_path, data, capsys):
    records, path = data
    out = tmp_path / "out.jsonl"
    assert run([str(path), "--policy", REGEX_POLICY, "--out", str(out), "--cache-dir", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert "records 20" in printed and "redacted tokens" in printed
    for label in ("phone", "order_number", "tracking_number", "address", "name"):
        assert f"recall {label}" in printed
    assert re.search(r"recall tracking_number +tokens 1\.0000 \[0\.\d+, 1\.0000\] \(20/20\)", printed)
    for secret in (s for r in records for s in r.secrets()):
        assert secret not in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 20 and set(rows[0]) == {"text", "redacted", "spans"}
    assert rows[0]["text"] == records[0].text and rows[0]["spans"]
    for row, record in zip(rows, records):
        for s in record.spans:
            if s.label != "name":  # names are not in this regex-only policy
                assert record.text[s.start : s.end] not in row["redacted"]


def test_show_prints_redacted_examples_only(tmp_path, data, capsys):
    records, path = data
    run([str(path), "--policy", REGEX_POLICY, "--show", "2", "--no-cache"])
    examples = capsys.readouterr().out.split("---\n")[1:]
    assert len(examples) == 2 and all("<mask>" in e for e in examples)
    assert not any(s.label == "tracking_number" and records[0].text[s.start : s.end] in examples[0]
                   for s in records[0].spans)


def test_plain_text_without_gold_and_user_pattern(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("badge EMP-0042 seen\nno badge here\n")
    run([str(path), "--policy", "employee", "--pattern", r"employee=EMP-\d{4}", "--show", "1", "--no-cache",
         "--estimate-per-type", "3"])
    printed = capsys.readouterr().out
    assert "records 2" in printed and "spans employee" in printed and "gold-annotated" not in printed
    assert "badge <mask> seen" in printed and "EMP-0042" not in printed


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--policy", "nosuch"], "unknown policy 'nosuch'"),
        (["--policy", "bad", "--pattern", "bad=(x"], "invalid regex for policy 'bad'"),
        (["--show", "-1"], "--show must be >= 0"),
    ],
)
def test_bad_input_is_a_one_line_user_error(data, argv, message):
    _, path = data
    with pytest.raises(UserError, match=message) as e:
        run([str(path), *argv])
    assert "\n" not in str(e.value)


def test_record_that_is_not_text(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": 12}\n')
    with pytest.raises(UserError, match="`text` must be a string"):
        run([str(path), "--policy", "digits", "--no-cache"])


def test_precision_and_masked_share_beside_recall(tmp_path, data, capsys):
    """The printed masked share of characters matches a count over the written spans, and the gold share one
    over the records' gold spans (both by a set of character positions, not the code that printed them)."""
    records, path = data
    out = tmp_path / "out.jsonl"
    run([str(path), "--policy", REGEX_POLICY, "--out", str(out), "--no-cache"])
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]

    def share(texts, span_lists):
        inside = sum(len({i for s in spans for i in range(s[0], s[1]) if not text[i].isspace()})
                     for text, spans in zip(texts, span_lists))
        return inside / sum(1 for text in texts for c in text if not c.isspace())

    texts = [r.text for r in records]
    masked = share(texts, [[(s["start"], s["end"]) for s in row["spans"]] for row in rows])
    gold = share(texts, [[(s.start, s.end) for s in r.spans] for r in records])
    assert f"({masked:.2%} of non-space characters)" in printed
    assert f"masked share of non-space characters {masked:.2%}  gold share {gold:.2%}" in printed
    assert re.search(r"token precision 1\.0000", printed)  # regexes for these formats flag nothing else here
    assert "of tokens)" in printed


REVIEWED = ["Call Ann Lee on 555-123-4567 today.", "Parcel for Bob Stone, call 555-987-6543.", "Nothing to see."]


class Terminal(io.StringIO):
    """A reviewer's answers typed at a terminal."""

    def isatty(self) -> bool:
        return True


def review_run(tmp_path, monkeypatch, argv: list[str], answers: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(REVIEWED) + "\n")
    monkeypatch.setattr("sys.stdin", Terminal(answers))
    run([str(path), "--no-cache", "--estimate-per-type", "3", *argv])


def test_review_stores_missed_secrets_as_gold_and_recall_has_a_wilson_interval(tmp_path, monkeypatch, capsys):
    """Whatever order the records come in, the answers mark each record's name: the phone policy found both phones
    and neither name, so recall on the reviewed records is 2 of 4 secrets, with scipy's Wilson interval."""
    answers = "name: Ann Lee\nname: Bob Stone\n\n" * 3
    review_run(tmp_path, monkeypatch, ["--policy", "phone", "--review", "3"], answers)
    printed = capsys.readouterr().out
    labels = tmp_path / "notes.txt.review.jsonl"
    assert f"wrote the review's labels to {labels}" in printed
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["sha256"]) == 64 for r in rows)
    assert "Ann Lee" not in labels.read_text()  # offsets and types, not the text
    gold = {text: [(text[s["start"]:s["end"]], s["label"]) for s in r["spans"]]
            for text in REVIEWED for r in rows if r["sha256"] == hashlib.sha256(text.encode()).hexdigest()}
    assert gold == {REVIEWED[0]: [("Ann Lee", "name"), ("555-123-4567", "phone")],
                    REVIEWED[1]: [("Bob Stone", "name"), ("555-987-6543", "phone")], REVIEWED[2]: []}
    low, high = binomtest(2, 4).proportion_ci(method="wilson")
    assert f"reviewed records 3 (labels in {labels})" in printed
    assert f"secrets fully masked 0.5000 [{low:.4f}, {high:.4f}] (2/4)" in printed
    assert re.search(r"recall name +0\.0000 \[0\.0000, 0\.\d+\] \(0/2\)", printed)

    # a later run, with a policy that also finds the names, reads the labels back: no review, no name printed
    review_run(tmp_path, monkeypatch, ["--policy", "phone,names", "--pattern", "names=Ann Lee|Bob Stone"], "")
    printed = capsys.readouterr().out
    assert "secrets fully masked 1.0000 [" in printed and "(4/4)" in printed
    assert "Ann Lee" not in printed and "555-123-4567" not in printed


def test_review_drops_a_span_named_no_secret_and_reports_what_it_cannot_read(tmp_path, monkeypatch, capsys):
    path = tmp_path / "room.txt"
    path.write_text("Room 555-123-4567 is free; ask Eve Moss.\n")
    monkeypatch.setattr("sys.stdin", Terminal("-1\n-7\nname: Nobody Here\nname: Eve Moss\nwhat\n\n"))
    run([str(path), "--policy", "phone", "--review", "1", "--no-cache", "--estimate-per-type", "3"])
    printed = capsys.readouterr().out
    assert "span 1: no secret" in printed and "no span 7 here (1 to 1)" in printed
    assert "not found in this record" in printed and "`TYPE: text`, `-K`" in printed
    [row] = [json.loads(line) for line in (tmp_path / "room.txt.review.jsonl").read_text().splitlines()]
    text = path.read_text().strip()
    assert [(text[s["start"]:s["end"]], s["label"]) for s in row["spans"]] == [("Eve Moss", "name")]
    assert "secrets fully masked 0.0000 [0.0000, " in printed and "(0/1)" in printed


def test_review_without_a_terminal_refuses_in_one_line_with_exit_code_2(tmp_path, monkeypatch, capsys):
    """Answers that no person typed (`--review 5 </dev/null`, a pipe) are no review: nothing is detected or written."""
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(REVIEWED) + "\n")
    with open(os.devnull) as devnull:
        monkeypatch.setattr("sys.stdin", devnull)
        assert main(["detect", str(path), "--policy", "phone", "--review", "5", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --review needs a person at a terminal") and err.count("\n") == 1
    assert not (tmp_path / "notes.txt.review.jsonl").exists()


@pytest.mark.parametrize("end", ["", "q\n"], ids=["end of input", "q"])
def test_an_interrupted_review_saves_only_the_records_answered(tmp_path, monkeypatch, capsys, end):
    """The first record is finished with an empty line; the second is open when the input ends or the reviewer
    types `q`: only the first is saved, and recall is computed on it alone (1 phone found of 2 secrets)."""
    review_run(tmp_path, monkeypatch, ["--policy", "phone", "--review", "3"], "name: Ann Lee\nname: Bob Stone\n\n" + end)
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "notes.txt.review.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    assert "record 2 is not saved; 1 record(s) reviewed" in printed
    assert "reviewed records 1 " in printed and "(1/2)" in printed


@pytest.mark.parametrize("answers", ["", "q\n", "name: Ann Lee\n"])
def test_a_review_with_no_record_finished_writes_no_labels(tmp_path, monkeypatch, capsys, answers):
    review_run(tmp_path, monkeypatch, ["--policy", "phone", "--review", "3"], answers)
    printed = capsys.readouterr().out
    assert not (tmp_path / "notes.txt.review.jsonl").exists()
    assert "record 1 is not saved; 0 record(s) reviewed" in printed and "no record reviewed" in printed
    assert "reviewed records" not in printed


def test_types_and_recall_estimate_without_gold(tmp_path, capsys):
    """A policy that declares no types says so; without gold spans, the estimate finds every inserted email and
    no inserted name when the policy has only an email pattern."""
    path = tmp_path / "notes.txt"
    path.write_text("Meeting moved to Tuesday.\n\nThe report is late.\n")
    run([str(path), "--policy", "email", "--no-cache", "--estimate-per-type", "4"])
    printed = capsys.readouterr().out
    assert "secret types: 'email' declares none" in printed
    assert re.search(r"estimated recall email +1\.0000 \[0\.\d+, 1\.0000\] ±0\.\d+ \(4/4\)\n", printed)
    assert re.search(r"estimated recall name +0\.0000 \[0\.0000, 0\.\d+\] ±0\.\d+ \(0/4\)  below 0\.95", printed)
    assert "it cannot see" in printed


def test_a_message_is_counted_by_the_types_it_holds(tmp_path, capsys):
    """Two addresses are counted as `email`; the Message-ID's digit groups are no phone."""
    path = tmp_path / "mail.txt"
    path.write_text("From: Ann Lee <ann.lee@example.com>\nMessage-ID: <15090.61304.110929.45684@beluga.mojam.com>\n"
                    "\nIn article <15090.61304.110929.45684@beluga.mojam.com>, bo@example.org wrote:\n")
    run([str(path), "--no-cache", "--estimate-per-type", "1"])
    printed = capsys.readouterr().out
    assert re.search(r"spans email +2\n", printed)
    assert "spans phone" not in printed
