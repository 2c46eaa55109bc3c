"""Pydantic models for trials, search spaces and sweeps: the one source of truth for every setting.

YAML in, the same YAML out: `TrialConfig.model_dump(mode="json")` re-runs a trial bit-for-bit with its seed.
Unknown keys are rejected everywhere (`extra="forbid"`), and every validation problem is reported as one line
with its YAML path (`privacy.target_epsilon: must be > 0`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sdp_core.data.canaries import CanaryFormat
from sdp_core.errors import ConfigError, UserError
from sdp_core.io import read_yaml


class Strict(BaseModel):
    """Base for every config block: unknown keys are errors, values are re-validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ----------------------------------------------------------------------------------------------- data


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

    @field_validator("format")
    @classmethod
    def _one_placeholder(cls, v: str) -> str:
        try:
            CanaryFormat.parse(v)
        except UserError as e:
            raise ValueError(e.message) from None
        return v


# Defaults that depend on the data source, filled in only where the YAML leaves the key out.
SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "synthetic_classification": {"n_train": 2_000, "n_validation": 200, "n_test": 200, "max_length": 96},
}


def _value_defaults(data: Any, key: str, defaults: dict[str, dict[str, Any]]) -> Any:
    """A `before` validator's helper: add the defaults of `data[key]`'s value for the keys `data` does not set."""
    if isinstance(data, dict) and isinstance(data.get(key), str) and data[key] in defaults:
        return {**data, **{k: v for k, v in defaults[data[key]].items() if k not in data}}
    return data


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
    path: str | None = Field(None, description="JSONL / Parquet / text file, for source=file")
    hf_name: str | None = Field(None, description="for source=hf: a hub name (`wikitext-2-raw-v1`, `glue/sst2`, ...) "
                                "or a local path: a `save_to_disk` folder, or Parquet / Arrow / JSON(L) files (one "
                                "file, or a folder of shards named by split)")
    text_fields: list[str] | None = Field(None, min_length=1, description="source=hf: the columns joined by a newline "
                                          "into a record's text; default: the hub dataset's own (glue/qnli: question, "
                                          "sentence), else `text`")
    label_field: str = Field("label", min_length=1, description="source=hf: the column of integer class labels "
                             "(read when the dataset has it)")
    splits: SplitNames = Field(default_factory=SplitNames, description="source=hf: split names")
    # The generator's own default is 10,000 / 1,000 / 1,000 dialogs; a trial's embedded default is smaller so a
    # DP-SGD trial (detection, tokenizer, training, evaluation) fits in ~3 minutes on 2 CPU cores.
    n_train: int = Field(4_000, ge=1)
    n_validation: int = Field(400, ge=1)
    n_test: int = Field(400, ge=1)
    validation_fraction: float = Field(0.1, gt=0, lt=1, description="held out of train for each split the data "
                                       "lacks (a file; a HF dataset without validation or test)")
    max_length: int = Field(192, ge=8, description="tokens per row, `<eos>` framing included (the default holds "
                            "every CustomerSim dialog with a canary line: at most ~180)")
    on_long_records: Literal["split", "refuse"] = Field(
        "split", description="a record longer than a row: split into windows (each then a privacy unit: a record "
        "of w windows is protected as a group of w, and the result says so), or refuse the data. A labelled record "
        "is never split: its tokens past one row are dropped and counted")
    canaries: CanaryConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _source_defaults(cls, data: Any) -> Any:
        return _value_defaults(data, "source", SOURCE_DEFAULTS)

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


# ------------------------------------------------------------------------------------------- detector


# The detector policy of a data source when the config names none: CustomerSim's own policy for CustomerSim, the
# general one (identifier shapes, entities, proper nouns; no format assumed) for every other source.
SOURCE_POLICIES: dict[str, str] = {"customersim": "customersim"}
DEFAULT_POLICY = "general"


def default_policy(source: str) -> str:
    """The detector policy a trial on data from `source` uses when its config names none."""
    return SOURCE_POLICIES.get(source, DEFAULT_POLICY)


class DetectorConfig(Strict):
    policy: str = Field(DEFAULT_POLICY, description="a policy name or a union `a,b` (see sdp_core.detectors); in a "
                        "trial left out: `default_policy(data.source)`, `customersim` for CustomerSim, else `general`")
    conservative_policy: str = Field("conservative", description="π_c: the high-recall policy CRT uses")
    patterns: dict[str, str] = Field(default_factory=dict, description="user regex policies: name -> pattern")
    spacy_model: str = "en_core_web_sm"
    miss_rate: float = Field(0.0, ge=0, lt=1, description="γ: the policy misses this fraction of distinct secret "
                             "values, canaries included (recall experiments; π_c is unaffected)")

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, v: dict[str, str]) -> dict[str, str]:
        import re

        for name, pattern in v.items():
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"invalid regex for policy {name!r}: {e}") from None
        return v


# ------------------------------------------------------------------------------------------ tokenizer


class TokenizerConfig(Strict):
    kind: Literal["bpe", "pretrained"] = "bpe"
    vocab_size: int = Field(4000, ge=300)
    name_or_path: str | None = None
    corpus: Literal["training", "public"] = Field(
        "training", description="what the BPE learns from: the policy-redacted training text (a DP guarantee does "
        "not cover it; the privacy report says so), or public text (tokenizer.public_path, or for CustomerSim "
        "dialogs generated apart from the data) that no guarantee needs to cover")
    public_path: str | None = Field(None, description="JSONL / Parquet / text file of public text, for corpus=public")

    @model_validator(mode="after")
    def _pretrained_needs_name(self) -> "TokenizerConfig":
        if self.kind == "pretrained" and not self.name_or_path:
            raise ValueError("kind=pretrained needs tokenizer.name_or_path")
        return self


# ---------------------------------------------------------------------------------------------- model


# What each architecture learns: next-token language modelling, or sequence classification (one label per record).
ARCH_TASKS = {"gpt2": "lm", "lstm": "lm", "roberta": "classification"}
ARCH_DEFAULTS: dict[str, dict[str, Any]] = {"lstm": {"preset": "lstm-200"}, "roberta": {"preset": "roberta-tiny"}}


class ModelConfig(Strict):
    arch: Literal["gpt2", "lstm", "roberta"] = "gpt2"
    preset: str | None = Field("gpt2-tiny", description="gpt2-tiny | gpt2-small | lstm-200 | roberta-tiny | "
                               "roberta-base; defaults to the arch's smallest")
    name_or_path: str | None = Field(None, description="HF from_pretrained name or local path (overrides preset)")
    dropout: float = Field(0.0, ge=0, lt=1)
    num_labels: int = Field(2, ge=2, description="classes of a classifier (model.arch roberta); 3 for MNLI")

    @model_validator(mode="before")
    @classmethod
    def _arch_defaults(cls, data: Any) -> Any:
        return _value_defaults(data, "arch", ARCH_DEFAULTS)

    @property
    def task(self) -> str:
        """`lm` or `classification` (ARCH_TASKS)."""
        return ARCH_TASKS[self.arch]


# ---------------------------------------------------------------------------------------------- mechanisms


class NoDPConfig(Strict):
    name: Literal["nodp"] = "nodp"


class DPSGDConfig(Strict):
    name: Literal["dpsgd"] = "dpsgd"


class RedactedConfig(Strict):
    name: Literal["redacted"] = "redacted"


class JFTConfig(Strict):
    """Just Fine-tune Twice: phase 1 on redacted data, phase 2 DP-SGD on the original data."""

    name: Literal["jft"] = "jft"
    phase1_mode: Literal["direct", "screened", "light_noise"] = "direct"
    phase1_epochs: int = Field(1, ge=1)
    audit_path: str | None = Field(
        None, description="sampling-audit file (sdp_core.detectors.audit): the screened subset for phase1_mode=screened; "
        "the missing-rate estimate m̃ for light_noise when the data has no gold spans")
    budget_split: float = Field(
        0.1, gt=0, lt=1, description="share of ε given to the light-noise phase 1 (only phase1_mode=light_noise)"
    )

    @model_validator(mode="after")
    def _screened_needs_audit(self) -> "JFTConfig":
        if self.phase1_mode == "screened" and not self.audit_path:
            raise ValueError("phase1_mode=screened needs mechanism.audit_path (a marked sampling audit)")
        return self


class CRTConfig(Strict):
    """Confidentially Redacted Training: dedup, redact, public/private split, alternating epochs."""

    name: Literal["crt"] = "crt"
    dedup: bool = True


class ATDPConfig(Strict):
    """Adaptive token-weighted DP with the rise–reset noise schedule σ_e = σ_{e−1}·γ·ρ_e, reset above σ_max."""

    name: Literal["atdp"] = "atdp"
    base: Literal["none", "nodp", "redacted", "jft"] = "none"
    base_epochs: int = Field(1, ge=1, description="epochs of the base phase when base is not none")
    w: float | None = Field(None, gt=0, le=1, description="weight of non-sensitive tokens; default from α and r_target")
    r_target: float = Field(0.5, gt=0, lt=1)
    function_tokens: list[str] = Field(
        default_factory=lambda: ["the", "a", "to", "of", "and", "is", "you", "I", "my", "your", "."]
    )
    escalation: float = Field(1.05, ge=1.0, description="γ: per-epoch growth of σ")
    jitter: float = Field(0.05, ge=0, lt=1, description="j: ρ_e ~ U[1−j, 1+j]")
    ceiling: float = Field(2.0, gt=1, description="σ_max as a multiple of σ₀; above it σ resets to σ₀")


class SDPSGDConfig(Strict):
    """Selective-DPSGD for recurrent models: public/private segments, noised hidden state."""

    name: Literal["sdpsgd"] = "sdpsgd"
    hidden_clip: float | None = Field(None, gt=0, description="C_h for the hidden state; None = privacy.max_grad_norm")
    hidden_noise_ratio: float = Field(1.0, gt=0, description="σ_h / σ_g (the paper uses 1)")


MechanismConfig = Annotated[
    Union[NoDPConfig, DPSGDConfig, RedactedConfig, JFTConfig, CRTConfig, ATDPConfig, SDPSGDConfig],
    Field(discriminator="name"),
]
MECHANISM_NAMES = ("nodp", "dpsgd", "redacted", "jft", "crt", "atdp", "sdpsgd")
# CRT splits records into lines and ATDP / S-DPSGD weight or segment tokens: all three are language-model methods.
CLASSIFICATION_MECHANISMS = ("nodp", "dpsgd", "redacted", "jft")


# ------------------------------------------------------------------------------------------- privacy


class PrivacyConfig(Strict):
    target_epsilon: float = Field(3.0, gt=0)
    delta: float = Field(1e-5, gt=0, lt=1)
    accountant: Literal["rdp", "prv", "pld"] = "rdp"
    max_grad_norm: float = Field(1.0, gt=0, description="C: per-record clipping norm")
    compare_add_remove: bool = Field(
        False, description="also report ε for add/remove neighbours beside the notion's own relation (SDP and "
        "confidentiality: replace-one), labelled as a comparison with papers, not as the guarantee")
    reproducible_noise: bool = Field(
        False, description="debugging only: draw DP noise and Poisson samples from the trial seed, which every "
        "report publishes, so the guarantee does not hold; default: a secret seed from the OS entropy pool")


# ------------------------------------------------------------------------------------------ training


class TrainingConfig(Strict):
    batch_size: int = Field(32, ge=1, description="expected (Poisson) batch size of private steps")
    learning_rate: float = Field(1e-3, gt=0)
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="cap on optimizer steps per phase")
    private_max_steps: int | None = Field(
        None, ge=1, description="cap on the steps of each private (DP) phase instead of max_steps: equal private "
        "steps across mechanisms whose public phases differ (S-DPSGD: batches; JFT light noise: both its phases)")
    optimizer: Literal["adamw", "sgd"] = "adamw"
    weight_decay: float = Field(0.0, ge=0)
    grad_sample_mode: Literal["hooks", "ghost"] = "hooks"
    workers: int = Field(1, ge=1, description="Ray Train workers for the private phases")
    cpu_per_worker: float = Field(0.5, gt=0, description="CPUs each CPU Ray Train worker asks for (fractional, "
                                  "so that workers fit beside their trial on a small machine)")


class EvaluationConfig(Strict):
    """Canary exposure and membership inference attack a language model's token likelihoods: for a classifier
    (model.arch roberta) they do not apply and are skipped, whatever these flags say."""

    exposure: bool = True
    exposure_method: Literal["exact", "estimate"] = "exact"
    exposure_limit: int = Field(1_000_000, ge=1, description="largest secret space enumerated exactly")
    mia: bool = True
    max_eval_records: int = Field(1000, ge=1)


# ------------------------------------------------------------------------------------------- trial


class TrialConfig(Strict):
    name: str = "trial"
    seed: int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    detector: DetectorConfig = Field(default_factory=DetectorConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    mechanism: MechanismConfig = Field(default_factory=DPSGDConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)

    @model_validator(mode="before")
    @classmethod
    def _source_policy(cls, data: Any) -> Any:
        """A `detector.policy` the config leaves out is its data source's default; a policy it names wins."""
        if not isinstance(data, dict):
            return data
        block, detector = data.get("data", {}), data.get("detector", {})
        if isinstance(detector, DetectorConfig):
            detector = detector.model_dump(exclude_unset=True)
        source = block.source if isinstance(block, DataConfig) else (
            block.get("source", DataConfig.model_fields["source"].default) if isinstance(block, dict) else None)
        if not (isinstance(detector, dict) and isinstance(source, str)) or "policy" in detector:
            return data
        return {**data, "detector": {**detector, "policy": default_policy(source)}}

    @model_validator(mode="after")
    def _coherent(self) -> "TrialConfig":
        if self.mechanism.name == "sdpsgd" and self.model.arch != "lstm":
            raise ValueError("mechanism sdpsgd needs model.arch: lstm (it noises a recurrent hidden state)")
        if self.model.arch == "lstm" and self.training.grad_sample_mode == "ghost":
            raise ValueError("ghost clipping is for the transformer models, not the LSTM")
        if self.model.task == "classification":
            self._check_classification()
        return self

    def _check_classification(self) -> None:
        """What a classifier can be trained with: labelled data, and the mechanisms that need no token structure."""
        arch = f"model.arch {self.model.arch} (a classifier)"
        if self.mechanism.name not in CLASSIFICATION_MECHANISMS:
            raise ValueError(f"mechanism {self.mechanism.name} is for language models; {arch} supports "
                             f"{', '.join(CLASSIFICATION_MECHANISMS)}")
        if isinstance(self.mechanism, JFTConfig) and self.mechanism.phase1_mode == "screened":
            raise ValueError(f"jft phase1_mode=screened is for language models (an audit holds no class labels); "
                             f"{arch}")
        if self.data.source == "customersim":
            raise ValueError(f"{arch} needs labelled data: data.source synthetic_classification, hf (glue/...) or file")
        if self.data.canaries is not None:
            raise ValueError(f"data.canaries measure a language model's exposure; {arch} has none")
        if (self.tokenizer.kind == "pretrained") != bool(self.model.name_or_path):
            raise ValueError(f"{arch}: a pretrained model needs its own tokenizer (tokenizer.kind pretrained) and a "
                             "preset one the BPE tokenizer, which fix the pad id it masks")


# -------------------------------------------------------------------------------------- search space


class Distribution(Strict):
    """One searchable parameter: `uniform`/`loguniform` (low, high), `int` (low, high), or `choice` (values)."""

    type: Literal["uniform", "loguniform", "int", "choice"]
    low: float | None = None
    high: float | None = None
    values: list[Any] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> "Distribution":
        if self.type == "choice":
            if not self.values:
                raise ValueError("choice needs a non-empty `values` list")
        else:
            if self.low is None or self.high is None:
                raise ValueError(f"{self.type} needs `low` and `high`")
            if self.low > self.high:
                raise ValueError("low must be <= high")
            if self.type == "loguniform" and self.low <= 0:
                raise ValueError("loguniform needs low > 0")
        return self


class SearchSpace(Strict):
    """Parameters keyed by their dotted path in the trial config, e.g. `training.learning_rate`."""

    parameters: dict[str, Distribution]

    @field_validator("parameters")
    @classmethod
    def _not_empty(cls, v: dict[str, Distribution]) -> dict[str, Distribution]:
        if not v:
            raise ValueError("search space is empty")
        return v


# -------------------------------------------------------------------------------------------- sweep


class Objective(Strict):
    metric: str
    mode: Literal["min", "max"]


def _distinct_seeds(v: list[int] | None) -> list[int] | None:
    if v is not None and (not v or len(set(v)) != len(v)):
        raise ValueError("seeds must be a non-empty list of distinct seeds")
    return v


class Experiment(Strict):
    """One arm of a fixed-grid sweep: the base trial with `set` applied (dotted paths, as `--set`), once per seed."""

    set: dict[str, Any] = Field(default_factory=dict, description="dotted path -> value, applied to `base`")
    seeds: list[int] | None = Field(None, description="this arm's seeds; default: the sweep's `seeds`")

    _seeds = field_validator("seeds")(_distinct_seeds)

    @field_validator("set")
    @classmethod
    def _not_identity(cls, v: dict[str, Any]) -> dict[str, Any]:
        if {"seed", "name"} & set(v):
            raise ValueError("`seed` and `name` come from the arm and its seeds, not from `set`")
        return v


class Claim(Strict):
    """A paper's claim as an ordering of two arms' mean `metric` over their seeds (`kind: less`), or a trend of
    the mean along a list of arms (`kind: increasing`). Evaluated by the report (sdp_core.report.findings).

    `less` holds when mean(higher) − mean(lower) > `by` (and, with `ratio`, when mean(lower) ≤ ratio·mean(higher));
    `by` < 0 allows the lower arm to be up to |by| above (`reaches the same level`).
    """

    text: str
    kind: Literal["less", "increasing"] = "less"
    metric: str = Field(description="a metric of the rows, or `<guarantee>.<field>` of a further privacy report "
                        "(`bayesian_confidentiality.epsilon`)")
    lower: str | None = None
    higher: str | None = None
    by: float = 0.0
    ratio: float | None = Field(None, gt=0)
    arms: list[str] = Field(default_factory=list, description="for `increasing`: arms in order of the x axis")

    @model_validator(mode="after")
    def _arms_for_kind(self) -> "Claim":
        if self.kind == "less" and not (self.lower and self.higher):
            raise ValueError("kind less needs `lower` and `higher` arms")
        if self.kind == "increasing" and len(self.arms) < 2:
            raise ValueError("kind increasing needs at least two `arms`")
        return self

    def arm_names(self) -> list[str]:
        return [self.lower, self.higher] if self.kind == "less" else list(self.arms)


class ResourcesConfig(Strict):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)


class SweepConfig(Strict):
    name: str
    seed: int = 0
    base: TrialConfig = Field(default_factory=TrialConfig, description="settings every trial starts from")
    mechanisms: list[str] = Field(default_factory=lambda: ["dpsgd"])
    objectives: list[Objective] = Field(
        default_factory=lambda: [Objective(metric="val_perplexity", mode="min"), Objective(metric="exposure_mean", mode="min")]
    )
    search_space: SearchSpace | str | None = Field(None, description="inline parameters or a file in search_spaces/")
    experiments: dict[str, Experiment] | None = Field(
        None, description="a fixed grid instead of a search: named arms × seeds (findings, controlled comparisons)")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], description="seeds of every experiment arm")
    claims: list[Claim] = Field(default_factory=list, description="orderings of arms the report checks")
    num_trials: int = Field(8, ge=1)
    concurrency: int = Field(1, ge=1)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    early_stopping: bool = Field(False, description="ASHA on the held-out validation loss")
    report_interval: float = Field(5.0, ge=0, description="seconds between a trial's progress reports to Ray Tune")
    keep_models: Literal["front", "all", "none"] = Field(
        "front", description="which trials keep their model under OUT/models/ (DP noise is secret: a model cannot "
        "be re-trained from its config): the Pareto front's, every trial's, or none")

    _seeds = field_validator("seeds")(_distinct_seeds)

    @model_validator(mode="before")
    @classmethod
    def _grid_derived(cls, data: Any) -> Any:
        """A grid sweep's trial count and mechanisms follow from its arms; they are not set by hand."""
        if not (isinstance(data, dict) and isinstance(data.get("experiments"), dict)):
            return data
        try:
            arms = [a if isinstance(a, dict) else {} for a in data["experiments"].values()]
            seeds = data.get("seeds", [0, 1, 2])
            base = data.get("base") if isinstance(data.get("base"), dict) else {}
            names = [str((apply_settings(base, a["set"]) if isinstance(a.get("set"), dict) else base)
                         .get("mechanism", {}).get("name", "dpsgd")) for a in arms]
            count = sum(len(a.get("seeds") or seeds) for a in arms)
        except (AttributeError, TypeError):  # malformed arms: the field validators report them, one line each
            return data
        derived = {"num_trials": max(count, 1), "mechanisms": list(dict.fromkeys(names)) or ["dpsgd"],
                   "search_space": None}
        # A stored sweep.yaml repeats the derived values; a hand-written one that sets them otherwise is wrong.
        same = lambda k: (set(data[k]) == set(derived[k]) if k == "mechanisms" and isinstance(data[k], list)  # noqa: E731
                          else data[k] == derived[k])
        given = next((k for k in derived if k in data and not same(k)), None)
        if given:
            raise ValueError(f"{given}: not used with `experiments` (a grid sweep runs every arm × seed)")
        return {**data, **derived}

    @model_validator(mode="after")
    def _search_or_grid(self) -> "SweepConfig":
        if (self.search_space is None) == (self.experiments is None):
            raise ValueError("a sweep needs exactly one of `search_space` (a search) and `experiments` (a grid)")
        if self.experiments is not None:
            if not self.experiments:
                raise ValueError("experiments: at least one arm is needed")
            if self.early_stopping:
                raise ValueError("early_stopping: a grid runs every arm to the end (its claims compare whole runs)")
            bad = next((n for n in self.experiments if not n.replace("_", "").isalnum()), None)
            if bad is not None:
                raise ValueError(f"experiments: arm name {bad!r} must be letters, digits and _")
        unknown = [a for c in self.claims for a in c.arm_names() if a not in (self.experiments or {})]
        if unknown:
            raise ValueError(f"claims: arm {unknown[0]!r} is not in experiments")
        return self

    @field_validator("mechanisms")
    @classmethod
    def _known_mechanisms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one mechanism is needed")
        unknown = [m for m in v if m not in MECHANISM_NAMES]
        if unknown:
            raise ValueError(f"unknown mechanism {unknown[0]!r} (known: {', '.join(MECHANISM_NAMES)})")
        return v


# ------------------------------------------------------------------------------------------ loading

_MESSAGES = {
    "greater_than": "must be > {gt:g}",
    "greater_than_equal": "must be >= {ge:g}",
    "less_than": "must be < {lt:g}",
    "less_than_equal": "must be <= {le:g}",
    "extra_forbidden": "unknown key",
    "missing": "required",
}


def _problems(err: ValidationError) -> list[str]:
    """One line per problem: `yaml.path: message`, with the discriminator's tag left out of the path."""
    lines = []
    errors = err.errors()
    for e in errors:
        if (e["type"] == "string_type" and e["loc"][-1:] == ("str",)
                and any(o is not e and o["loc"][: len(e["loc"]) - 1] == e["loc"][:-1] for o in errors)):
            continue  # `SearchSpace | str` given a mapping: report the mapping's problems, not "not a string"
        loc = [str(p) if str(p).isprintable() else repr(p)  # a key with a newline must not break the one line
               for p in e["loc"] if not (isinstance(p, str) and p in MECHANISM_NAMES and "mechanism" in e["loc"])
               and p != "SearchSpace"]
        template = _MESSAGES.get(e["type"])
        msg = template.format(**(e.get("ctx") or {})) if template else e["msg"]
        msg = " ".join(msg.removeprefix("Value error, ").split())
        lines.append(f"{'.'.join(loc) or '(top level)'}: {msg}")
    return lines


def parse_model(cls: type[BaseModel], data: Any, where: str | None = None) -> Any:
    """Validate `data` as `cls`; every problem becomes one line of a ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], where)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_problems(e), where) from None


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """`training.batch_size=64` -> (['training', 'batch_size'], 64); the value is read as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set expects key.path=value, got {assignment!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        problem = " ".join(str(getattr(e, "problem", None) or "invalid YAML").split())
        raise UserError(f"--set {assignment!r}: the value is not valid YAML ({problem})") from None
    return key.strip().split("."), value


def _set_path(data: dict, path: list[str], value: Any) -> None:
    """Set `data[path[0]]...[path[-1]] = value` in place, making (or replacing non-mapping) parents as needed."""
    for part in path[:-1]:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[path[-1]] = value


def apply_settings(data: dict, settings: dict[str, Any]) -> dict:
    """A copy of a raw config mapping with dotted paths set (validation happens afterwards, as for the file)."""
    data = copy.deepcopy(data)
    for key, value in settings.items():
        _set_path(data, key.split("."), copy.deepcopy(value))
    return data


def apply_overrides(data: dict, assignments: list[str]) -> dict:
    """A copy of a raw config mapping with `--set key.path=value` assignments applied, in order."""
    data = copy.deepcopy(data)
    for assignment in assignments:
        _set_path(data, *parse_override(assignment))
    return data


def load_trial_config(path: str | Path | None, overrides: list[str] = ()) -> TrialConfig:
    data = read_yaml(path) if path else {}
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], str(path))
    return parse_model(TrialConfig, apply_overrides(data, list(overrides)), str(path) if path else "--set")


def load_search_space(ref: SearchSpace | str, relative_to: Path | None = None, where: str | None = None) -> SearchSpace:
    """An inline search space, or a file: looked up in `search_spaces/` beside the sweep's folder, then as a path."""
    if isinstance(ref, SearchSpace):
        return ref
    roots = [relative_to.parent / "search_spaces", relative_to] if relative_to is not None else []
    candidates = [root / ref for root in roots] + [Path("search_spaces") / ref, Path(ref)]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise ConfigError([f"search_space: file {ref!r} not found in search_spaces/"], where or str(relative_to or ref))
    return parse_model(SearchSpace, read_yaml(path), str(path))


def load_sweep_config(path: str | Path, overrides: list[str] = ()) -> SweepConfig:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): expected a mapping, got {type(data).__name__}"], str(path))
    sweep = parse_model(SweepConfig, apply_overrides(data, list(overrides)), str(path))
    if sweep.experiments is None:
        load_search_space(sweep.search_space, Path(path).parent, str(path))  # a referenced file must exist and validate
    for arm in sweep.experiments or {}:  # every arm must be a valid trial
        try:
            arm_trial_config(sweep, arm, 0)
        except ConfigError as e:
            raise ConfigError([f"experiments.{arm}.set: {p}" for p in e.problems], str(path)) from None
    return sweep


def arm_trial_config(sweep: SweepConfig, arm: str, seed: int) -> TrialConfig:
    """The trial of one grid arm and seed: `base` with the arm's settings, named `<arm>-s<seed>`."""
    settings = {**sweep.experiments[arm].set, "name": f"{arm}-s{seed}", "seed": seed}
    return parse_model(TrialConfig, apply_settings(sweep.base.model_dump(mode="json"), settings))


def detect_kind(data: Any) -> str:
    """Which config a YAML mapping is, for `sdp-sweep validate`: sweep, search space or trial."""
    if isinstance(data, dict) and ("search_space" in data or "experiments" in data):
        return "sweep"
    if isinstance(data, dict) and set(data) == {"parameters"}:
        return "search_space"
    return "trial"


def validate_file(path: str | Path) -> str:
    """Validate any config file; returns its kind or raises ConfigError/UserError."""
    data = read_yaml(path)
    kind = detect_kind(data)
    if kind == "sweep":
        load_sweep_config(path)
    elif kind == "search_space":
        parse_model(SearchSpace, data, str(path))
    else:
        load_trial_config(path)
    return kind


def dump_yaml(model: BaseModel) -> str:
    return yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False)
