"""`LMData` pickles as compact arrays (a sweep's prepared data in Ray's object store) and unpickles exactly."""

from __future__ import annotations

import pickle

import pytest
import torch

from sdp_core.tensors import LMData


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
    again.input_ids[0, 0] += 1  # tensors in memory of their own: writable, and not the original's
    assert not torch.equal(again.input_ids, atdp.input_ids)


def test_a_pickled_lmdata_takes_about_4_bytes_a_token_where_the_vocabulary_fits_uint16():
    data = lm_data(50_257, rows=256, length=192)
    tokens = data.input_ids.numel()
    raw = sum(t.numel() * t.element_size() for t in (data.input_ids, data.weights, data.sensitive, data.record_index))
    assert raw / tokens > 13
    assert len(pickle.dumps(data, protocol=5)) / tokens < 4.2
