"""From a `DataConfig` to train / validation / test records, with canaries inserted into train."""

from __future__ import annotations

import random
from typing import Callable

from sdp_core.config import DataConfig
from sdp_core.data.canaries import CanaryPlan, insert_canaries
from sdp_core.data.classification import classification_splits
from sdp_core.data.clinic import clinic_splits
from sdp_core.data.customersim import customersim_splits
from sdp_core.data.loaders import load_hf, load_records
from sdp_core.data.records import Record, Splits
from sdp_core.errors import DataError


def _hold_out(records: list[Record], parts: int, fraction: float, seed: int, where: str) -> list[list[Record]]:
    """Seeded split into `parts` held-out sets of `fraction` each, then the rest (file order kept inside each)."""
    if len(records) <= parts:
        raise DataError(f"{len(records)} records cannot be split into train and {parts} held-out set(s)", where)
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    n_held = max(1, round(fraction * len(records)))
    cuts = [order[k * n_held : (k + 1) * n_held] for k in range(parts)] + [order[parts * n_held :]]
    if not cuts[-1]:
        raise DataError("no training records left after the held-out sets", where)
    return [[records[i] for i in sorted(idx)] for idx in cuts]


def _split_file(records: list[Record], cfg: DataConfig, seed: int, where: str) -> Splits:
    """Seeded split of one file into train / validation / test (validation and test each `validation_fraction`)."""
    val, test, train = _hold_out(records, 2, cfg.validation_fraction, seed, where)
    return Splits(train, val, test)


def _hf_splits(cfg: DataConfig, seed: int) -> Splits:
    """A hub corpus's own splits; GLUE hides its test labels, so (as JFT reports on GLUE dev sets) its validation
    split is the test set and validation is held out of train."""
    name = cfg.hf_name
    if not name.startswith("glue/"):
        return Splits(load_hf(name, "train"), load_hf(name, "validation"), load_hf(name, "test"))
    val, train = _hold_out(load_hf(name, "train"), 1, cfg.validation_fraction, seed, name)
    return Splits(train, val, load_hf(name, "validation"))


SOURCES: dict[str, Callable[[DataConfig, int], Splits]] = {
    "customersim": lambda cfg, seed: customersim_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed),
    "clinic": lambda cfg, seed: clinic_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed),
    "synthetic_classification":
        lambda cfg, seed: classification_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed),
    "file": lambda cfg, seed: _split_file(load_records(cfg.path), cfg, seed, cfg.path),
    "hf": _hf_splits,
}


def load_splits(cfg: DataConfig, seed: int) -> Splits:
    return SOURCES[cfg.source](cfg, seed)


def prepare_data(cfg: DataConfig, seed: int) -> tuple[Splits, CanaryPlan | None]:
    """Splits with the configured canaries inserted into the training records."""
    splits = load_splits(cfg, seed)
    if cfg.canaries is None:
        return splits, None
    c = cfg.canaries
    train, plan = insert_canaries(splits.train, c.format, c.count, c.repeats, seed, c.missed_by_detector)
    return Splits(train, splits.validation, splits.test), plan
