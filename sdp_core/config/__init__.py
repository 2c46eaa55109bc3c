"""Pydantic settings, one module per layer's block; YAML in, the same YAML out.

- `base`: `Strict`, `parse_model` (every problem one line with its YAML path), dotted-path settings.
- `data`, `detector`, `model` (tokenizer and model), `training` (privacy, training, evaluation): the sections.
- `mechanism`: the base and registry of mechanism settings, and the built-in mechanisms' settings and facts.
- `trial`: `TrialConfig`; `sweep`: search spaces, grids, claims, `SweepConfig`; `loading`: files and validation.

Nothing here imports torch: validating a config or rendering a report never loads the training stack.
`trial`, `sweep` and `loading` are imported by their module names.
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
