"""CustomerSim gold spans, loaders round trip, canary insertion."""

from __future__ import annotations

import re

import pytest

from sdp_core.config.canary import CanaryFormat
from sdp_core.data.canaries import insert_canaries
from sdp_core.data.customersim import customersim_splits, generate_customersim
from sdp_core.data.loaders import load_records, save_jsonl, save_parquet
from sdp_core.data.records import Record, Span
from sdp_core.errors import DataError, UserError

FORMATS = {
    "phone": r"(\(\d{3}\) |\d{3}[-.])\d{3}[-.]\d{4}",
    "order_number": r"\d{3}-\d{5}-\d{4}",
    "tracking_number": r"[A-Z0-9]{10}",
    "name": r"[A-Z][a-zA-Z'-]+ [A-Z][a-zA-Z'-]+",
    "address": r"\d+ .+, .+, [A-Z]{2} \d{5}",
}


def test_every_gold_span_is_exactly_its_value():
    records = generate_customersim(500, seed=3)
    labels = set()
    for r in records:
        assert r.spans, "every dialog has secrets"
        for s in r.spans:
            value = r.text[s.start : s.end]
            labels.add(s.label)
            assert re.fullmatch(FORMATS[s.label], value), (s.label, value)
            assert value == value.strip() and "\n" not in value
        # the name is the customer's answer to the name question
        assert {s.label for s in r.spans} >= {"name", "tracking_number"}
    assert labels == set(FORMATS)


def test_generator_is_seeded_and_splits_are_independent():
    assert generate_customersim(20, 1) == generate_customersim(20, 1)
    assert generate_customersim(20, 1) != generate_customersim(20, 2)
    a, b = customersim_splits(50, 10, 10, seed=0), customersim_splits(80, 10, 10, seed=0)
    assert a.validation == b.validation and a.test == b.test


@pytest.mark.parametrize("saver,suffix", [(save_jsonl, ".jsonl"), (save_parquet, ".parquet")])
def test_loaders_round_trip(tmp_path, saver, suffix):
    records = generate_customersim(30, 0) + [Record("no spans here", None)]
    path = saver(records, tmp_path / f"data{suffix}")
    assert load_records(path) == records


def test_text_loader_lines_and_blocks(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("first record\nsecond record\n\n")
    assert [r.text for r in load_records(lines)] == ["first record", "second record"]
    blocks = tmp_path / "blocks.txt"
    blocks.write_text("SYS: a\nUSR: b\n\nSYS: c\nUSR: d\n")
    assert [r.text for r in load_records(blocks)] == ["SYS: a\nUSR: b", "SYS: c\nUSR: d"]


def test_jsonl_is_read_a_line_at_a_time_into_the_records_each_line_holds(tmp_path):
    """A JSONL file's records are its lines' objects as `json.loads` reads them (blank lines skipped, CRLF too), held
    as arrays; a byte that is not UTF-8 on a later line is named by its offset in the file, as decoding the whole file
    names it."""
    import json

    from sdp_core.data.loaders import load_jsonl
    from sdp_core.data.records import RecordColumns

    lines = [{"text": "a café ☕", "spans": [{"start": 2, "end": 6, "label": "X"}]}, {"text": "", "label": 3},
             {"text": "line\u2028inside"}, {"text": "b", "spans": []}]
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(json.dumps(o).encode() + end for o, end in zip(lines, [b"\n", b"\r\n\n", b"\n", b""])))
    records = load_jsonl(path)
    expected = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    assert isinstance(records, RecordColumns) and [r.to_dict() for r in records] == [
        {**o, **({"spans": [{**s, "label": s.get("label", "SECRET")} for s in o["spans"]]} if "spans" in o else {})}
        for o in expected]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b'{"text": "ok"}\n{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(UnicodeDecodeError) as reference:
        broken.read_bytes().decode("utf-8")
    with pytest.raises(DataError, match=f"invalid UTF-8 at byte {reference.value.start}$"):
        load_jsonl(broken)


@pytest.mark.parametrize("content,problem", [
    (b"", "empty"),
    (b"\x00\x01\x02binary", "binary"),
    (b"\xff\xfe caf\xe9", "UTF-8"),
    (b'{"text": 3}\n', "must be a string"),
    (b'{"text": "abc", "spans": [{"start": 1, "end": 9}]}\n', "outside the text"),
    (b'{"text": "abcdef", "spans": [{"start": 0, "end": 3}, {"start": 2, "end": 4}]}\n', "overlap"),
    (b'{"text": "abc"\n', "invalid JSON"),
    (b'{"text": "abc", "label": -1}\n', "non-negative integer class id"),
    (b'{"text": "", "label": 9223372036854775808}\n', "below 2\\*\\*63"),  # 2**63: no int64 holds it
])
def test_bad_data_is_one_clear_error(tmp_path, content, problem):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError, match=problem) as e:
        load_records(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_each_canary_is_inserted_n_times_with_probability_one_half():
    records = generate_customersim(200, 0)
    out, plan = insert_canaries(records, "My ID is {dddd}", count=40, repeats=3, seed=7)
    assert len(plan.secrets) == len(set(plan.secrets)) == 40 and 0 < sum(plan.inserted) < 40
    for k, secret in enumerate(plan.secrets):  # members n times, held-out canaries never
        assert sum(r.text.count(f"My ID is {secret}") for r in out) == (3 if plan.inserted[k] else 0)
    assert len({i.record for i in plan.insertions}) == 3 * sum(plan.inserted)  # n copies land in n distinct records
    for r_old, r_new in zip(records, out):  # every gold span still points at its value after the shift
        old = sorted(r_old.text[s.start : s.end] for s in r_old.spans)
        new = sorted(r_new.text[s.start : s.end] for s in r_new.spans if s.label != "canary")
        assert old == new
    for ins in plan.insertions:
        assert plan.inserted[ins.canary] and out[ins.record].text[ins.span.start : ins.span.end] == plan.secrets[ins.canary]
    summary = plan.summary()
    assert summary["space_size"] == 10**4 and summary["count"] == 40 and summary["inserted"] == sum(plan.inserted)
    assert summary["repeats"] == 3 and not any(s in str(summary) for s in plan.secrets)
    # Inclusion is a fair coin per canary (the one-run audit's design), whatever the data seed.
    flags = [f for seed in range(50) for f in insert_canaries(records, "ID {dddd}", 40, 1, seed)[1].inserted]
    assert 0.45 < sum(flags) / len(flags) < 0.55


def test_a_canary_follows_the_format_of_the_data():
    """A line of the answering speaker in dialogs (tags read from the data), a sentence after a space in prose."""
    for dialogs, tag in ((generate_customersim(50, 0), "USR:"),
                         ([Record("AGENT: Hello.\nCLIENT: Hi, where is my parcel?\nAGENT: On its way.")] * 30, "CLIENT:")):
        out, plan = insert_canaries(dialogs, "My ID is {dddd}", count=10, repeats=2, seed=1)
        assert plan.dialog and plan.context == tag + " " and plan.summary()["inserted_as"] == f"dialog line after {tag!r}"
        for ins in plan.insertions:
            assert f"{tag} My ID is {plan.secrets[ins.canary]}" in out[ins.record].text.split("\n")
    text = "The parcel came late. It was wet! We opened it anyway."
    prose = [Record(text, (Span(4, 10, "thing"),))] * 30
    out, plan = insert_canaries(prose, "My ID is {dddd}", count=10, repeats=2, seed=1)
    assert not plan.dialog and plan.context == " " and plan.summary()["inserted_as"] == "sentence"
    places = set()
    for ins in plan.insertions:
        new, sentence = out[ins.record].text, f"My ID is {plan.secrets[ins.canary]}."
        at = new.index(sentence)
        assert new[at - 1] == " " and new[: at - 1].endswith((".", "!"))  # after a sentence end and a space
        assert new[:at] + new[at + len(sentence) + 1 :] == text or new[: at - 1] == text  # inside, or appended
        assert [new[s.start : s.end] for s in out[ins.record].spans if s.label == "thing"] == ["parcel"]
        places.add(at)
    assert len(places) > 1


def test_canary_format_needs_one_placeholder():
    assert CanaryFormat.parse("PIN {dddd}, code {AA}".replace(", code {AA}", "")).space_size == 10**4
    with pytest.raises(UserError, match="placeholder"):
        CanaryFormat.parse("My ID is 123456")
    with pytest.raises(UserError, match="placeholder"):
        CanaryFormat.parse("{dd} and {dd}")


def test_too_many_canaries_for_the_data():
    with pytest.raises(UserError, match="need 20"):
        insert_canaries(generate_customersim(10, 0), "ID {dd}", count=2, repeats=10, seed=0)


def test_business_messages_are_the_same_in_every_process():
    """A seed gives the same business messages whatever the process's hash seed (Faker's it_IT cities come from a
    set, in an order that changed with it)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("from sdp_core.data.business import generate_business\n"
            "print(repr([r.text for r in generate_business(60, 0, 'heldout')]))")
    texts = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(texts) == 1


def test_splits_pickle_as_columns_and_come_back_record_for_record():
    """A sweep's records travel as arrays (`Splits.__reduce__`): the texts (any Unicode, lone surrogates included),
    gold spans or none, empty ones, class labels and meta come back as they were, and the arrays are out of band
    (what Ray's object store keeps as they are), not in the pickle's own bytes."""
    import pickle

    from sdp_core.data.records import Splits

    train = customersim_splits(40, 2, 2, seed=3).train
    odd = [Record("naïve café ☕ \udcff Jane", (Span(12, 16, "PERSON"), Span(0, 5, "x")), 2, {"locale": "fr"}),
           Record("", None), Record("no secret", ()), Record("z", None, 0)]
    splits = Splits([*train, *odd], odd[:2], [])
    buffers: list = []
    payload = pickle.dumps(splits, protocol=5, buffer_callback=buffers.append)
    again = pickle.loads(payload, buffers=buffers)
    for mine, theirs in zip((splits.train, splits.validation, splits.test), (again.train, again.validation, again.test)):
        assert [(r.text, r.spans, r.label, r.meta) for r in mine] == [(r.text, r.spans, r.label, r.meta) for r in theirs]
    assert train[0].text.encode() not in payload and sum(memoryview(b).nbytes for b in buffers) > sum(
        len(r.text) for r in train)


def test_span_columns_read_as_the_lists_they_were_made_from(monkeypatch):
    """A corpus's detections are kept as arrays (`SpanColumns`) and read as lists of spans: every read — an index
    (negative too), a slice, iteration across chunk boundaries, `take` with repeats, `replaced`, `concatenated` and
    a pickle — gives the plain lists they stand for (None read as empty, `lists` keeping it)."""
    import pickle
    import random

    import numpy as np

    import sdp_core.data.records as records
    from sdp_core.data.records import concatenated, span_columns

    monkeypatch.setattr(records, "SPAN_CHUNK", 7)  # several chunks in 60 lists
    rng = random.Random(0)

    def some() -> list[Span] | None:
        return None if rng.random() < 0.1 else [
            Span(rng.randrange(99), rng.randrange(99, 199), rng.choice("ABCD")) for _ in range(rng.randrange(4))]

    lists = [some() for _ in range(60)]
    plain = [spans or [] for spans in lists]
    columns = span_columns(iter(lists))
    assert list(columns) == plain and len(columns) == 60 and columns.total == sum(map(len, plain))
    assert [columns[i] for i in range(-60, 60)] == plain + plain
    assert columns.lists() == [None if spans is None else tuple(spans) for spans in lists]
    assert list(columns[5:40:3]) == plain[5:40:3]
    at = np.array([3, 3, 59, 0, 17])
    assert list(columns.take(at)) == [plain[i] for i in at]
    more = [some() for _ in range(9)]
    assert list(concatenated([columns, span_columns(more)])) == plain + [spans or [] for spans in more]
    new = {0: [Span(1, 2, "NEW")], 10: [], 59: [Span(5, 6, "A"), Span(7, 9, "Q")]}
    assert list(columns.replaced(new)) == [new.get(i, spans) for i, spans in enumerate(plain)]
    again = pickle.loads(pickle.dumps(columns))
    assert list(again) == plain and again.lists() == columns.lists()
    assert columns == lists and columns != plain[:-1] and span_columns(columns) is columns
    with pytest.raises(IndexError):
        columns[60]


@pytest.mark.parametrize("chunk", [4096, 3])  # one chunk; several, the made and taken records across their edges
def test_record_columns_read_as_the_records_they_were_made_from(monkeypatch, chunk):
    """A prepared split is held as arrays (`RecordColumns`), made from a stream of records read once, and read as
    records: an index (negative too), a slice, `take` with repeats, `replaced_records`, its texts and a pickle give
    the records themselves (any Unicode, gold spans or none, labels, meta)."""
    import pickle

    import numpy as np

    import sdp_core.data.records as module
    from sdp_core.data.records import record_columns, replaced_records

    monkeypatch.setattr(module, "SPAN_CHUNK", chunk)
    records = [*customersim_splits(12, 2, 2, seed=5).train,
               Record("naïve café ☕ \udcff Jane", (Span(19, 23, "PERSON"),), 2, {"locale": "fr"}), Record("", None),
               Record("no secret", ()), Record("z", None, 0)]
    columns = record_columns(iter(records))  # a one-pass stream, as a loader gives
    new = {0: Record("first ☕", (Span(0, 5, "X"),), 1, {"k": 1}), 14: Record("", None)}
    assert list(replaced_records(columns, new)) == [new.get(i, r) for i, r in enumerate(records)]
    assert list(columns.take(np.arange(len(records))[::-1])) == records[::-1]
    assert list(columns) == records and [columns[i] for i in range(-len(records), 0)] == records
    assert list(columns[3:15:4]) == records[3:15:4] and list(columns.take(np.array([13, 0, 13]))) == [
        records[13], records[0], records[13]]
    assert list(columns.texts()) == [r.text for r in records] and columns.texts()[-1] == "z"
    assert list(pickle.loads(pickle.dumps(columns))) == records and record_columns(columns) is columns
    assert columns == records and columns != records[1:]
