"""Detection cache: once per dataset × policy version, Parquet, atomic."""

from __future__ import annotations

from typing import Sequence

import pytest

from sdp_core.config import DetectorConfig
from sdp_core.data.records import Record, Span, SpanColumns, span_columns
from sdp_core.detectors import Policy, detect_records, get_policy
from sdp_core.detectors import spacy_tiers
from sdp_core.detectors.cache import CACHE_ENV, default_cache_dir, detection_runner
from sdp_core.errors import DataError


class Counting(Policy):
    def __init__(self, inner: Policy):
        self.inner, self.calls, self.texts = inner, 0, []
        self.name, self.version = inner.name, inner.version

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        self.calls += 1
        self.texts += texts
        return self.inner.detect(texts)


TEXTS = ["call 555-123-4567 now", "nothing here", "", "order 535-13933-2871 and 555.123.4567"]


def test_second_run_makes_no_policy_calls(tmp_path):
    policy = Counting(get_policy("phone,order_number"))
    first = detect_records([Record(t) for t in TEXTS], policy, tmp_path)
    assert policy.calls == 1
    second = detect_records(TEXTS, policy, tmp_path)  # plain strings are accepted too
    assert policy.calls == 1 and second == first
    assert first[1] == first[2] == [] and len(first[3]) == 2
    assert [p.suffix for p in tmp_path.iterdir()] == [".parquet"]  # no temp files left behind


def test_each_distinct_text_is_detected_once(tmp_path):
    policy = Counting(get_policy("phone"))
    texts = ["call 555-123-4567", "hi", "call 555-123-4567", "hi", "call 555-123-4567"]
    detected = detect_records(texts, policy, tmp_path)
    assert sorted(policy.texts) == ["call 555-123-4567", "hi"]
    assert detected == [get_policy("phone").detect([t])[0] for t in texts] and detected[0]
    detected[0].clear()  # records with the same text do not share one list
    assert detected[2]


def test_spacy_is_not_touched_when_warm(tmp_path, monkeypatch):
    loads = []
    real = spacy_tiers.load_spacy
    monkeypatch.setattr(spacy_tiers, "load_spacy", lambda name: loads.append(name) or real(name))
    texts = ["Barack Obama visited Paris.", "Nothing to see."]
    first = detect_records(texts, get_policy("low_entity"), tmp_path)
    assert len(loads) == 1
    assert detect_records(texts, get_policy("low_entity"), tmp_path) == first
    assert len(loads) == 1


def test_other_data_or_other_version_is_a_miss(tmp_path):
    policy = Counting(get_policy("digits"))
    detect_records(["a 1"], policy, tmp_path)
    detect_records(["a 2"], policy, tmp_path)
    detect_records(["a 1", ""], policy, tmp_path)
    assert policy.calls == 3
    other = Counting(get_policy("digits", DetectorConfig(patterns={"digits": r"\d{2,}"})))
    assert detect_records(["a 1"], other, tmp_path) == [[]] and other.calls == 1
    detect_records(["a 1"], policy, tmp_path, use_cache=False)
    assert policy.calls == 4


def test_damaged_entry_is_recomputed(tmp_path):
    policy = Counting(get_policy("digits"))
    detect_records(["a 1"], policy, tmp_path)
    [entry] = tmp_path.iterdir()
    entry.write_bytes(b"not parquet")
    assert detect_records(["a 1"], policy, tmp_path) == [[Span(2, 3, "digits")]]
    assert policy.calls == 2


def test_cache_location(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "root"))
    assert default_cache_dir() == tmp_path / "root" / "detections"
    detect_records(["a 1"], get_policy("digits"))
    assert len(list((tmp_path / "root" / "detections").iterdir())) == 1
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # the default does not depend on the working directory (Ray trials change it)
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "sdp-sweep" / "detections"


def test_non_text_record_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="record 1 is not text"):
        detect_records(["ok", 42], get_policy("digits"), tmp_path)


def test_a_runner_detects_each_distinct_miss_once_and_the_cache_keeps_its_result(tmp_path):
    """Inside `detection_runner` a miss goes to the runner (a sweep's: a Ray Data pipeline), distinct texts only."""
    asked: list[list[str]] = []

    def runner(policy: Policy, texts: Sequence[str], progress: bool) -> SpanColumns:
        asked.append(list(texts))
        return span_columns([[Span(0, len(text), "runner")] for text in texts])

    texts = ["b", "a 1", "b", "ccc", "a 1"]
    with detection_runner(runner):
        detected = detect_records(texts, get_policy("digits"), tmp_path)
    assert asked == [["b", "a 1", "ccc"]]  # each distinct text once, in the order it first comes
    assert detected == [[Span(0, len(text), "runner")] for text in texts]  # each text's own spans, repeats included
    assert detect_records(texts, get_policy("digits"), tmp_path) == detected  # a hit: no runner, no detection


def test_an_entry_read_a_few_spans_at_a_time_gives_back_what_was_detected(tmp_path, monkeypatch):
    """A cache entry is read in batches, each with a label dictionary of its own: the spans come back as detected,
    labels included, whatever the batch size."""
    import sdp_core.detectors.cache as cache

    def runner(policy: Policy, texts: Sequence[str], progress: bool) -> SpanColumns:
        return span_columns([[Span(k, k + 1, label) for k, label in enumerate(text.split())] for text in texts])

    texts = ["a b", "", "c", "b d a e", "e", "f a"]
    with detection_runner(runner):
        detected = detect_records(texts, get_policy("digits"), tmp_path)
    monkeypatch.setattr(cache, "READ_ROWS", 2)  # batches that start with labels the first never saw
    again = detect_records(texts, get_policy("digits"), tmp_path)  # a hit, read back from the entry
    assert again == detected == [[Span(k, k + 1, label) for k, label in enumerate(t.split())] for t in texts]


@pytest.mark.parametrize("name", ["general", "strict", "conservative", "customersim"])
def test_every_named_policy_pickles_into_the_detection_pool(name):
    """The sweep's pipeline sends the policy to its actors: a policy holding a module (say, the library validators
    it imported) would fail the sweep's preparation."""
    import pickle

    policy = get_policy(name)
    assert pickle.loads(pickle.dumps(policy)).version == policy.version
