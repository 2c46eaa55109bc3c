"""Neighbouring relations: which pairs of datasets an (ε, δ) guarantee compares.

- `add_remove`: D' is D with one record added or removed (unbounded DP; the relation of Abadi et al. 2016's
  DP-SGD analysis and of most DP language-model papers).
- `replace_one`: D' is D with one record replaced by another (bounded DP). Selective DP (Shi et al. 2022,
  Def. 3) and CRT's confidentiality (Zhao et al. 2022, Def. 2) compare a dataset with one whose secret was
  replaced, so they are substitution notions. Under Poisson subsampling the worst case replaces a record's
  clipped contribution by one of the opposite direction, which costs more than adding or removing it.
"""

from __future__ import annotations

from sdp_core.errors import PrivacyError
from sdp_core.privacy.numbers import epsilon_number

ADD_REMOVE = "add_remove"
REPLACE_ONE = "replace_one"

RELATIONS: dict[str, str] = {
    ADD_REMOVE: "add/remove neighbours",
    REPLACE_ONE: "replace-one neighbours",
}
"""Every relation by name, with the words a report prints for it."""


def check_relation(relation: str) -> str:
    """`relation` itself, or PrivacyError naming the known relations."""
    if relation not in RELATIONS:
        raise PrivacyError(f"unknown neighbouring relation {relation!r} (known: {', '.join(RELATIONS)})")
    return relation


def qualifiers(report: dict) -> str:
    """A report's notion, neighbours, δ and accountant in one phrase: `SDP, replace-one neighbours, δ=1e-05, rdp`,
    for an empirical estimate its formal bound, and for a report whose guarantee does not hold (`holds: false`) its
    `condition` (a report without `neighbouring` predates relations and was computed for add/remove neighbours)."""
    relation = RELATIONS.get(report.get("neighbouring", ADD_REMOVE), report.get("neighbouring"))
    phrase = f"{report.get('notion')}, {relation}, δ={report.get('delta'):g}, {report.get('accountant')}"
    formal = report.get("formal")  # an empirical estimate (JFT's light noise) carries its formal bound
    if isinstance(formal, dict) and isinstance(formal.get("epsilon"), (int, float)):
        phrase += f"; {report.get('guarantee')}, formal bound ε={epsilon_number(formal['epsilon'])}"
    if report.get("holds") is False:
        phrase += f"; {report.get('condition') or 'the guarantee does not hold'}"
    return phrase
