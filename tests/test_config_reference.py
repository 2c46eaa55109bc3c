"""docs/config.md is generated from the settings classes and lists every key and metric; it fails when stale."""

from __future__ import annotations

from sdp_core.config.base import known_keys
from sdp_core.config.mechanism import MECHANISM_SETTINGS
from sdp_core.config.metrics import METRICS
from sdp_core.config.reference import reference
from sdp_core.config.sweep import SweepConfig
from sdp_core.config.trial import TrialConfig
from tests.conftest import REPO


def test_docs_config_md_is_the_generated_reference():
    assert (REPO / "docs" / "config.md").read_text() == reference(), (
        "docs/config.md is stale: python -m sdp_core.config.reference > docs/config.md")


def _paths(cls, prefix: str = "") -> set[str]:
    """Every dotted key of a settings class, walked independently of the generator (pydantic's own field maps)."""
    out = set()
    for name in cls.model_fields:
        path = f"{prefix}{name}"
        out.add(path)
        below = known_keys(cls, [name])
        if below and name != "mechanism":
            sub = next(c for c in (getattr(cls.model_fields[name].annotation, "__args__", None)
                                   or (cls.model_fields[name].annotation,)) if hasattr(c, "model_fields"))
            out |= _paths(sub, f"{path}.")
    return out


def test_every_trial_key_every_mechanism_key_and_every_metric_is_listed():
    text = (REPO / "docs" / "config.md").read_text()
    for path in _paths(TrialConfig):
        assert f"| `{path}` |" in text, path
    for name, cls in MECHANISM_SETTINGS.items():
        assert f"### `{name}`" in text
        for field in set(cls.model_fields) - {"name"}:
            assert f"| `mechanism.{field}` |" in text, (name, field)
    for key in set(SweepConfig.model_fields):
        assert f"| `{key}` |" in text, key
    for metric in METRICS:
        assert f"| `{metric}` |" in text, metric
