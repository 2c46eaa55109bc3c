"""Secret detectors (policy functions): regexes, the four spaCy tiers of JFT, CRT's conservative policy π_c,
their unions, evaluation against gold spans, a sampling audit, and a detection cache.

    policy = get_policy("general")                    # or "customersim", "phone,low_entity", a user pattern, ...
    spans = detect_records(records, policy)           # cached per dataset × policy version
    report = evaluate(records, spans)                 # token recall / precision / missing rate, Wilson CIs
"""

from sdp_core.detectors.audit import AuditItem, export_audit, missing_rate, read_audit
from sdp_core.detectors.base import Policy, UnionPolicy, union
from sdp_core.detectors.cache import default_cache_dir, detect_records, fingerprint
from sdp_core.detectors.evaluation import (
    DetectionStats,
    Evaluation,
    LabelRecall,
    Rate,
    detection_stats,
    evaluate,
    masked_share,
    wilson_interval,
    word_offsets,
)
from sdp_core.detectors.regex import BUILTIN_PATTERNS, RegexPolicy
from sdp_core.detectors.registry import CUSTOMERSIM_POLICY, GENERAL_POLICY, POLICIES, get_policy, register_policy
from sdp_core.detectors.spacy_tiers import TIERS, SpacyTierPolicy, load_spacy

__all__ = [
    "AuditItem", "BUILTIN_PATTERNS", "CUSTOMERSIM_POLICY", "DetectionStats", "Evaluation", "GENERAL_POLICY",
    "LabelRecall", "POLICIES", "Policy", "Rate", "RegexPolicy", "SpacyTierPolicy", "TIERS", "UnionPolicy",
    "default_cache_dir", "detect_records", "detection_stats", "evaluate", "export_audit", "fingerprint", "get_policy",
    "load_spacy", "masked_share", "missing_rate", "read_audit", "register_policy", "union", "wilson_interval", "word_offsets",
]  # fmt: skip
