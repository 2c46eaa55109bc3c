"""`LMData` pickles as compact arrays (a sweep's prepared data in Ray's object store) and unpickles exactly; out of
band (as Ray keeps them), its rows come back as views of the buffers, which nothing a trial does writes."""

from __future__ import annotations

import hashlib
import pickle
import warnings

import numpy as np
import pytest
import torch

from sdp_core import tensors
from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.mechanisms import MECHANISMS
from sdp_core.mechanisms.atdp import ATDPWeights
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


@pytest.mark.parametrize("labelled", [False, True])
def test_a_batch_copied_in_pieces_is_the_batch_made_by_hand(labelled):
    """`subset` with `piece_rows` (a trial reading shared rows, `train.shared_pages`): the rows in the order asked,
    a mechanism's weighting of them, LM rows cut after the last column any of them predicts; `after_piece` once a
    piece."""
    data = lm_data(600, rows=40)
    labels = torch.arange(40) % 3 if labelled else None
    data = LMData(data.input_ids, data.weights, data.sensitive, data.record_index, labels)
    weighting = ATDPWeights(0.25, (5, 7))
    rows = torch.tensor([39, 0, 17, 3, 3, 22, 8])  # any order, one row twice
    pieces: list[int] = []
    batch = data.with_weighting(weighting).subset(rows, 3, lambda: pieces.append(1))
    weights = weighting(data.input_ids[rows], data.sensitive[rows], data.weights[rows] > 0)
    end = 48 if labelled else int(torch.nonzero(weights.sum(0)).max()) + 1
    assert end == 48 or 30 < end < 48
    assert_same(batch, LMData(data.input_ids[rows][:, :end], weights[:, :end], data.sensitive[rows][:, :end],
                              data.record_index[rows], None if labels is None else labels[rows]))
    assert len(pieces) == 3


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


def runs(flags: list[bool]) -> int:
    """Maximal runs of True in `flags`, counted one position at a time."""
    return sum(1 for t, f in enumerate(flags) if f and (t == 0 or not flags[t - 1]))


def test_row_counts_read_block_by_block_are_the_counts_of_every_row(monkeypatch):
    monkeypatch.setattr(tensors, "BLOCK_ROWS", 7)  # 64 rows: ten blocks, the last one short
    data = lm_data(600)
    counts = tensors.row_counts(data)
    valid = (data.weights > 0).tolist()
    flagged = [[s and v for s, v in zip(srow, vrow)] for srow, vrow in zip(data.sensitive.tolist(), valid)]
    assert counts.valid == sum(map(sum, valid)) and counts.flagged == sum(map(sum, flagged))
    assert counts.flagged_runs == sum(map(runs, flagged)) > 0


CALLS: list[int] = []


def counted_statistic(rows: LMData) -> int:
    CALLS.append(1)
    return int(rows.input_ids.sum())


def test_a_statistic_is_computed_once_and_travels_with_the_rows_but_not_to_other_rows():
    data = lm_data(600)
    CALLS.clear()
    assert data.statistic(counted_statistic) == data.statistic(counted_statistic) == int(data.input_ids.sum())
    again = pickle.loads(pickle.dumps(data, protocol=5))  # as a sweep's trial reads its preparation's rows
    assert again.statistic(counted_statistic) == int(data.input_ids.sum()) and len(CALLS) == 1
    other = data.with_weights(torch.zeros_like(data.weights))
    assert other.statistic(counted_statistic) == int(data.input_ids.sum()) and len(CALLS) == 2


def test_atdp_weights_of_a_batch_are_those_of_every_row_computed_token_by_token():
    data = compact(lm_data(600))
    stored = data.weights.clone()
    function = (5, 17, 300)
    weighted = data.with_weighting(ATDPWeights(0.25, function))
    expected = torch.tensor([[(1.0 if s or i in function else 0.25) if w else 0.0
                              for i, s, w in zip(*row)] for row in zip(data.input_ids.tolist(),
                                                                       data.sensitive.tolist(), data.weights.tolist())])
    assert torch.equal(weighted.weights, expected)  # read whole: computed for every row
    assert torch.equal(weighted.valid, data.valid) and weighted.records == data.records
    assert weighted.statistic(tensors.row_counts) == tensors.row_counts(data)  # the positions read are the rows'
    for rows in ([3, 0, 41], range(64), []):
        batch, reference = weighted.subset(rows), data.with_weights(expected).subset(rows)
        assert_same(batch, reference)
        assert batch.weighting is None
    assert_same(pickle.loads(pickle.dumps(weighted)), weighted)
    assert data.weights.dtype == torch.bool and torch.equal(data.weights, stored)  # the rows' own weights untouched


def test_row_groups_number_the_records_in_order_and_are_read_over_the_buffers():
    index = torch.tensor([7, 7, 2, 9, 2, 40, 9])
    data = LMData(torch.ones(7, 4, dtype=torch.uint16), torch.ones(7, 4, dtype=torch.bool),
                  torch.zeros(7, 4, dtype=torch.bool), index)
    numbers = {r: i for i, r in enumerate(sorted(set(index.tolist())))}
    assert data.groups.tolist() == [numbers[r] for r in index.tolist()] and data.records == 4
    payload, memory = out_of_band(data)
    again = loaded(payload, memory)
    assert isinstance(again, LMData)
    assert again.groups.dtype == torch.int32 and torch.equal(again.groups, data.groups)
    assert any(again.groups.data_ptr() == np.frombuffer(m, dtype=np.uint8).ctypes.data for m in memory)


def scaled_sum(rows: LMData, scale: int) -> int:
    CALLS.append(scale)
    return scale * int(rows.input_ids.sum())


def test_a_statistic_with_arguments_is_computed_once_for_each_of_them():
    data = lm_data(600)
    CALLS.clear()
    total = int(data.input_ids.sum())
    assert [data.statistic(scaled_sum, s) for s in (1, 2, 1, 2)] == [total, 2 * total, total, 2 * total]
    assert CALLS == [1, 2]


def split_into_blocks(data: LMData, ends: list[int]) -> LMData:
    """`data`'s rows joined from blocks that end at `ends`, each block its own tensors (copies)."""
    starts = [0, *ends[:-1]]
    return LMData.joined([LMData(*(None if t is None else t[a:b].clone() for t in data.stored()))
                          for a, b in zip(starts, ends)])


@pytest.mark.parametrize("labelled", [False, True])
def test_rows_joined_from_blocks_read_as_the_rows_they_were_cut_from(monkeypatch, labelled):
    """Joined rows (a sweep's encoding, block by block) are never copied into one, and read as the rows they hold:
    lengths, records, batches in any order across blocks (in pieces, weighted), every block, counts, pickling, and
    `after_each_block` once a block read."""
    monkeypatch.setattr(tensors, "BLOCK_ROWS", 5)
    data = compact(lm_data(600))  # uint16 ids, bool weights: as encoding leaves them
    data = LMData(*data.stored()[:4], torch.arange(64) % 3 if labelled else None)
    joined = split_into_blocks(data, [10, 11, 40, 64])
    assert len(joined.parts) == 4 and all(len(p.parts) == 1 for p in joined.parts)
    assert_same(joined, data)  # read whole: concatenated
    assert len(joined) == 64 and joined.records == data.records and joined.task == data.task
    assert torch.equal(joined.groups, data.groups)
    read: list[int] = []
    with tensors.after_each_block(lambda: read.append(1)):
        assert [len(b) for b in joined.blocks()] == [5, 5, 1, 5, 5, 5, 5, 5, 4, 5, 5, 5, 5, 4]
        assert len(read) == 4
        assert tensors.row_counts(joined) == tensors.row_counts(data)
        rows = torch.tensor([63, 0, 10, 10, 39, 40, 9, 11])  # every block, out of order, one row twice
        weighting = ATDPWeights(0.25, (5, 7))
        for piece in (None, 3):
            assert_same(joined.subset(rows, piece), data.subset(rows))
            assert_same(joined.with_weighting(weighting).subset(rows, piece), data.with_weighting(weighting).subset(rows))
    assert_same(joined.subset([]), data.subset([]))
    again = pickle.loads(pickle.dumps(joined.with_weighting(weighting), protocol=5))
    assert len(again.parts) == 4 and again.weighting is not None
    assert_same(again.subset(rows), data.with_weighting(weighting).subset(rows))
    for block, part in zip(again.parts, joined.parts):
        assert_same(block, part)
