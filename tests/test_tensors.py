"""`LMData` pickles as compact arrays (a sweep's prepared data in Ray's object store) and unpickles exactly; out of
band (as Ray keeps them), its rows come back as views of the buffers, which nothing a trial does writes."""

from __future__ import annotations

import hashlib
import pickle
import warnings

import numpy as np
import pytest
import torch

from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.mechanisms import MECHANISMS
from sdp_core.preparation import prepare_trial_data
from sdp_core.tensors import LMData
from sdp_core.trial import run_trial
from tests.conftest import small_trial_dict


def lm_data(vocab: int, rows: int = 64, length: int = 48) -> LMData:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    ids[:, -8:] = 0  # padding
    weights = (ids != 0).float()
    weights[:, 0] = 0.0
    return LMData(ids, weights, torch.rand(rows, length, generator=g) < 0.1, torch.arange(rows) // 2)  # two rows a record


def assert_same(a: LMData, b: LMData) -> None:
    for name in ("input_ids", "weights", "sensitive", "record_index", "labels"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or (x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)), name


@pytest.mark.parametrize("vocab", [600, 50_257, 100_000])
def test_a_pickled_lmdata_is_the_same_tensors(vocab):
    data = lm_data(vocab)
    assert_same(pickle.loads(pickle.dumps(data, protocol=5)), data)


def test_weights_that_are_not_0_or_1_and_labels_come_back_exactly():
    data = lm_data(600)
    atdp = LMData(data.input_ids, data.weights * 0.3, data.sensitive, data.record_index, torch.arange(64) % 3)
    again = pickle.loads(pickle.dumps(atdp))
    assert_same(again, atdp)
    again.input_ids[0, 0] += 1  # pickled in band: tensors in memory of their own, writable, not the original's
    assert not torch.equal(again.input_ids, atdp.input_ids)


def test_a_pickled_lmdata_takes_about_4_bytes_a_token_where_the_vocabulary_fits_uint16():
    data = lm_data(50_257, rows=256, length=192)
    tokens = data.input_ids.numel()
    raw = sum(t.numel() * t.element_size() for t in (data.input_ids, data.weights, data.sensitive, data.record_index))
    assert raw / tokens > 13
    assert len(pickle.dumps(data, protocol=5)) / tokens < 4.2


def out_of_band(obj: object) -> tuple[bytes, list[bytearray]]:
    """`obj` pickled as Ray pickles what it stores (protocol 5): the payload, and its arrays' buffers apart."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return payload, [bytearray(b.raw()) for b in buffers]


def loaded(payload: bytes, memory: list[bytearray]) -> object:
    """What a Ray worker gets: unpickled over the buffers, handed out read-only as Ray's object store does."""
    return pickle.loads(payload, buffers=[memoryview(m).toreadonly() for m in memory])


def compact(data: LMData) -> LMData:
    """`data` as encoding leaves a dataset: uint16 ids, bool weights."""
    return LMData(data.input_ids.to(torch.uint16), data.weights.bool(), data.sensitive, data.record_index)


def test_rows_unpickled_out_of_band_are_the_same_tensors_over_the_buffers_without_a_copy():
    data = compact(lm_data(50_257))
    payload, memory = out_of_band(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a warning that the buffers are read-only
        again = loaded(payload, memory)
    assert isinstance(again, LMData)
    assert_same(again, data)
    for name in ("input_ids", "weights", "sensitive"):
        rows = getattr(again, name).numpy()
        assert any(np.shares_memory(rows, np.frombuffer(m, np.uint8)) for m in memory), name
    assert sum(map(len, memory)) < 1.1 * sum(getattr(data, n).numpy().nbytes for n in ("input_ids", "weights",
                                                                                     "sensitive", "record_index"))


def test_a_trial_and_every_mechanism_read_the_rows_in_the_object_store_and_never_write_them():
    """Every trial on a node reads the same memory: what one wrote, the others would train on."""
    cfg = lambda name, **sections: parse_model(  # noqa: E731
        TrialConfig, small_trial_dict(mechanism={"name": name}, training={"max_steps": 2}, **sections))
    payload, memory = out_of_band(prepare_trial_data(cfg("atdp")))
    digests = [hashlib.sha256(m).digest() for m in memory]
    prepared = loaded(payload, memory)
    own = {"sdpsgd": {"model": {"arch": "lstm"}},  # a recurrent model; CRT's second policy a regex one (not spaCy's)
           "crt": {"detector": {"conservative_policy": "phone,order_number,tracking_number,email"}}}
    for name, mechanism in MECHANISMS.items():  # each one's plan: what reads whole rows and sets weights
        mechanism(prepared.data, cfg(name, **own.get(name, {})))
    # ATDP trains on weights of its own; the membership attack scores the training rows
    row = run_trial(cfg("atdp", evaluation={"mia": True}), prepared=prepared)
    assert row.state == "finished" and "membership_inference" in row.attacks
    assert [hashlib.sha256(m).digest() for m in memory] == digests
