"""A step unmaps the pages of shared rows it read (`train.shared_pages`): the process's resident memory falls by
them, the rows read again are the same bytes, a phase trains the same model on them, and private memory is never
touched."""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from sdp_core.mechanisms.base import phase_events
from sdp_core.models.gpt2 import build_gpt2
from sdp_core.privacy import PrivacyLedger
from sdp_core.tensors import LMData
from sdp_core.train.loop import Phase, StepSettings, make_optimizer, train_phase
from sdp_core.train.shared_pages import in_shared_memory, unmap_pages, unmap_shared_mappings

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir() or not Path("/proc/self/status").exists(),
                                reason="needs Linux shared memory (/dev/shm, /proc)")


def shared_mb() -> float:
    """This process's resident pages of shared memory and files (`RssShmem` + `RssFile`), in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return sum(int(fields[k].split()[0]) for k in ("RssShmem", "RssFile")) / 1024


def through_shared_mapping(array: np.ndarray, folder: Path) -> torch.Tensor:
    """`array` written to a file in shared memory and read back through a shared, read-only mapping, as a trial
    reads a row array of Ray's object store (a file in /dev/shm, mapped shared)."""
    path = folder / f"rows-{len(list(folder.iterdir()))}"
    array.tofile(path)
    mapped = np.memmap(path, dtype=array.dtype, mode="r", shape=array.shape)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(mapped)


@pytest.fixture
def shm_folder():
    with tempfile.TemporaryDirectory(dir=SHM, prefix="sdp-test-") as folder:
        yield Path(folder)


def test_read_pages_of_shared_rows_are_unmapped_and_read_again_unchanged(shm_folder):
    rows = np.random.default_rng(0).integers(0, 50_257, size=(16_384, 512), dtype=np.uint16)  # 16 MiB
    digest = hashlib.sha256(rows.tobytes()).hexdigest()
    tensor = through_shared_mapping(rows, shm_folder)
    before = shared_mb()
    assert int(tensor.sum()) == int(rows.sum())  # every page read, so mapped
    mapped = shared_mb()
    assert mapped - before > 15
    assert in_shared_memory([tensor, None]) == [tensor]
    given_back = unmap_pages([tensor])
    assert given_back > 15 * 2**20 and shared_mb() < mapped - 15
    assert hashlib.sha256(tensor.numpy().tobytes()).hexdigest() == digest  # read again: the same bytes


def test_every_shared_mapping_is_unmapped_and_read_again_unchanged(shm_folder):
    """What a preparation task does after writing an object to the store (`sweep.prepare`): every shared mapping's
    pages given back, their contents where they were, and private memory untouched."""
    rows = np.random.default_rng(1).integers(0, 50_257, size=(16_384, 512), dtype=np.uint16)  # 16 MiB
    private = rows.copy()
    tensor = through_shared_mapping(rows, shm_folder)
    assert int(tensor.sum()) == int(rows.sum())
    mapped = shared_mb()
    assert unmap_shared_mappings() > 15 * 2**20 and shared_mb() < mapped - 15
    assert np.array_equal(tensor.numpy(), rows) and np.array_equal(private, rows)


def test_private_memory_is_never_taken_for_shared_memory():
    """The process's own memory must never be unmapped: `MADV_DONTNEED` would zero it."""
    own = torch.arange(4 * 2**20, dtype=torch.int32)  # 16 MiB of this process's heap
    assert in_shared_memory([own, own[: 2**20], None]) == []


def test_a_private_phase_on_shared_rows_trains_the_model_it_trains_on_private_rows(shm_folder, monkeypatch):
    """The rows a step reads after the pages of the earlier pieces were unmapped are the rows: the same parameters
    as trained on a private copy of them (the same batches and noise, from the seed); past a bound of 0 MB every
    piece of every batch of the shared rows unmapped their pages, under the default bound (1 MiB of rows) no step does, and the
    phase's end does either way (what one phase left mapped does not add to the next's); private rows never."""
    from sdp_core.train import loop

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 300, (8_192, 64), generator=g, dtype=torch.int32).to(torch.uint16)  # 1 MiB
    ids[:, -4:] = 0
    weights, sensitive = ids != 0, torch.rand(8_192, 64, generator=g) < 0.1
    weights[:, 0] = False
    index = torch.arange(8_192, dtype=torch.int32)
    private = LMData(ids, weights, sensitive, index)
    shared = LMData(*(through_shared_mapping(t.numpy(), shm_folder) for t in (ids, weights, sensitive, index)))
    monkeypatch.setattr(loop, "PIECE_ROWS", 8)  # batches of about 32 records: four pieces or so
    models, unmapped = [], []
    for rows, bound in ((private, 0), (shared, 0), (shared, StepSettings().shared_rows_mb)):
        given_back: list[int] = []
        monkeypatch.setattr(loop, "unmap_pages", lambda ts: given_back.append(unmap_pages(ts)) or 0)
        torch.manual_seed(0)
        model = build_gpt2("gpt2-tiny", None, 300, 64, 0.0)
        phase = Phase("dp", rows, private=True, epochs=1, batch_size=32, sigmas=(1.0,), max_steps=3)
        ledger = PrivacyLedger(notion="DP", delta=1e-5, accountant="rdp", plan=phase_events(phase, "dpsgd", "all"))
        train_phase(model, make_optimizer(model, "sgd", 0.1, 0.0), phase, ledger, seed=0,
                    settings=StepSettings(grad_sample_mode="bk", reproducible_noise=True, shared_rows_mb=bound))
        models.append(model.state_dict())
        unmapped.append(given_back)
    assert all(torch.equal(models[0][k], models[i][k]) for i in (1, 2) for k in models[0])
    # every piece of three steps' batches and the phase's end past a bound of 0; under the default, the end only
    assert unmapped[0] == [] and len(unmapped[1]) > 3 * 3 + 1 and all(b > 0 for b in unmapped[1])
    assert len(unmapped[2]) == 1 and unmapped[2][0] > 0
