"""Data in the formats people have: CSV / TSV / Parquet tables with a named (or the one) text column, plain text
by its documented record rule; and what a trial says it used."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sdp_core.config import DataConfig
from sdp_core.data.loaders import load_records
from sdp_core.data.splits import load_splits
from sdp_core.errors import DataError
from tests.conftest import run_main


def _dialogs(n: int) -> list[str]:
    return [f"USR: Hi, order 123-{10000 + i}-4567 has not arrived, my name is Ann Lee.\nSYS: Sorry, checking it."
            for i in range(n)]


def _write_table(path, header: list[str], rows: list[list], delimiter: str = ",") -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)


def test_a_csv_of_50_multiline_dialogs_is_50_records_without_its_header(tmp_path):
    path = tmp_path / "chats.csv"
    dialogs = _dialogs(50)
    _write_table(path, ["id", "text", "label"], [[i, d, i % 2] for i, d in enumerate(dialogs)])
    records = load_records(path)
    assert [r.text for r in records] == dialogs  # the csv module's reading of the same file, cell by cell
    assert [r.label for r in records] == [i % 2 for i in range(50)]


def test_a_tsv_with_one_text_column_under_another_name_is_read_from_it(tmp_path):
    path = tmp_path / "chats.tsv"
    _write_table(path, ["conversation_id", "message"], [[i, d] for i, d in enumerate(_dialogs(5))], "\t")
    assert [r.text for r in load_records(path)] == _dialogs(5)


def test_several_text_columns_are_refused_until_one_is_named(tmp_path):
    path = tmp_path / "chats.csv"
    _write_table(path, ["agent", "customer"], [["Hello, how can I help?", d] for d in _dialogs(3)])
    with pytest.raises(DataError) as e:
        load_records(path)
    assert str(e.value) == (f"{path}: columns agent, customer hold text and none is named `text`: name the text "
                            "column(s) with --set data.text_fields=[NAME]")
    assert [r.text for r in load_records(path, ["customer"])] == _dialogs(3)
    assert [r.text for r in load_records(path, ["agent", "customer"])] == [f"Hello, how can I help?\n{d}"
                                                                            for d in _dialogs(3)]
    with pytest.raises(DataError, match="no column 'body' \\(columns: agent, customer\\)"):
        load_records(path, ["body"])


def test_jsonl_with_its_text_under_another_key_names_the_keys_and_reads_data_text_fields(tmp_path):
    """JSONL is read like a table when its objects have no `text` key: its one text key, or the keys
    `data.text_fields` names (through the trial's data settings too); several text keys are refused by name."""
    path = tmp_path / "mail.jsonl"
    path.write_text("".join(json.dumps({"id": i, "subject": "Order", "body": d}) + "\n"
                            for i, d in enumerate(_dialogs(20))))
    with pytest.raises(DataError) as e:
        load_records(path)
    assert str(e.value) == (f"{path}: keys subject, body hold text and none is named `text`: name the text key(s) "
                            "with --set data.text_fields=[NAME]")
    assert [r.text for r in load_records(path, ["body"])] == _dialogs(20)
    splits = load_splits(DataConfig(source="file", path=str(path), text_fields=["subject", "body"]), 0)
    texts = [r.text for part in (splits.train, splits.validation, splits.test) for r in part]
    assert sorted(texts) == sorted(f"Order\n{d}" for d in _dialogs(20))
    one = tmp_path / "one.jsonl"
    one.write_text("".join(json.dumps({"id": i, "message": d}) + "\n" for i, d in enumerate(_dialogs(3))))
    assert [r.text for r in load_records(one)] == _dialogs(3)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"text": "hello"}) + "\n" + json.dumps({"body": "hi", "id": 2}) + "\n")
    with pytest.raises(DataError, match=r"line 2: no `text` key \(keys: body, id\)"):
        load_records(broken)


def test_detect_takes_the_text_columns_its_refusal_asks_for(tmp_path):
    """`detect` on a table with several text columns says how to name one, and that advice, followed, works."""
    path = tmp_path / "chats.csv"
    _write_table(path, ["agent", "customer"], [["Hello, how can I help?", d] for d in _dialogs(4)])
    refused = run_main("detect", str(path), "--policy", "phone", "--no-cache")
    assert refused.returncode == 2
    advice = refused.stderr.split("with ")[-1].strip()  # --set data.text_fields=[NAME]
    assert advice == "--set data.text_fields=[NAME]"
    out = tmp_path / "out.jsonl"
    r = run_main("detect", str(path), "--policy", "phone", "--no-cache", "--out", str(out),
                 *advice.replace("NAME", "customer").split(" ", 1))
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == _dialogs(4)
    r = run_main("detect", str(path), "--set", "training.epochs=2")
    assert r.returncode == 2 and "detect takes data.text_fields or data.label_field" in r.stderr


def test_a_parquet_table_with_a_named_column(tmp_path):
    path = tmp_path / "chats.parquet"
    pq.write_table(pa.table({"body": _dialogs(4), "subject": ["a", "b", "c", "d"]}), path)
    with pytest.raises(DataError, match="columns body, subject hold text"):
        load_records(path)
    assert [r.text for r in load_records(path, ["body"])] == _dialogs(4)


def test_a_csv_row_with_more_cells_than_the_header_is_refused(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("text\nhello,world\n")
    with pytest.raises(DataError, match="row 1 has more cells than the header's 1 columns"):
        load_records(path)


@pytest.mark.parametrize("text,expected", [
    ("first dialog line\nsecond line\n\nnext record\n\n\n", ["first dialog line\nsecond line", "next record"]),
    ("one\ntwo\nthree\n", ["one", "two", "three"]),
    ("\n\nalone\n", ["alone"]),
])
def test_plain_text_records_follow_the_blank_line_rule(tmp_path, text, expected):
    path = tmp_path / "notes.txt"
    path.write_text(text)
    assert [r.text for r in load_records(path)] == expected


def test_a_trial_on_a_csv_states_records_per_split_secrets_redacted_share_and_model(tmp_path):
    path = tmp_path / "chats.csv"
    _write_table(path, ["id", "message"], [[i, d] for i, d in enumerate(_dialogs(60))])
    out = tmp_path / "out"
    r = run_main("trial", "--data", str(path), "--out", str(out), "--set", "detector.policy=order_number",
                 "--set", "tokenizer.vocab_size=300", "--set", "training.max_steps=2", "--set", "data.max_length=64",
                 "--set", "evaluation.exposure=false", "--set", "evaluation.mia=false")
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = [s for s in r.stdout.splitlines() if s.startswith("data: ")]
    saved = json.loads((out / "result.json").read_text())
    share = saved["detector"]["redacted_token_fraction"]
    # 60 records, validation and test each round(0.1 * 60) = 6 held out; one order number per dialog.
    assert line == (f"data: 48 train / 6 validation / 6 test records; 48 secrets detected in 48 training records "
                    f"(policy order_number); redacted: {share:.1%} of training tokens; model: {out / 'model'}")
    assert (out / "model").is_dir() and 0 < share < 0.5


def test_a_redacted_trial_says_its_zero_epsilon_is_for_detected_secrets_only(tmp_path):
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.trial import run_trial
    from tests.conftest import small_trial_dict

    cfg = parse_model(TrialConfig, small_trial_dict(mechanism={"name": "redacted"}, training={"max_steps": 1}))
    line = run_trial(cfg, None).summary_line()
    assert "ε=0 (SDP" in line and ": epsilon_s = 0 for detected secrets only; none for missed;" in line
