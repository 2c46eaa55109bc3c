"""From a `DataConfig` to train / validation / test records, with canaries inserted into train."""

from __future__ import annotations

import random

from sdp_core.config import DataConfig
from sdp_core.data.canaries import CanaryPlan, insert_canaries
from sdp_core.data.customersim import customersim_splits
from sdp_core.data.loaders import load_hf, load_records
from sdp_core.data.records import Record, Splits
from sdp_core.errors import DataError


def _split_file(records: list[Record], cfg: DataConfig, seed: int, where: str) -> Splits:
    """Seeded split of one file into train / validation / test (validation and test each `validation_fraction`)."""
    if len(records) < 3:
        raise DataError(f"{len(records)} records cannot be split into train, validation and test", where)
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    n_held = max(1, round(cfg.validation_fraction * len(records)))
    val, test, train = order[:n_held], order[n_held : 2 * n_held], order[2 * n_held :]
    if not train:
        raise DataError("no training records left after holding out validation and test", where)
    pick = lambda idx: [records[i] for i in sorted(idx)]  # noqa: E731 - keeps file order inside splits
    return Splits(pick(train), pick(val), pick(test))


def load_splits(cfg: DataConfig, seed: int) -> Splits:
    if cfg.source == "customersim":
        return customersim_splits(cfg.n_train, cfg.n_validation, cfg.n_test, seed)
    if cfg.source == "file":
        return _split_file(load_records(cfg.path), cfg, seed, cfg.path)
    if cfg.source == "hf":
        return Splits(load_hf(cfg.hf_name, "train"), load_hf(cfg.hf_name, "validation"), load_hf(cfg.hf_name, "test"))
    raise DataError(f"data.source {cfg.source!r} is not a language-modelling corpus")


def prepare_data(cfg: DataConfig, seed: int) -> tuple[Splits, CanaryPlan | None]:
    """Splits with the configured canaries inserted into the training records."""
    splits = load_splits(cfg, seed)
    if cfg.canaries is None:
        return splits, None
    c = cfg.canaries
    train, plan = insert_canaries(splits.train, c.format, c.count, c.repeats, seed, c.missed_by_detector)
    return Splits(train, splits.validation, splits.test), plan
