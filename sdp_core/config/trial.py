"""The trial config: every section, and the mechanism's settings from the mechanism registry.

YAML in, the same YAML out: `TrialConfig.model_dump(mode="json")` re-runs a trial with the same data and
initialisation (its DP noise is secret). `mechanism:` is validated by the settings class its `name` registered
(`sdp_core.config.mechanism`), so a new mechanism needs no edit here.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializeAsAny, ValidatorFunctionWrapHandler, field_validator, model_validator

from sdp_core.config.base import Strict
from sdp_core.config.data import DataConfig
from sdp_core.config.detector import DetectorConfig, default_policy
from sdp_core.config.mechanism import MECHANISM_SETTINGS, MechanismSettings, settings_class
from sdp_core.config.model import ModelConfig, TokenizerConfig
from sdp_core.config.training import EvaluationConfig, PrivacyConfig, TrainingConfig


class TrialConfig(Strict):
    name: str = "trial"
    seed: int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    detector: DetectorConfig = Field(default_factory=DetectorConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    mechanism: SerializeAsAny[MechanismSettings] = Field(default_factory=lambda: settings_class("dpsgd")())
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

    @field_validator("mechanism", mode="wrap")
    @classmethod
    def _registered_settings(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> MechanismSettings:
        """A mapping is validated by the settings class its `name` registered (problems keep their YAML path)."""
        if isinstance(value, dict):
            if "name" not in value:
                raise ValueError("needs a `name` (a registered mechanism)")
            value = settings_class(value["name"]).model_validate(value)
        return handler(value)

    @model_validator(mode="after")
    def _coherent(self) -> "TrialConfig":
        problem = self.mechanism.trial_problem(self)
        if problem:
            raise ValueError(problem)
        if self.model.task == "classification":
            self._check_classification()
        return self

    def _check_classification(self) -> None:
        """What a classifier can be trained with: labelled data, and the mechanisms that need no token structure."""
        arch = f"model.arch {self.model.arch} (a classifier)"
        if "classification" not in self.mechanism.tasks:
            supported = [n for n, c in MECHANISM_SETTINGS.items() if "classification" in c.tasks]
            raise ValueError(f"mechanism {self.mechanism.name} is for language models; {arch} supports "
                             f"{', '.join(supported)}")
        if self.data.source == "customersim":
            raise ValueError(f"{arch} needs labelled data: data.source synthetic_classification, hf (glue/...) or file")
        if self.data.canaries is not None:
            raise ValueError(f"data.canaries measure a language model's exposure; {arch} has none")
        if (self.tokenizer.kind == "pretrained") != bool(self.model.name_or_path):
            raise ValueError(f"{arch}: a pretrained model needs its own tokenizer (tokenizer.kind pretrained) and a "
                             "preset one the BPE tokenizer, which fix the pad id it masks")
