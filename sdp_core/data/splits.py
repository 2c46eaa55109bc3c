"""From a `DataConfig` to train / validation / test records, with canaries inserted into train."""

from __future__ import annotations

import random
from typing import Callable, Sequence

from sdp_core.config import DataConfig
from sdp_core.data.canaries import Canaries, Detect, insert_canaries
from sdp_core.data.classification import classification_splits
from sdp_core.data.clinic import clinic_splits
from sdp_core.data.customersim import customersim_splits
from sdp_core.data.loaders import hf_local_path, hf_records, hf_text_fields, load_hf, load_records
from sdp_core.data.records import Record, RecordColumns, Splits, record_columns
from sdp_core.errors import DataError


def _hold_out(records: Sequence[Record], parts: int, fraction: float, seed: int, where: str) -> list[RecordColumns]:
    """Seeded split into `parts` held-out sets of `fraction` each, then the rest (file order kept inside each), each
    made as arrays a record at a time (`record_columns`)."""
    if len(records) <= parts:
        raise DataError(f"{len(records)} records cannot be split into train and {parts} held-out set(s)", where)
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    n_held = max(1, round(fraction * len(records)))
    cuts = [order[k * n_held : (k + 1) * n_held] for k in range(parts)] + [order[parts * n_held :]]
    if not cuts[-1]:
        raise DataError("no training records left after the held-out sets", where)
    return [record_columns(records[i] for i in sorted(idx)) for idx in cuts]


def _split_file(records: Sequence[Record], cfg: DataConfig, seed: int, where: str) -> Splits:
    """Seeded split of one file into train / validation / test (validation and test each `validation_fraction`)."""
    val, test, train = _hold_out(records, 2, cfg.validation_fraction, seed, where)
    return Splits(train, val, test)


def hf_split_names(cfg: DataConfig, available: list[str]) -> tuple[str, str | None, str | None]:
    """The (train, validation, test) split names of `cfg.hf_name`'s dataset, whose splits are `available`; None
    where a split is held out of train. GLUE hides its test labels, so (as JFT reports on GLUE dev sets) a GLUE hub
    name's validation split is the test set, and its validation set is held out of train."""
    name, chosen = cfg.location, cfg.splits
    glue_test = None
    if name.startswith("glue/") and hf_local_path(name) is None:
        glue_test = "validation_matched" if name == "glue/mnli" else "validation"
    test = chosen.test or glue_test or ("test" if "test" in available else None)
    validation = chosen.validation or ("validation" if "validation" in available and test != "validation" else None)
    for split in (chosen.train, validation, test):
        if split is not None and split not in available:
            raise DataError(f"no split {split!r} (the dataset has {', '.join(available) or 'none'}); set data.splits",
                            name)
    return chosen.train, validation, test


def _hf_splits(cfg: DataConfig, seed: int) -> Splits:
    """A HF dataset's own splits (`hf_split_names`); a validation or test split it lacks is held out of train."""
    name = cfg.location
    dataset = load_hf(name)
    train_name, validation_name, test_name = hf_split_names(cfg, list(dataset))
    fields = cfg.text_fields or hf_text_fields(name)

    def read(split: str) -> list[Record]:
        return hf_records(dataset[split], fields, cfg.label_field, f"{name} ({split})")

    named = {"validation": validation_name, "test": test_name}
    missing = [part for part, split in named.items() if split is None]
    *held, train = _hold_out(read(train_name), len(missing), cfg.validation_fraction, seed, name)
    parts = {**dict(zip(missing, held)), **{part: read(split) for part, split in named.items() if split is not None}}
    return Splits(train, parts["validation"], parts["test"])


SOURCES: dict[str, Callable[[DataConfig, int], Splits]] = {
    "customersim": lambda cfg, seed: customersim_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed),
    "clinic": lambda cfg, seed: clinic_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed),
    "synthetic_classification":
        lambda cfg, seed: classification_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed),
    "file": lambda cfg, seed: _split_file(load_records(cfg.location, cfg.text_fields, cfg.label_field), cfg, seed,
                                          cfg.location),
    "hf": _hf_splits,
}


def load_splits(cfg: DataConfig, seed: int) -> Splits:
    return SOURCES[cfg.source](cfg, seed)


def splits_with_canaries(cfg: DataConfig, seed: int, policy: tuple[str, Detect] | None = None
                         ) -> tuple[Splits, tuple[Canaries, ...]]:
    """Splits with the configured canary families inserted into the training records: `format`, then
    `missed_format` into other records. With `policy` (its name and `detect`), each family's canaries are the
    draws that policy flags whole, or misses (`format`: as it treats most draws; `missed_format`: misses), each
    judged before insertion (`data.canaries.insert_canaries`). Each split is held as arrays (`RecordColumns`:
    about half a record's memory as objects), read a record at a time."""
    splits = load_splits(cfg, seed)
    if cfg.canaries is None:
        return _as_columns(splits), ()
    c = cfg.canaries
    train, first = insert_canaries(splits.train, c.format, c.count, c.repeats, seed, c.missed_by_detector,
                                   policy=policy)
    families = [first]
    if c.missed_format is not None:
        train, missed = insert_canaries(train, c.missed_format, c.count, c.repeats, seed, family="missed",
                                        policy=policy, avoid=frozenset(i.record for i in first.insertions))
        families.append(missed)
    return _as_columns(Splits(train, splits.validation, splits.test)), tuple(families)


def _as_columns(splits: Splits) -> Splits:
    return Splits(*(record_columns(part) for part in (splits.train, splits.validation, splits.test)))
