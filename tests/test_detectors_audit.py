"""Sampling audit: export, a reviewer's marks, m̃ with a Wilson interval."""

from __future__ import annotations

import json

import pytest

from sdp_core.detectors import export_audit, get_policy, missing_rate, read_audit, wilson_interval
from sdp_core.errors import DataError

TEXTS = [f"Customer {i} called from 555-123-{i:04d} about order {i}." for i in range(40)]


def test_round_trip_and_missing_rate(tmp_path):
    detected = get_policy("phone").detect(TEXTS)
    path = tmp_path / "audit.jsonl"
    indices = export_audit(TEXTS, detected, path, n=10, seed=3)
    assert indices == export_audit(TEXTS, detected, tmp_path / "again.jsonl", n=10, seed=3)  # seeded
    assert len(indices) == 10 and indices == sorted(set(indices))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["missed"] == [] and "<mask>" in r["redacted"] and "555-123" not in r["redacted"] for r in rows)

    # the reviewer marks the customer number (missed by the phone policy) in every record, by string,
    # plus the already-detected phone number in one record (already detected: not counted as missed)
    for r in rows:
        r["missed"] = [r["text"].split()[1]]
    rows[0]["missed"].append({"start": rows[0]["spans"][0]["start"], "end": rows[0]["spans"][0]["end"]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    items = read_audit(path)
    assert [it.index for it in items] == indices and items[0].text == TEXTS[indices[0]]
    rate = missing_rate(items)
    # each record: Customer N called from PHONE(5 tokens) about order N . -> 13 word tokens; "N" occurs twice
    assert rate.n == 13 * 10 and rate.k == 2 * 10
    assert (rate.low, rate.high) == pytest.approx(wilson_interval(20, 130))
    assert rate.low < rate.value < rate.high


def test_nothing_missed_gives_zero_with_a_nonzero_upper_bound(tmp_path):
    path = tmp_path / "a.jsonl"
    export_audit(TEXTS, get_policy("digits").detect(TEXTS), path, n=5)
    rate = missing_rate(read_audit(path))
    assert rate.k == 0 and rate.low == 0.0 and 0 < rate.high < 0.1


@pytest.mark.parametrize(
    "line,message",
    [
        ("{not json", "invalid JSON"),
        ('{"text": "abc"}', "needs `text` and `spans`"),
        ('{"text": "abc", "spans": [], "missed": ["zzz"]}', "does not occur"),
        ('{"text": "abc", "spans": [], "missed": [{"start": 2, "end": 9}]}', "outside the text"),
        ('{"text": "abc", "spans": [], "missed": [3]}', "string or {start, end}"),
    ],
)
def test_bad_audit_files_are_data_errors(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DataError, match=message) as e:
        read_audit(path)
    assert "line 1" in str(e.value) and "zzz" not in str(e.value)  # never echo the marked secret
