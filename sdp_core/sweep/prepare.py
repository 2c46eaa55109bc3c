"""A sweep's shared data, prepared once before its trials start, in a Ray task of its own.

    driver: a data file's detection (`sweep.pipeline.detect_file`: streamed, the driver holds one batch of spans)
      -> a task on the driver's node (`_prepare_remotely`, no CPU of its own; its detection misses go to the actor
         pool like the driver's would, its encoding to actors on the cluster, `sweep.encoding`): records, spans,
         tokenizer, rows and each mechanism's plan (`prepare_shared`); the rows stay in the blocks the encoding
         actors wrote into the object store (`LMData.joined`), and the task reads them a block at a time, unmapping
         each block's pages once read (`tensors.after_each_block`): it never holds every row
      -> every setting's `PreparedData` in Ray's object store, made by that task and owned by the driver, which
         holds references only; the task's worker exits once it is done, and its memory with it. Before writing,
         the task gives its freed heap back, and after each object it unmaps the store's pages the write mapped
         into it and drops what it wrote: what it holds while writing is what it has still to write and one
         object's pages, not every object written.

Each setting is several objects there (`SharedData`, `shared_parts`): what every trial reads but the rows (the
tokenizer, counts and the first training records membership inference reads), whose size does not grow with the
data; the records themselves (`TrialRecords`), which only a trial whose mechanism reads text fetches (CRT, JFT's
missing rate from gold spans); and each block of rows (`LMData.parts`: each split's, a mechanism plan's, an
evaluation subset's) on its own, so that the task writes, maps and drops one block at a time, and a trial reads
the blocks its batch needs. All are yielded by the task, so the driver owns them: a reference the
task put itself would keep its worker, and all its memory, alive for as long as the reference lives.

The driver never holds the records, the tokenizer's training text or the rows, however large the data: what it
holds through a sweep's preparation does not grow with the data. Its progress (detection's records and records/s)
is the task's, relayed to the driver's display (`progress.relayed_progress`): a worker's own output does not reach
the user. The task runs on the driver's node, where the data's paths are the paths the user gave. Data known to be small
(`known_small`: generated, or a small file) is prepared in the driver itself, which a task's start would only slow.
"""

from __future__ import annotations

import io
import pickle
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sdp_core.config import DataConfig, parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.detectors import get_policy
from sdp_core.errors import UserError
from sdp_core.logs import configure_logging
from sdp_core.mechanisms import get_mechanism
from sdp_core.metrics import evaluation_rows
from sdp_core.preparation import PreparedData, TrialRecords, data_key, prepare_trial_data
from sdp_core.progress import ProgressEvent, relayed_progress, replayed_progress
from sdp_core.sweep.encoding import ray_encoding
from sdp_core.sweep.pipeline import FILE_MIN_BYTES, FileDetections, detect_file, file_source, ray_detection
from sdp_core.tensors import LMData, after_each_block
from sdp_core.train.host_memory import give_back_freed_host_memory
from sdp_core.train.shared_pages import unmap_shared_mappings

IN_DRIVER_RECORDS = 20_000
"""Data known to hold at most this many records (generated, or a file under `pipeline.FILE_MIN_BYTES`) is
prepared in the driver: starting the task's worker (a process importing torch) costs seconds, more than preparing
it takes, and it keeps the driver small anyway."""

RELAY_INTERVAL = 0.25
"""Seconds between the preparation task's progress messages to the driver (each is a small Ray object)."""


@dataclass(frozen=True)
class SharedData:
    """A data setting's preparation in Ray's object store (`shared_parts`): what every trial reads but the rows, the
    records, which a trial fetches only when its mechanism or attack reads them (`PreparedData.apart`), and each
    block of its rows (`LMData.parts`: each split's, a mechanism's plan's) as an object of its own."""

    prepared: ray.ObjectRef  # bytes: PreparedData without its records, each block of its rows pickled as its number
    records: ray.ObjectRef  # TrialRecords
    rows: tuple[ray.ObjectRef, ...]  # the blocks of rows (and large arrays, `_RowsApart`), by number

    @classmethod
    def of(cls, refs: Sequence[ray.ObjectRef]) -> SharedData:
        """From the references to `shared_parts`' objects, in its order."""
        prepared, records, *rows = refs
        return cls(prepared, records, tuple(rows))

    def get(self) -> PreparedData:
        """The prepared data (its rows views of the object store's memory, `tensors`), its records by reference."""
        return _RowsBack(ray.get(self.prepared), ray.get(list(self.rows))).load().with_records(self.records)


APART_BYTES = 1 << 20
"""An array at least this large in a setting's data (a statistic of joined rows: their record numbers, 4 bytes a row)
is an object of its own, as the blocks of rows are, so that a trial reads it from the object store, not a copy."""

RowsPart = LMData | np.ndarray
"""What `_RowsApart` writes apart: a block of rows, or a large array."""


class _RowsApart(cloudpickle.CloudPickler):
    """Pickles every block of rows (`LMData.parts`: joined rows are pickled as their blocks) and every array of
    `APART_BYTES` or more as its number in `rows`, where it is put: the rows stay out of the pickle, each block an
    object of its own."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.rows: list[RowsPart] = []
        self.numbers: dict[int, int] = {}  # id of each block or array seen -> its number

    def persistent_id(self, obj: object) -> int | None:
        if isinstance(obj, LMData):
            apart: RowsPart | None = obj if obj.parts[0] is obj else None
        else:
            apart = obj if isinstance(obj, np.ndarray) and obj.nbytes >= APART_BYTES else None
        if apart is None:
            return None
        if id(obj) not in self.numbers:
            self.numbers[id(obj)] = len(self.rows)
            self.rows.append(apart)
        return self.numbers[id(obj)]


class _RowsBack(pickle.Unpickler):
    """Unpickles what `_RowsApart` pickled, each number read as that block or array of `rows`."""

    def __init__(self, data: bytes, rows: list[RowsPart]):
        super().__init__(io.BytesIO(data))
        self.rows = rows

    def persistent_load(self, number: int) -> RowsPart:
        return self.rows[number]


def shared_parts(data: PreparedData, first_train: int) -> Iterator[int | bytes | TrialRecords | RowsPart]:
    """A setting's prepared data as the objects of `SharedData`, in its order, after how many they are: the data
    pickled without its records and rows (`_RowsApart`), the records (`PreparedData.apart`, keeping `first_train`
    training records beside the rows), then each block of rows. Each is dropped here once the caller takes the next:
    a writer that gives `data` alone to this holds what is still to write, not what it wrote (at a million notes,
    the rows are 1.5 GB)."""
    every, records = data.apart(first_train)
    del data
    buffer = io.BytesIO()
    pickler = _RowsApart(buffer)
    pickler.dump(every)
    rows = pickler.rows
    del every, pickler
    yield 2 + len(rows)
    yield buffer.getvalue()
    del buffer
    yield records
    del records
    while rows:
        yield rows.pop(0)


def put_shared(data: PreparedData, first_train: int) -> SharedData:
    """`SharedData` of `data`, put into the object store from this process."""
    parts = shared_parts(data, first_train)
    next(parts)  # how many: what a stream of them says first
    return SharedData.of([ray.put(part) for part in parts])


def members_kept(trials: list[TrialConfig], key: str) -> int:
    """How many of a setting's first training records its trials all read beside the rows: the most the membership
    inference of any of its trials reads (`evaluation.max_eval_records`; none where no trial attacks)."""
    return max((cfg.evaluation.max_eval_records for cfg in trials if cfg.evaluation.mia and data_key(cfg) == key),
               default=0)


def prepare_shared(trials: list[TrialConfig]) -> dict[str, PreparedData]:
    """The data the trials of a sweep share, prepared once per distinct data setting (`data_key`), with each
    mechanism's plan made once so its own detection (CRT's conservative policy) is cached before the trials start,
    and each trial's evaluation subset drawn (`metrics.evaluation_rows`), so that it travels with the rows.
    A setting whose preparation fails is left out: its trials prepare it themselves and report the problem."""
    prepared: dict[str, PreparedData] = {}
    planned: set[tuple[str, str]] = set()
    failed: set[str] = set()
    for cfg in trials:
        key = data_key(cfg)
        if key in failed:
            continue
        try:
            if key not in prepared:
                prepared[key] = prepare_trial_data(cfg)
            if (key, cfg.mechanism.name) not in planned:
                planned.add((key, cfg.mechanism.name))
                get_mechanism(cfg.mechanism.name)(prepared[key].data, cfg)
            for rows in (prepared[key].data.validation, prepared[key].data.test):
                evaluation_rows(rows, cfg.evaluation.held_out_records, cfg.data.seed)
        except UserError:  # includes PrivacyError: the trial itself records it
            if key not in prepared:
                failed.add(key)
    return prepared


def known_small(data: DataConfig) -> bool:
    """Whether a data setting holds at most `IN_DRIVER_RECORDS` records, from its settings or its file's size
    alone (a dataset of the hub, or a folder, is not known to be small)."""
    if data.source == "file":
        path = Path(data.location)
        return path.is_file() and path.stat().st_size < FILE_MIN_BYTES
    if data.source == "hf":
        return False
    return data.n_train + data.n_validation + data.n_test <= IN_DRIVER_RECORDS


def _merged(events: list[ProgressEvent]) -> list[ProgressEvent]:
    """Consecutive advances of one display as one event: the driver needs the counts, not every step."""
    out: list[ProgressEvent] = []
    for e in events:
        last = out[-1] if out else None
        if last is not None and not last.finished and not e.finished and last.description == e.description:
            out[-1] = ProgressEvent(e.description, e.total, e.unit, last.advance + e.advance)
        else:
            out.append(e)
    return out


@ray.remote(num_cpus=0, max_calls=1, num_returns="streaming")
def _prepare_remotely(trials: list[TrialConfig], workers: int | None, files: Sequence[FileDetections]
                      ) -> Iterator[list[ProgressEvent] | tuple[str, ...] | int | bytes | TrialRecords | RowsPart]:
    """`prepare_shared` in this task: yields lists of progress events while it works, then the keys of the settings
    it prepared, then each setting's objects (`shared_parts`: how many, then the data, its records and its rows), in
    that order (objects the caller owns, so they outlive this worker)."""
    configure_logging()  # the driver's -v, in this worker
    events: queue.Queue[ProgressEvent | None] = queue.Queue()
    outcome: dict[str, dict[str, PreparedData] | BaseException] = {}

    def work() -> None:  # in a thread: the generator yields the events it sends while it runs
        try:
            with (relayed_progress(events.put), ray_detection(workers, files), ray_encoding(),
                  after_each_block(unmap_shared_mappings)):  # the rows' blocks' pages, read: one block's at a time
                outcome["prepared"] = prepare_shared(trials)
        except BaseException as e:  # raised below, in the task
            outcome["error"] = e
        finally:
            events.put(None)

    thread = threading.Thread(target=work, name="prepare")
    thread.start()
    finished = False
    while not finished:
        batch = [events.get()]
        time.sleep(RELAY_INTERVAL)
        while not events.empty():
            batch.append(events.get())
        finished = batch[-1] is None
        sent = [e for e in batch if e is not None]
        if sent:
            yield _merged(sent)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    prepared = outcome["prepared"]
    assert isinstance(prepared, dict)
    yield tuple(prepared)
    give_back_freed_host_memory()  # what preparing freed: this process writes the objects holding what it still uses
    for key in list(prepared):
        for written in shared_parts(prepared.pop(key), members_kept(trials, key)):  # what is written is dropped
            yield written
            unmap_shared_mappings()  # the object store's pages writing it mapped here: its contents stay there


def prepare_once(trials: list[dict], workers: int | None) -> dict[str, SharedData]:
    """The trials' shared data by `data_key`, prepared once before they start and left in Ray's object store:
    every trial, on any node, reads it from there instead of preparing it again (`SharedData.get`).

    Detection runs on the cluster as a Ray Data pipeline (`sweep.pipeline`: at most `workers` one-CPU actors, by
    default as many as its CPUs allow); a data file is read as a Ray Dataset and its detections are kept as shards
    for the next sweep on it. The rest runs in a task (`_prepare_remotely`), so the driver holds references only,
    unless the data is known to be small (`known_small`). Tune has asked for no CPU yet, so nothing competes with the pipeline."""
    configs = [parse_model(TrialConfig, t) for t in trials]
    start = time.perf_counter()
    print("preparing the sweep's data once (detection on the cluster, tokenizer, plans)", flush=True)
    files = {}  # a data file's records, detected with the trials' policy: the heavy part, streamed from the file
    for cfg in configs:
        source = file_source(cfg.data)
        try:
            policy = get_policy(cfg.detector.policy, cfg.detector)
            if source is not None and (source, policy.key) not in files:
                files[source, policy.key] = detect_file(source, policy, workers)
        except UserError:  # a bad policy or file: the trials report it
            continue
    if all(known_small(cfg.data) for cfg in configs):
        with ray_detection(workers, list(files.values())), ray_encoding():
            prepared = {key: put_shared(data, members_kept(configs, key))
                        for key, data in prepare_shared(configs).items()}
    else:
        prepared = _prepared_in_task(configs, workers, list(files.values()))
    print(f"data prepared in {time.perf_counter() - start:.0f} s; the trials start", flush=True)
    return prepared


def _prepared_in_task(configs: list[TrialConfig], workers: int | None, files: list[FileDetections]
                      ) -> dict[str, SharedData]:
    """`_prepare_remotely` on this node, its progress shown here; the references to what it prepared."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    refs = _prepare_remotely.options(scheduling_strategy=here).remote(configs, workers, files)
    keys: tuple[str, ...] = ()
    with replayed_progress() as show:
        for ref in refs:
            message = ray.get(ref)
            if isinstance(message, tuple):  # the keys; each setting's count of objects and the objects follow
                keys = message
                break
            for event in message:
                show(event)
    return {key: SharedData.of([next(refs) for _ in range(ray.get(next(refs)))]) for key in keys}
