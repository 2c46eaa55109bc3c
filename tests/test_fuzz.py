"""Property-based fuzzing of every loader: arbitrary input gives a valid result or a one-line UserError, never
another exception type."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdp_core.config import apply_overrides, parse_model
from sdp_core.config.loading import load_trial_config
from sdp_core.config.sweep import SearchSpace, SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.data.loaders import load_records
from sdp_core.data.records import Record
from sdp_core.errors import UserError

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
TMP = Path(tempfile.mkdtemp(prefix="sdp-fuzz-"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Records that look almost right: a text, and spans / labels of any shape.
span = st.fixed_dictionaries({"start": st.integers(-3, 40) | st.text(max_size=2) | st.none(),
                              "end": st.integers(-3, 40) | st.floats(allow_nan=False)},
                             optional={"label": json_values})
record_like = st.fixed_dictionaries({"text": st.text(max_size=40) | json_values},
                                    optional={"spans": st.lists(span, max_size=3) | json_values,
                                              "label": st.integers() | json_values})
TRIAL_KEYS = ["name", "seed", "data", "detector", "tokenizer", "model", "mechanism", "privacy", "training",
              "evaluation", "source", "n_train", "path", "target_epsilon", "delta", "policy", "patterns", "canaries",
              "format", "count", "arch", "batch_size", "epochs", "max_steps", "kind", "parameters", "type", "low",
              "high", "values", "search_space", "mechanisms", "objectives", "base"]
config_like = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=True) | st.text(max_size=12)
    | st.sampled_from(["dpsgd", "jft", "file", "lstm", "gpt2", "roberta", "choice", "uniform", "phone"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(TRIAL_KEYS) | st.text(max_size=6),
                                                                inner, max_size=5),
    max_leaves=20,
)


def _one_line(e: UserError) -> None:
    s = str(e)
    assert s and "\n" not in s and "\r" not in s, repr(s)


def _write(name: str, data: bytes) -> Path:
    p = TMP / name
    p.write_bytes(data)
    return p


def _check_records(path: Path) -> None:
    try:
        records = load_records(path)
    except UserError as e:
        _one_line(e)
        return
    assert records and all(isinstance(r, Record) and isinstance(r.text, str) for r in records)
    for r in records:
        for s in r.spans or ():
            assert 0 <= s.start < s.end <= len(r.text)


@FUZZ
@given(st.binary(max_size=300))
def test_jsonl_loader_arbitrary_bytes(data):
    _check_records(_write("bytes.jsonl", data))


@FUZZ
@given(st.lists(record_like | json_values, min_size=0, max_size=4))
def test_jsonl_loader_arbitrary_json(objs):
    _check_records(_write("json.jsonl", "\n".join(json.dumps(o) for o in objs).encode()))


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_text_loader(data):
    _check_records(_write("plain.txt", data))


@FUZZ
@given(config_like)
def test_trial_config_arbitrary_dicts(data):
    for cls in (TrialConfig, SearchSpace, SweepConfig):
        try:
            parse_model(cls, data, "fuzz.yaml")
        except UserError as e:
            _one_line(e)


@FUZZ
@given(st.text(max_size=200) | config_like.map(lambda d: yaml.safe_dump(d)))
def test_trial_config_arbitrary_yaml(text):
    p = TMP / "trial.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        cfg = load_trial_config(p)
    except UserError as e:
        _one_line(e)
    else:
        assert isinstance(cfg, TrialConfig)


@FUZZ
@given(st.lists(st.text(max_size=40) | st.builds(lambda k, v: f"{k}={v}",
                                                 st.sampled_from(["privacy.delta", "training.batch_size", "data",
                                                                  "a.b.c", "", ".", "x..y", "mechanism.name"]),
                                                 st.text(max_size=20)), max_size=4))
def test_overrides(assignments):
    try:
        data = apply_overrides({"privacy": {"delta": 1e-5}, "data": "scalar"}, assignments)
        parse_model(TrialConfig, data, "--set")
    except UserError as e:
        _one_line(e)
