"""The privacy cost of the sweep itself: many trials trained on the same data leak more than one.

- `trial_charge`: what one trial cost, at formal sampling rates: its spent privacy when it finished, its whole
  calibrated plan when it published one but its spent steps are unknown (stopped early, failed, killed: an upper
  bound, since the ledger refuses steps past the plan), nothing when it never calibrated (no private step).
- `basic_composition`: k trials with (ε_i, δ_i) together are (Σε_i, Σδ_i)-DP (Dwork et al. 2006); holds for
  any trials, adaptively chosen, all of them released.
- `composed_sweep_cost`: the accountant's composition of every trial's events (tighter than basic).
- `all_trials_cost`: every trial touched the same records, whatever its notion: the composition of every trial's
  counted events, stated under the weakest notion among them (a DP trial's events are charged in full; an SDP or
  confidentiality trial's free public steps stay free). Conservative: it charges every trial to every secret.
- `random_search_cost`: Papernot & Steinke 2022 ("Hyperparameter Tuning with Renyi Differential Privacy",
  Thm 2 for the truncated negative binomial, Thm 6 for the Poisson number of runs): if the number of trials K
  is random with the given distribution and only the best trial is released, the whole search costs roughly
  one trial plus a term logarithmic in E[K], not E[K] trials. The RDP of one run is the pointwise maximum of
  the candidate trials' RDP curves (each trial draws its hyper-parameters, hence its schedule, independently
  of the data), and the bound is dp_accounting's `RepeatAndSelectDpEvent` formula applied to it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from dp_accounting.rdp import compute_epsilon
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_repeat_and_select

from sdp_core.errors import PrivacyError
from sdp_core.privacy.accountants import RDPAccountant
from sdp_core.privacy.accountants.base import check_delta
from sdp_core.privacy.events import GaussianEvent, events_from_dicts
from sdp_core.privacy.light_noise import REAL_SAMPLE_RATES, at_real_rates
from sdp_core.privacy.relations import ADD_REMOVE
from sdp_core.privacy.report import account, counted_events, privacy_report

TRIAL_DISTRIBUTIONS = ("poisson", "truncated_negative_binomial")
NOTION_ORDER = ("DP", "SDP", "confidentiality")
"""Notions a trial's events can be composed under, strongest first: DP protects every record; SDP and
confidentiality protect only secrets and leave public steps free."""
WHOLE_PLAN = "whole plan (spent steps unknown: an upper bound)"
SPENT = "spent steps"


def _tagged(trial_events: Sequence[Sequence[GaussianEvent]]) -> list[GaussianEvent]:
    """Every trial's events, with the trial's index in front of each phase name."""
    return [replace(e, phase=f"trial{i}/{e.phase}") for i, events in enumerate(trial_events) for e in events]


def trial_charge(privacy: Mapping[str, Any], ledger: Mapping[str, Any], spent_known: bool
                 ) -> dict[str, Any] | None:
    """The privacy report one trial is charged in the sweep's cost, with `charged` saying on what basis.

    `privacy` is the trial's spent report (its `formal` bound when it is only an empirical estimate), used when
    `spent_known`; otherwise `ledger`, the plan it published before training (`PrivacyLedger.to_dict()`), is
    charged whole, with light-noise phases at their real sampling rates. None: no plan, so no private step. A
    report whose guarantee does not hold (`holds: false`: noise reproducible from the published seed) is charged
    ε = ∞: nothing bounds what that trial released.
    """
    if spent_known and privacy.get("holds") is False:
        return {**privacy, "epsilon": math.inf, "charged": SPENT}
    if spent_known:
        return {**privacy.get("formal", privacy), "charged": SPENT}
    if not ledger:
        return None
    events = at_real_rates(events_from_dicts(ledger["plan"]), ledger.get(REAL_SAMPLE_RATES, {}))
    return account(events, ledger["delta"], ledger["notion"], ledger["accountant"], charged=WHOLE_PLAN)


def basic_composition(trial_reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """(Σ ε_i, Σ δ_i) over the trials' privacy reports (which must share one notion), for their neighbouring
    relation, or add/remove when they differ; a report without `neighbouring` was computed for add/remove."""
    if not trial_reports:
        raise PrivacyError("no trial to compose")
    notions = {r["notion"] for r in trial_reports}
    if len(notions) != 1:
        raise PrivacyError(f"cannot compose trials under different notions: {', '.join(sorted(notions))}")
    # A replace-one ε also bounds add/remove neighbours (replacing a record by one of zero clipped contribution is
    # removing it), so reports of both relations sum to an add/remove bound.
    relations = {r.get("neighbouring", ADD_REMOVE) for r in trial_reports}
    return privacy_report(
        math.fsum(r["epsilon"] for r in trial_reports),
        math.fsum(r["delta"] for r in trial_reports),
        notions.pop(),
        "basic_composition",
        _tagged([events_from_dicts(r.get("events", [])) for r in trial_reports]),
        relation=relations.pop() if len(relations) == 1 else ADD_REMOVE,
        trials=len(trial_reports),
        conditions="holds for any k trials on the same data, chosen adaptively, all released (basic composition)",
    )


def composed_sweep_cost(
    trial_events: Sequence[Sequence[GaussianEvent]],
    delta: float,
    accountant: str = "rdp",
    notion: str = "DP",
    conditions: str = "holds for these trials' schedules fixed in advance, all trials released",
) -> dict[str, Any]:
    """The accountant's composition of every trial's events at `delta`."""
    return account(_tagged(trial_events), delta, notion, accountant, trials=len(trial_events), conditions=conditions)


def all_trials_cost(trial_reports: Sequence[Mapping[str, Any]], accountant: str = "rdp") -> dict[str, Any]:
    """One bound for every trial on the same data, whatever their notions: each trial's events counted under its
    own notion (`counted_events`), composed by `accountant` at the largest δ, under the weakest notion present
    (`NOTION_ORDER`) and its neighbouring relation (replace-one as soon as one trial is SDP or confidentiality,
    which charges a DP trial's events at least as much as add/remove). Trials without a formal guarantee (notion
    `none`) cannot be in it."""
    if not trial_reports:
        raise PrivacyError("no trial to compose")
    notions = {r["notion"] for r in trial_reports}
    unknown = notions - set(NOTION_ORDER)
    if unknown:
        raise PrivacyError(f"cannot compose trials under {', '.join(sorted(unknown))} with other notions")
    weakest = max(notions, key=NOTION_ORDER.index)
    events = [counted_events(events_from_dicts(r["events"]), r["notion"]) for r in trial_reports]
    return composed_sweep_cost(
        events, max(r["delta"] for r in trial_reports), accountant, weakest,
        conditions=(f"every trial on the same data, all released, schedules fixed in advance: the composition of "
                    f"every trial's counted events ({', '.join(n for n in NOTION_ORDER if n in notions)} trials), "
                    f"stated under the weakest of their notions, {weakest}; conservative, since it charges every "
                    "trial to every secret"),
    )


def random_search_cost(
    trial_events: Sequence[Sequence[GaussianEvent]],
    delta: float,
    mean_trials: float,
    distribution: Literal["poisson", "truncated_negative_binomial"] = "poisson",
    shape: float | None = None,
    relation: str = ADD_REMOVE,
) -> dict[str, Any]:
    """Papernot–Steinke bound for random search with a random number of trials, only the best one released.

    `trial_events` are the candidate trials' schedules (one list per trial; one list when all trials share it).
    `shape` is η of the truncated negative binomial (η = 1 geometric, η → 0 logarithmic); Poisson takes none.
    Each trial's RDP is computed for `relation` neighbours.
    """
    check_delta(delta)
    if distribution not in TRIAL_DISTRIBUTIONS:
        raise PrivacyError(f"unknown trial-count distribution {distribution!r} (known: {', '.join(TRIAL_DISTRIBUTIONS)})")
    if distribution == "poisson" and shape is not None:
        raise PrivacyError("the Poisson number of trials takes no shape")
    if distribution == "truncated_negative_binomial" and (shape is None or not 0 <= shape < math.inf):
        raise PrivacyError(f"truncated_negative_binomial needs a shape η in [0, inf), got {shape}")
    if not mean_trials >= 1:
        raise PrivacyError(f"mean number of trials must be >= 1, got {mean_trials}")
    if not trial_events:
        raise PrivacyError("no trial schedule given")
    eta = math.inf if shape is None else float(shape)  # Poisson: no shape (checked above), η = ∞
    rdp = RDPAccountant()
    one_run = np.max([rdp.curve(events, relation) for events in trial_events], axis=0)
    search = _compute_rdp_repeat_and_select(rdp.orders, one_run, mean_trials, eta)
    name = "Poisson" if distribution == "poisson" else f"truncated negative binomial (η={eta:g})"
    return privacy_report(
        compute_epsilon(rdp.orders, search, delta)[0],
        delta,
        "DP",
        "rdp",
        _tagged(trial_events),
        relation=relation,
        mean_trials=mean_trials,
        distribution=distribution,
        shape=None if distribution == "poisson" else eta,
        conditions=(
            f"holds for random search whose number of trials is drawn from a {name} distribution with mean "
            f"{mean_trials:g}, independently of the data; each trial's hyper-parameters are drawn independently "
            "of the data and of other trials (not adaptive search such as TPE); only the selected trial's model "
            "and score are released, not the other trials' results (Papernot & Steinke 2022)"
        ),
    )
