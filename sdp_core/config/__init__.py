"""Pydantic settings, one module per layer's block; YAML in, the same YAML out.

- `base`: `Strict`, `parse_model` (every problem one line with its YAML path), dotted-path settings.
- `data`, `detector`, `model` (tokenizer and model), `training` (privacy, training, evaluation): the sections.
- `mechanism`: the base and registry of mechanism settings (each mechanism module owns its own class).
- `trial`: `TrialConfig`; `sweep`: search spaces, grids, claims, `SweepConfig`; `loading`: files and validation.

This package re-exports the sections only: `trial`, `sweep` and `loading` import the mechanisms (to know their
settings), which import the sections, so they are imported by their module names.
"""

from sdp_core.config.base import Strict, apply_overrides, apply_settings, parse_model, parse_override
from sdp_core.config.data import CanaryConfig, DataConfig, SplitNames
from sdp_core.config.detector import DetectorConfig, default_policy
from sdp_core.config.mechanism import MECHANISM_SETTINGS, MechanismSettings, register_settings
from sdp_core.config.model import ModelConfig, TokenizerConfig
from sdp_core.config.training import EvaluationConfig, PrivacyConfig, TrainingConfig

__all__ = ["CanaryConfig", "DataConfig", "DetectorConfig", "EvaluationConfig", "MECHANISM_SETTINGS",
           "MechanismSettings", "ModelConfig", "PrivacyConfig", "SplitNames", "Strict", "TokenizerConfig",
           "TrainingConfig", "apply_overrides", "apply_settings", "default_policy", "parse_model", "parse_override",
           "register_settings"]
