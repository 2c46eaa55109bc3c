"""The sweep's detection as a Ray Data pipeline (`sweep.pipeline`) against detection in one process, record for
record: the driver's texts over an actor pool, a data file read as a Ray Dataset into shards, and a preparation's
misses looked up in those shards. One private local Ray of 2 CPUs for the module."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import ray
import torch

from sdp_core.data.clinic import generate_clinic
from sdp_core.data.loaders import load_records, save_jsonl, save_parquet
from sdp_core.data.records import Record
from sdp_core.detectors import detect_records, get_policy
from sdp_core.detectors.cache import detect_here
from sdp_core.sweep import pipeline
from sdp_core.sweep.pipeline import FileDetections, FileSource, detect_file, detect_on_ray, ray_detection

pytestmark = pytest.mark.slow

NOTES = generate_clinic(48, "pipeline-test")  # notes full of names, identifiers, phone numbers and addresses
REGEXES = "identifier,phone,email"  # the file tests' policy: actors that start without spaCy


SMALL = {"BLOCK_ROWS": 8, "BLOCK_BYTES": 8 * 400, "SHARD_ROWS": 10}
"""Blocks of about 8 records: 48 notes are six blocks or more, so both actors of a 2-CPU Ray get some; shards of
10 records: a file's spans are read, and its records looked up, across five shards."""


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    for name, value in SMALL.items():
        monkeypatch.setattr(pipeline, name, value)


def test_the_actor_pool_detects_what_one_process_detects(local_ray):
    texts = [r.text for r in NOTES] + [NOTES[0].text, ""]  # a repeated text and an empty one
    policy = get_policy(f"{REGEXES},low_entity")  # regexes and spaCy's NER
    expected = policy.detect(texts)  # a second implementation of the loop: the policy on every text at once
    assert detect_on_ray(policy, texts, progress=False, workers=2) == expected
    assert sum(map(len, expected)) > 200 and any(s.label == "PERSON" for row in expected for s in row)


def _write_csv(path: Path, records: list[Record]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "note"])
        for i, r in enumerate(records):
            writer.writerow([i, r.text])  # notes hold newlines: quoted cells over several lines
        writer.writerow([len(records), "  "])  # a blank note: not a record


def _detect(path: Path, fields: tuple[str, ...] | None, cache: Path) -> FileDetections:
    return detect_file(FileSource(path, fields), get_policy(REGEXES), workers=2, cache_dir=cache, progress=False)


@pytest.fixture(scope="module")
def jsonl_shards(local_ray, tmp_path_factory) -> FileDetections:
    path = tmp_path_factory.mktemp("jsonl") / "notes.jsonl"
    save_jsonl(NOTES, path)
    with pytest.MonkeyPatch.context() as patch:  # the module's fixture: before `small_blocks`
        for name, value in SMALL.items():
            patch.setattr(pipeline, name, value)
        shards = _detect(path, None, path.parent / "cache")
    assert len(list(shards.path.glob("part-*.parquet"))) == 5
    return shards


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_file_read_as_a_ray_dataset_gives_the_loaded_records_spans(jsonl_shards, tmp_path, monkeypatch, fmt):
    path, fields = tmp_path / f"notes.{fmt}", None
    if fmt == "jsonl":
        path, shards = jsonl_shards.source.path, jsonl_shards
    elif fmt == "parquet":
        save_parquet(NOTES, path)
        shards = _detect(path, fields, tmp_path / "cache")
    else:
        _write_csv(path, NOTES)
        fields = ("note",)
        shards = _detect(path, fields, tmp_path / "cache")
    records = load_records(path, list(fields) if fields else None)
    assert len(records) == len(NOTES)
    assert shards.spans() == detect_here(get_policy(REGEXES), [r.text for r in records], False)
    manifest = shards.manifest
    assert manifest is not None and manifest["records"] == sum(manifest["nodes"].values()) == len(NOTES)

    # A second run reads the shards: nothing is detected again.
    monkeypatch.setattr(pipeline, "detect_dataset", lambda *args: pytest.fail("detected again"))
    again = _detect(path, fields, shards.path.parent)
    assert again.path == shards.path and again.spans() == shards.spans()


def test_shards_that_lost_records_are_detected_again(jsonl_shards, tmp_path):
    """A folder whose shards do not hold the manifest's records (an earlier version wrote a last, partial shard over
    the one before it) is not read: the file is detected again, every record in its shard."""
    path = jsonl_shards.source.path
    first = _detect(path, None, tmp_path / "cache")
    (first.path / "part-00003.parquet").unlink()
    assert first.manifest is None
    again = _detect(path, None, tmp_path / "cache")
    assert again.manifest is not None and again.spans() == jsonl_shards.spans() and len(again.spans()) == len(NOTES)


def test_a_preparation_looks_the_files_records_up_and_detects_only_the_others(jsonl_shards, tmp_path):
    policy = get_policy(REGEXES)
    changed = NOTES[3].text + "\nCall 020 7946 0018 or ada@example.org."  # as a canary changes a record
    texts = [changed, *(r.text for r in NOTES[:20])]
    asked: list[str] = []

    class Recording:
        """The policy, noting what it is asked to detect."""

        def __getattr__(self, name):
            return getattr(policy, name)

        def detect(self, texts):
            asked.extend(texts)
            return policy.detect(texts)

    with ray_detection(workers=2, files=[jsonl_shards], progress=False):
        detected = detect_records(texts, Recording(), tmp_path / "cache")  # type: ignore[arg-type]
    assert asked == [changed]
    assert detected == policy.detect(texts) and len(detected[0]) > len(policy.detect([NOTES[3].text])[0])


@pytest.mark.parametrize("mechanism", ["dpsgd", "crt"])  # CRT's plan: rows of its own beside the splits'
def test_data_not_known_to_be_small_is_prepared_in_a_task_as_it_would_be_here(local_ray, monkeypatch, mechanism):
    """The task's data is the driver's, object for object: each rows object (a split's, a plan's) is written on its
    own, with the statistics computed over it, and comes back where the data holds it."""
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.preparation import data_key
    from sdp_core.sweep import prepare
    from tests.conftest import small_trial_dict

    trial = small_trial_dict(data={"seed": 31}, evaluation={"mia": True, "max_eval_records": 5},
                             mechanism={"name": mechanism})
    cfg = parse_model(TrialConfig, trial)
    expected = prepare.prepare_shared([cfg])[data_key(cfg)]  # the reference: the same preparation in this process
    monkeypatch.setattr(prepare, "IN_DRIVER_RECORDS", 0)  # 280 generated records: not known to be small now
    # In this process only: the task's worker imports the module afresh.
    monkeypatch.setattr(prepare, "prepare_trial_data", lambda cfg: pytest.fail("prepared in the driver"))
    shared = prepare.prepare_once([trial], workers=2)
    got = shared[data_key(cfg)].get()
    assert list(shared) == [data_key(cfg)] and got.detector == expected.detector and got.canaries == expected.canaries
    # The records apart, read after the task's worker is done; beside the rows, the membership attack's members only
    records = expected.data.fetch_records()
    assert got.data.fetch_records() == records and got.data.train_records == len(records.splits.train)
    assert got.data.first_train == tuple(records.splits.train[:5])
    rows = [(getattr(got.data, part), getattr(expected.data, part))
            for part in ("train", "train_redacted", "validation", "test")]
    if mechanism == "crt":
        (split,), (planned,) = got.data.derivations.values(), expected.data.derivations.values()
        rows += [(split.private_rows, planned.private_rows), (split.public_rows, planned.public_rows)]
    assert len(shared[data_key(cfg)].rows) == len(rows)  # each an object of its own
    for a, b in rows:
        assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("input_ids", "weights", "sensitive"))
        assert a.__dict__.get("_statistics", {}).keys() == b.__dict__.get("_statistics", {}).keys()
    assert got.data.train.__dict__["_statistics"]  # the plan's counts, read by the trials instead of the rows
    assert got.data.tokenizer.get_vocab() == expected.data.tokenizer.get_vocab()


def test_rows_encoded_by_blocks_are_written_a_block_an_object_and_read_back_as_the_rows(local_ray, monkeypatch):
    """A preparation whose rows were encoded block by block on the cluster keeps them as those blocks (joined,
    never copied into one), writes each block (and each large statistic of joined rows) as an object of its own,
    and a trial reads back the rows of one process's preparation, row for row, with the statistics its plan
    computed."""
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.preparation import data_key
    from sdp_core.sweep import encoding, prepare
    from sdp_core.trial import run_trial
    from tests.conftest import small_trial_dict

    cfg = parse_model(TrialConfig, small_trial_dict(data={"seed": 31}, evaluation={"mia": True, "max_eval_records": 5}))
    expected = prepare.prepare_shared([cfg])[data_key(cfg)].data  # encoded here: one block a split
    monkeypatch.setattr(encoding, "BLOCK_RECORDS", 30)  # 200 training records: seven blocks
    with encoding.ray_encoding():
        data = prepare.prepare_shared([cfg])[data_key(cfg)]
    splits = ("train", "train_redacted", "validation", "test")
    blocks = [len(getattr(data.data, split).parts) for split in splits]
    assert blocks[:2] == [7, 7] and all(n > 1 for n in blocks)
    monkeypatch.setattr(prepare, "APART_BYTES", 64)  # the joined rows' record numbers written apart too
    shared = prepare.put_shared(data, prepare.members_kept([cfg], data_key(cfg)))
    assert len(shared.rows) >= sum(blocks)  # beside the evaluation subsets' rows and the arrays
    got = shared.get().data
    apart = [part for part in ray.get(list(shared.rows)) if isinstance(part, np.ndarray)]
    assert any(np.array_equal(a, expected.train.groups.numpy()) for a in apart)
    for split, n in zip(splits, blocks):
        a, b = getattr(got, split), getattr(expected, split)
        assert len(a.parts) == n
        assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("input_ids", "weights", "sensitive",
                                                                        "record_index")), split
        assert a._statistics.keys() == b._statistics.keys(), split
    assert got.train._statistics  # the plan's counts, read by the trials instead of the rows
    row = run_trial(cfg, prepared=shared.get())  # its batches gathered block by block
    assert row.state == "finished", row.error


@pytest.mark.parametrize("labels", [None, [0, 1, 2, 0, 1, 2, 0]])
def test_rows_encoded_by_blocks_on_the_cluster_are_the_rows_encoded_here(local_ray, monkeypatch, labels):
    """Blocks of one record on a pool of actors (seven blocks, two actors: 2 CPUs) give the rows of
    one process, row for row, and a refusal names the record by its place in the whole list, in one line."""
    from sdp_core.data.customersim import generate_customersim
    from sdp_core.errors import UserError
    from sdp_core.sweep import encoding
    from sdp_core.text.encode import encode_windows
    from tests.test_text_encode import PROSE, tokenizer

    records = generate_customersim(5, 3)
    texts = [r.text for r in records] + [PROSE, "short one"]
    spans = [list(r.spans) for r in records] + [[], []]
    whole = ("The mayor said so.",)  # no window cuts through it
    here = encode_windows(texts, spans, tokenizer(), 24, labels, keep_whole=whole)
    monkeypatch.setattr(encoding, "BLOCK_RECORDS", 1)
    with encoding.ray_encoding():
        blocks = encode_windows(texts, spans, tokenizer(), 24, labels, keep_whole=whole)
        with pytest.raises(UserError, match=r"^record #4 has \d+ tokens"):
            encode_windows(["short one", "short two", "short three", PROSE], [[]] * 4, tokenizer(), 24,
                           on_long="refuse")
    assert here[1] == blocks[1] and (here[1].records_split > 0 if labels is None else here[1].tokens_dropped > 0)
    for name in ("input_ids", "weights", "sensitive", "record_index", "labels"):
        a, b = getattr(here[0], name), getattr(blocks[0], name)
        assert (a is None and b is None) or torch.equal(a, b), name


def test_a_progress_line_names_an_expanded_policy_by_its_count_not_its_parts():
    """`customersim` expands to its 7 parts (address, email, low_entity, order_number, phone, proper_nouns,
    tracking_number): a progress line counts them instead of listing them all."""
    from sdp_core.detectors.registry import get_policy
    from sdp_core.sweep.pipeline import policy_label

    assert policy_label(get_policy("customersim")) == "with 7 detectors (address, … tracking_number)"
    assert policy_label(get_policy("phone")) == "phone"
