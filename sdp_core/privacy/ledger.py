"""The privacy ledger of one trial: the plan calibrated before training, the steps spent while training.

A *phase* is a group of plan events that happen together once per step (S-DPSGD's gradient and hidden-state
releases; one epoch of ATDP's σ schedule); `record_steps(phase, n)` spends n steps of every event of the phase
and refuses, with `PrivacyError`, to go past the plan, so a trial cannot spend more than it was calibrated for.
`to_dict()` is the saved form; `epsilon_from_ledger` recomputes the report from it. Reports use the notion's
neighbouring relation; with `compare_add_remove` a report under a replace-one notion also carries the
add/remove figure, labelled as a comparison with papers that account add/remove neighbours, not as the guarantee.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any, Iterable, Mapping, Self

from sdp_core.errors import PrivacyError
from sdp_core.privacy.accountants import get_accountant
from sdp_core.privacy.accountants.base import check_delta
from sdp_core.privacy.confidentiality import bayesian_confidentiality_report
from sdp_core.privacy.events import GaussianEvent, events_from_dicts, events_to_dicts
from sdp_core.privacy.relations import ADD_REMOVE
from sdp_core.privacy.report import account, get_notion

BAYESIAN = "bayesian_confidentiality"
LEDGER_FORMAT = "sdp-ledger/1"
ADD_REMOVE_LABEL = "for comparison with papers that account add/remove neighbours; not the guarantee"


class PrivacyLedger:
    """Plan and spent steps of one trial under one notion, δ and accountant.

    Under `bayesian_confidentiality` the ledger also needs CRT's γ = 1 − recall(π) and δ₂ = 1 − recall(π_c);
    `delta` is then the δ of the underlying confidentiality guarantee. `compare_add_remove` adds the add/remove
    figure to reports under a notion of another relation (see `report`).
    """

    def __init__(
        self,
        notion: str,
        delta: float,
        accountant: str = "rdp",
        plan: Iterable[GaussianEvent] = (),
        *,
        gamma: float | None = None,
        delta2: float | None = None,
        compare_add_remove: bool = False,
    ):
        get_notion(notion)
        check_delta(delta)
        get_accountant(accountant)
        if (notion == BAYESIAN) != (gamma is not None and delta2 is not None):
            raise PrivacyError(f"gamma and delta2 are given exactly when the notion is {BAYESIAN}")
        self.notion, self.delta, self.accountant = notion, float(delta), accountant
        self.gamma, self.delta2 = gamma, delta2
        self.compare_add_remove = compare_add_remove
        self._plan: list[GaussianEvent] = []
        self._phase_steps: dict[str, int] = {}
        self._spent: dict[str, int] = defaultdict(int)
        self.extend_plan(plan)

    # ------------------------------------------------------------------------------------------ plan/spend

    @property
    def plan(self) -> tuple[GaussianEvent, ...]:
        return tuple(self._plan)

    @property
    def spent_steps(self) -> dict[str, int]:
        return {phase: self._spent[phase] for phase in self._phase_steps}

    def extend_plan(self, events: Iterable[GaussianEvent]) -> None:
        """Add events to the plan; events of one phase must share their step count."""
        for e in events:
            planned = self._phase_steps.setdefault(e.phase, e.steps)
            if planned != e.steps:
                raise PrivacyError(
                    f"phase {e.phase!r} mixes events of {planned} and {e.steps} steps; "
                    "events of one phase happen together once per step"
                )
            self._plan.append(e)

    def record_steps(self, phase: str, n: int = 1) -> None:
        """Spend n steps of `phase`; raises PrivacyError (and spends nothing) past the plan."""
        if phase not in self._phase_steps:
            raise PrivacyError(f"phase {phase!r} is not in the privacy plan (planned: {', '.join(map(repr, self._phase_steps))})")
        if n < 0:
            raise PrivacyError(f"cannot record a negative number of steps ({n})")
        planned = self._phase_steps[phase]
        if self._spent[phase] + n > planned:
            raise PrivacyError(
                f"privacy budget exhausted: phase {phase!r} would take {self._spent[phase] + n} steps "
                f"but {planned} were planned and calibrated"
            )
        self._spent[phase] += n

    def spent_events(self) -> list[GaussianEvent]:
        return [replace(e, steps=self._spent[e.phase]) for e in self._plan]

    @property
    def complete(self) -> bool:
        return all(self._spent[p] == n for p, n in self._phase_steps.items())

    # -------------------------------------------------------------------------------------------- reports

    def _report(self, events: list[GaussianEvent], relation: str | None = None) -> dict[str, Any]:
        if self.notion == BAYESIAN:
            assert self.gamma is not None and self.delta2 is not None, "a Bayesian ledger has γ and δ2"
            return bayesian_confidentiality_report(
                events, self.delta, self.accountant, self.gamma, self.delta2, relation=relation
            )
        return account(events, self.delta, self.notion, self.accountant, relation=relation)

    def epsilon(self) -> float:
        """ε spent so far under the ledger's notion (ε_b for Bayesian confidentiality)."""
        return self._report(self.spent_events())["epsilon"]

    def report(self) -> dict[str, Any]:
        """Spent privacy: `epsilon, delta, notion, accountant, neighbouring, events` (+ `gamma, delta2,
        confidentiality` under Bayesian confidentiality), with `plan` (the same report for the whole plan) and
        `complete`; with `compare_add_remove` and a notion whose relation is not add/remove, also `add_remove`:
        the spent report under add/remove neighbours, with its `label`."""
        spent = self._report(self.spent_events())
        complete = self.complete
        report = {**spent, "plan": spent if complete else self._report(list(self._plan)), "complete": complete}
        if self.compare_add_remove and spent["neighbouring"] != ADD_REMOVE:
            report["add_remove"] = {**self._report(self.spent_events(), ADD_REMOVE), "label": ADD_REMOVE_LABEL}
        return report

    # ---------------------------------------------------------------------------------------- persistence

    def to_dict(self) -> dict[str, Any]:
        data = {
            "format": LEDGER_FORMAT,
            "notion": self.notion,
            "delta": self.delta,
            "accountant": self.accountant,
            "plan": events_to_dicts(self._plan),
            "spent_steps": self.spent_steps,
            "compare_add_remove": self.compare_add_remove,
        }
        if self.notion == BAYESIAN:
            data.update(gamma=self.gamma, delta2=self.delta2)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        if data.get("format") != LEDGER_FORMAT:
            raise PrivacyError(f"not a privacy ledger (expected format {LEDGER_FORMAT!r}, got {data.get('format')!r})")
        try:
            ledger = cls(
                data["notion"],
                data["delta"],
                data["accountant"],
                events_from_dicts(data["plan"]),
                gamma=data.get("gamma"),
                delta2=data.get("delta2"),
                compare_add_remove=data.get("compare_add_remove", False),  # absent from ledgers saved before it
            )
            for phase, n in data["spent_steps"].items():
                ledger.record_steps(phase, n)
        except KeyError as e:
            raise PrivacyError(f"privacy ledger is missing the key {e.args[0]!r}") from None
        return ledger


def epsilon_from_ledger(ledger_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Recompute the report of a saved ledger (`PrivacyLedger.to_dict()`), for `sdp-sweep epsilon --ledger`."""
    return PrivacyLedger.from_dict(ledger_dict).report()
