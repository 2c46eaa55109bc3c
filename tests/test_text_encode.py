"""Records -> rows: records longer than a row become windows that keep every token, cut at line or sentence
starts, never through a canary; refuse mode; labelled records truncated and counted."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from sdp_core.config import DataConfig
from sdp_core.data.canaries import insert_canaries
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Span
from sdp_core.errors import UserError
from sdp_core.text.alignment import token_mask
from sdp_core.text.encode import encode, encode_windows
from sdp_core.text.redaction import redact
from sdp_core.text.tokenizer import train_bpe_tokenizer

PROSE = ("The river rose in the night. Nobody in the village slept! Was the bridge safe? The mayor said so. "
         "Boats were tied to every post along the bank, and the old mill wheel turned faster than anyone had "
         "seen it turn. By morning the water had reached the church steps. Then it stopped.")


@functools.lru_cache(maxsize=None)
def tokenizer():
    records = generate_customersim(300, 0)
    return train_bpe_tokenizer([redact(r.text, r.spans) for r in records] + [PROSE], 600)


def _rows(data, r: int) -> list[list[int]]:
    """The tokens of record r's windows, without framing or padding, in order."""
    tok = tokenizer()
    out = []
    for row in torch.nonzero(data.record_index == r).flatten().tolist():
        ids = data.input_ids[row].tolist()
        end = ids.index(tok.eos_token_id, 1)
        assert ids[0] == tok.eos_token_id and set(ids[end + 1 :]) <= {tok.pad_token_id}
        out.append(ids[1:end])
    return out


def test_every_token_of_every_record_lies_in_exactly_one_window():
    tok = tokenizer()
    records = generate_customersim(120, 5)
    texts, spans = [r.text for r in records], [list(r.spans) for r in records]
    data, summary = encode_windows(texts, spans, tok, 48)
    reference = tok(texts, add_special_tokens=False, return_offsets_mapping=True)  # the whole records' tokens
    assert data.input_ids.shape[1] == 48
    batch = data.subset([0, 1])  # at rest 2 bytes an id and 1 a weight; a batch's as a model and the loss read them
    assert (data.input_ids.dtype, data.weights.dtype) == (torch.uint16, torch.bool)
    assert (batch.input_ids.dtype, batch.weights.dtype) == (torch.long, torch.float32)
    assert torch.equal(data.record_index, torch.sort(data.record_index).values)  # a record's windows are consecutive
    for r, (ids, offsets) in enumerate(zip(reference["input_ids"], reference["offset_mapping"])):
        windows = _rows(data, r)
        assert [t for w in windows for t in w] == ids
        assert all(0 < len(w) <= 46 for w in windows)
        rows = torch.nonzero(data.record_index == r).flatten()
        whole = token_mask(offsets, spans[r], texts[r])
        got = torch.cat([data.sensitive[row, 1 : len(w) + 1] for row, w in zip(rows, windows)])
        assert torch.equal(got, torch.from_numpy(whole))  # each window's mask is its slice of the record's
    lengths = [len(ids) for ids in reference["input_ids"]]
    assert summary.records == 120 and summary.rows == len(data) and summary.tokens == sum(lengths)
    assert summary.tokens_dropped == 0
    assert summary.records_split == sum(n > 46 for n in lengths) > 0
    assert summary.windows_per_record_max == int(data.record_index.bincount().max()) > 1
    real = torch.arange(48) <= torch.tensor([len(w) for r in range(120) for w in _rows(data, r)])[:, None] + 1
    assert torch.equal(data.weights > 0, real & (torch.arange(48) > 0))  # the window's tokens and closing <eos>


def test_dialog_windows_start_at_line_starts():
    tok = tokenizer()
    records = generate_customersim(60, 6)
    data = encode([r.text for r in records], [list(r.spans) for r in records], tok, 64)
    for r in range(len(records)):
        windows = _rows(data, r)
        for w in windows[1:]:  # every later window opens with a speaker tag: the cut was at a line start
            assert tok.convert_ids_to_tokens(w[0]) in ("SYS:", "USR:")


def test_prose_windows_start_at_sentence_starts():
    tok = tokenizer()
    text = ("The river rose in the night. Nobody in the village slept! Was the bridge safe? The mayor said so. "
            "By morning the water had reached the church steps. Then it stopped.")
    windows = [tok.decode(w) for w in _rows(encode([text], [[]], tok, 40), 0)]
    assert len(windows) > 2 and "".join(windows) == text
    cuts = np.cumsum([len(w) for w in windows])[:-1]
    assert all(text[:c].rstrip().endswith((".", "!", "?")) for c in cuts)  # each later window opens a sentence


def test_a_secret_is_not_cut_when_a_cut_outside_it_exists():
    tok = tokenizer()
    text = "x " * 30 + "call 5551234567 now " + "y " * 30  # no line or sentence start: token boundaries only
    at = text.index("5551234567")
    data = encode([text], [[Span(at, at + 10, "phone")]], tok, 38)
    runs = [w for w in _rows(data, 0) if any(tok.decode([t]).strip().isdigit() for t in w)]
    assert len(runs) == 1 and sum(tok.decode([t]).strip().isdigit() for t in runs[0]) == 10


@pytest.mark.parametrize("prose", [False, True])
def test_every_canary_copy_lies_inside_one_window(prose):
    tok = tokenizer()
    records = generate_customersim(150, 7)
    if prose:  # the same records as prose: no speaker tags, so each canary is a sentence
        records = [type(r)(r.text.replace("SYS: ", "").replace("USR: ", "").replace("\n", " ")) for r in records]
    records, plan = insert_canaries(records, "My ID is {dddd}", count=20, repeats=5, seed=3)
    assert plan.dialog != prose
    texts = [r.text for r in records]
    data = encode(texts, [[] for _ in texts], tok, 40, keep_whole=plan.inserted_texts())
    rows = [tok.decode(data.input_ids[i][data.weights[i] > 0]) for i in range(len(data))]
    for k, inserted in enumerate(plan.inserted):
        copies = sum(row.count(plan.text(k)) for row in rows)
        assert copies == (plan.repeats if inserted else 0)


def test_a_canary_longer_than_a_row_is_an_error():
    line = "USR: My ID is 123456789012"
    with pytest.raises(UserError, match="canary is longer"):
        encode([f"SYS: Hello there.\n{line}\nSYS: Thanks."], [[]], tokenizer(), 12, keep_whole=[line])


def test_refuse_is_one_line_naming_the_record():
    tok = tokenizer()
    texts = ["short one", PROSE]
    with pytest.raises(UserError, match=r"record #2 has \d+ tokens") as err:
        encode(texts, [[], []], tok, 24, on_long="refuse")
    assert "\n" not in str(err.value) and "on_long_records: split" in str(err.value)
    assert len(encode(texts, [[], []], tok, 256, on_long="refuse")) == 2


@pytest.mark.parametrize("labels", [None, [0, 1, 2, 0, 1, 2, 0]])
def test_records_encoded_a_few_at_a_time_give_the_rows_of_one_pass(monkeypatch, labels):
    """Tokenizing in chunks (bounded memory) changes no row, mask, record index, label or count, and a refusal still
    names the record by its place in the whole list."""
    from sdp_core.text import encode as module

    records = generate_customersim(5, 3)
    texts = [r.text for r in records] + [PROSE, "short one"]
    spans = [list(r.spans) for r in records] + [[], []]
    whole = encode_windows(texts, spans, tokenizer(), 24, labels)
    monkeypatch.setattr(module, "ENCODE_CHUNK", 2)
    chunked = encode_windows(texts, spans, tokenizer(), 24, labels)
    assert whole[0].record_index.unique().tolist() == list(range(len(texts))) and len(whole[0]) > len(texts) - 1
    for name in ("input_ids", "weights", "sensitive", "record_index", "labels"):
        a, b = getattr(whole[0], name), getattr(chunked[0], name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert whole[1] == chunked[1]
    with pytest.raises(UserError, match=r"record #4 has"):  # in the second chunk
        encode_windows(["short one", "short two", "short three", PROSE], [[]] * 4, tokenizer(), 24, on_long="refuse")


def test_labelled_records_are_truncated_and_the_drop_is_counted():
    tok = tokenizer()
    data, summary = encode_windows(["short one", PROSE], [[], []], tok, 24, labels=[0, 1])
    n = len(tok(PROSE, add_special_tokens=False)["input_ids"])
    assert len(data) == 2 and data.labels.tolist() == [0, 1]
    assert summary.tokens_dropped == n - 22 and summary.windows_per_record_max == 1


def test_customersim_with_canaries_fits_the_default_row():
    """The default `data.max_length` holds every dialog with a canary line: no record is split or truncated."""
    tok = tokenizer()
    records, plan = insert_canaries(generate_customersim(1000, 0), "My ID is {dddddd}", 40, 10, 0)
    texts = [r.text for r in records]
    lengths = np.array([len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]])
    data, summary = encode_windows(texts, [list(r.spans) for r in records], tok, DataConfig().max_length,
                                   keep_whole=plan.inserted_texts())
    assert lengths.max() + 2 <= DataConfig().max_length
    assert summary.rows == len(data) == 1000 and summary.tokens_dropped == 0 and summary.windows_per_record_max == 1
    # The former 128-token rows cut a third of these dialogs; windows of 128 keep every token.
    assert (lengths > 126).sum() > 300
    assert encode_windows(texts, [[] for _ in texts], tok, 128)[1].tokens_dropped == 0


def test_a_batch_is_cut_after_its_last_predicted_column_without_changing_any_loss():
    from sdp_core.config import ModelConfig
    from sdp_core.models import build_model
    from sdp_core.tensors import record_losses

    records = generate_customersim(12, 1)
    data = encode([r.text for r in records], [list(r.spans) for r in records], tokenizer(), 256)
    rows = [3, 7, 1]
    batch = data.subset(rows)
    lengths = (data.weights[rows] > 0).sum(1)
    assert batch.input_ids.shape[1] < data.input_ids.shape[1]
    assert (batch.weights > 0).sum(1).tolist() == lengths.tolist()  # every predicted token kept
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="gpt2", preset="gpt2-tiny"), len(tokenizer()), 256).eval()
    with torch.no_grad():
        ids = data.input_ids[rows].long()  # the rows as stored (uint16 ids), uncut
        full = record_losses(model(ids), ids, data.weights[rows])
        cut = record_losses(model(batch.input_ids), batch.input_ids, batch.weights)
    torch.testing.assert_close(cut, full, rtol=1e-5, atol=1e-6)
