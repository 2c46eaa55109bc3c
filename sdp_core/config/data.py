"""Data settings: the source, its sizes and splits, the data seed, row length, and canaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sdp_core.config.base import Strict, _value_defaults
from sdp_core.config.canary import CanaryFormat
from sdp_core.errors import UserError


class CanaryConfig(Strict):
    """m canaries of one format, each inserted n times into the training records at seeded positions with
    probability 1/2 (the one-run audit of Steinke, Nasr & Jagielski 2023); the others are held out.

    `format` holds one placeholder such as `{dddddd}` (six digits) or `{XXXXXX}` (upper-case letters or digits). In
    dialog data a canary is a line of the answering speaker (`USR: My ID is 123456`), in prose a sentence.
    """

    format: str = "My ID is {dddddd}"
    count: int = Field(40, ge=1, description="m: how many distinct canaries are drawn; each is inserted with "
                       "probability 1/2 (about m/2 members, whose mean exposure gets a 95 % interval) or held out")
    repeats: int = Field(10, ge=1, description="n: how many times each inserted canary is inserted")
    missed_by_detector: bool = Field(
        False, description="the detector does not see the canaries, so redaction keeps them (missed-secret experiments)"
    )
    missed_format: str | None = Field(
        None, description="a second family of `count` canaries (each inserted `repeats` times with probability 1/2), "
        "in a format the trial's detector policy misses: what redaction leaves and only a DP part protects. The "
        "policy judges every draw before insertion: `missed_format`'s canaries are draws it misses, `format`'s "
        "draws it flags whole (then redaction removes them), or, where it misses most of them, draws it misses")

    @field_validator("format", "missed_format")
    @classmethod
    def _one_placeholder(cls, v: str | None) -> str | None:
        try:
            if v is not None:
                CanaryFormat.parse(v)
        except UserError as e:
            raise ValueError(e.message) from None
        return v


# Defaults that depend on the data source, filled in only where the YAML leaves the key out.
SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "synthetic_classification": {"n_train": 2_000, "n_validation": 200, "n_test": 200, "max_length": 96},
}


class SplitNames(Strict):
    """Which splits of a `source: hf` dataset are train, validation and test. A validation or test split that is
    not set and not in the dataset is held out of train (`validation_fraction` each)."""

    train: str = "train"
    validation: str | None = Field(None, description="default: the dataset's `validation` split unless it is the "
                                   "test split")
    test: str | None = Field(None, description="default: `test`; for the GLUE hub names `validation` (GLUE hides its "
                             "test labels), and `validation_matched` for glue/mnli")


class DataConfig(Strict):
    source: Literal["customersim", "clinic", "file", "hf", "synthetic_classification"] = "customersim"
    seed: int = Field(0, description="the data seed: records, splits, canary values, missed secrets. A sweep's trials "
                      "share it (they differ in initialisation and sampling only), so they see the same data")
    path: str | None = Field(None, description="for source=file: JSONL, CSV / TSV / Parquet table or plain text "
                             "(one record per blank-line-separated block, or per line when there is no blank line); "
                             "its validation and test sets are each `validation_fraction` of it, held out of train "
                             "(n_train, n_validation and n_test are for generated data)")
    hf_name: str | None = Field(None, description="for source=hf: a hub name (`wikitext-2-raw-v1`, `glue/sst2`, ...) "
                                "or a local path: a `save_to_disk` folder, or Parquet / Arrow / JSON(L) files (one "
                                "file, or a folder of shards named by split)")
    text_fields: list[str] | None = Field(None, min_length=1, description="source=hf, a table file (CSV, TSV, "
                                          "Parquet) or JSONL: the columns (JSONL: keys) joined by a newline into a "
                                          "record's text; default: the hub dataset's own (glue/qnli: question, "
                                          "sentence), else `text`, else the one column holding text (several: "
                                          "refused until named)")
    label_field: str = Field("label", min_length=1, description="source=hf, a table file or JSONL: the column (key) "
                             "of integer class labels (read when the data has it)")
    splits: SplitNames = Field(default_factory=SplitNames, description="source=hf: split names")
    # The generator's own default is 10,000 / 1,000 / 1,000 dialogs; a trial's embedded default is smaller so a
    # DP-SGD trial (detection, tokenizer, training, evaluation) fits in ~3 minutes on 2 CPU cores.
    n_train: int = Field(4_000, ge=1, description="records generated for train (customersim, clinic, synthetic data); "
                         "a file or HF dataset uses every record it has")
    n_validation: int = Field(400, ge=1)
    n_test: int = Field(400, ge=1)
    validation_fraction: float = Field(0.1, gt=0, lt=1, description="held out of train for each split the data "
                                       "lacks (a file; a HF dataset without validation or test)")
    max_length: int = Field(192, ge=8, description="tokens per row, `<eos>` framing included (the default holds "
                            "every CustomerSim dialog with a canary line: at most ~180)")
    on_long_records: Literal["split", "refuse"] = Field(
        "split", description="a record longer than a row: split into windows (the record stays the privacy unit: "
        "its windows are sampled together and clipped as one), or refuse the data. A labelled record is never "
        "split: its tokens past one row are dropped and counted")
    canaries: CanaryConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _source_defaults(cls, data: Any) -> Any:
        return _value_defaults(data, "source", SOURCE_DEFAULTS)

    @property
    def location(self) -> str:
        """What the data is read from: the file (source=file) or the dataset, a hub name or local path (source=hf)."""
        where = self.path if self.source == "file" else self.hf_name
        if where is None:
            raise ValueError(f"data.source {self.source} is generated: it is read from nowhere")
        return where

    @model_validator(mode="after")
    def _source_needs(self) -> "DataConfig":
        if self.source == "file" and not self.path:
            raise ValueError("source=file needs data.path")
        if self.source == "hf" and not self.hf_name:
            raise ValueError("source=hf needs data.hf_name (a hub name or a local dataset path)")
        return self

    @field_validator("hf_name")
    @classmethod
    def _absolute_local_path(cls, v: str | None) -> str | None:
        """An existing relative path becomes absolute: a sweep's trials run in folders of their own."""
        return str(Path(v).resolve()) if v and not Path(v).is_absolute() and Path(v).exists() else v
