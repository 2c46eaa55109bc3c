"""Detector settings: the policy (by default the data source's), the conservative policy, user patterns."""

from __future__ import annotations

from pydantic import Field, field_validator

from sdp_core.config.base import Strict

# The detector policy of a data source when the config names none: CustomerSim's own policy for CustomerSim, the
# general one (identifier shapes, cards, usernames, facilities, person names read from the text; no format
# assumed) for every other source.
SOURCE_POLICIES: dict[str, str] = {"customersim": "customersim"}
DEFAULT_POLICY = "general"
ESTIMATE_PER_TYPE = 2_500
"""The recall estimate's most inserted secrets per type (`detectors.estimate`): from 2,401 on, a 95 % Wilson
interval is within ±0.02 at any recall."""


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
    estimate_per_type: int = Field(ESTIMATE_PER_TYPE, ge=100, description="data without gold spans: the recall "
                                   "estimate inserts secrets of each type in rounds of 100 until its 95% interval "
                                   "is within ±0.02, at most this many (2,500: one detection each; 100 cost a "
                                   "25th and give ±0.1 at worst)")

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
