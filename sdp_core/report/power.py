"""The power of a sweep's privacy axis: did its positive control memorise?

Canary exposure at the random-rank floor says "not memorised" only of a measurement that can see memorisation.
The sweep's No-DP control (`SweepConfig.control`: no protection, the same data and canaries, a budget at which an
unprotected model memorises) is that check, as a positive control is in any experiment: when its inserted canaries
outrank the held-out ones (one-sided Mann–Whitney p below `SEPARATION_P`), the instrument has power and an exposure
at the floor is evidence; when they do not, no empirical privacy number of the sweep (exposure, membership
inference, the one-run audit) can tell a protected model from a leaky one, and each reads `NO_POWER`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdp_core.config.metrics import METRICS
from sdp_core.report.formatting import fmt, metric_label
from sdp_core.report.load import Trial

SEPARATION_P = 0.01
"""The control has power when its inserted canaries outrank the held-out ones at p below this."""

NO_POWER = "no power: cannot tell"

EMPIRICAL_METRICS = frozenset(name for name, m in METRICS.items() if m.needs is not None)
"""The metrics measured by an attack (canary exposure, the audit, membership inference): blind without power."""


@dataclass(frozen=True)
class Power:
    """The control (None when the sweep has none) and whether its rank test separated inserted from held-out
    canaries (None: no control)."""

    control: Trial | None
    separated: bool | None

    @property
    def blind(self) -> bool:
        """A control ran and did not memorise: every empirical privacy number of the sweep reads `NO_POWER`."""
        return self.separated is False


def sweep_power(control: Trial | None) -> Power:
    """The power a sweep's control shows: separated when it finished with a rank-test p-value below
    `SEPARATION_P`."""
    if control is None:
        return Power(None, None)
    p = control.metric("exposure_p_value")
    return Power(control, control.state == "finished" and p is not None and p < SEPARATION_P)


def _control_numbers(t: Trial, verdict: str) -> str:
    """The control's exposure, AUC and p-value (`verdict`: its comparison with `SEPARATION_P`), then the missed
    family's."""
    interval = t.interval("exposure_mean")
    mean = fmt(t.metric("exposure_mean")) + (f" [{fmt(interval[0])}, {fmt(interval[1])}]" if interval else "")
    missed = t.metric("missed_exposure_mean")
    return (f"mean exposure {mean} bits against the random-rank floor {fmt(t.metric('exposure_floor'))}, "
            f"AUC {fmt(t.metric('exposure_auc'))} of inserted against held-out canaries, one-sided Mann–Whitney "
            f"p = {fmt(t.metric('exposure_p_value'))} {verdict} {SEPARATION_P:g}"
            + (f"; the canaries the policy misses: {fmt(missed)} bits, p = "
               f"{fmt(t.metric('missed_exposure_p_value'))}" if missed is not None else ""))


def power_statement(power: Power, dropped: list[str], trial_tokens: float | None = None) -> str:
    """The report's first word on empirical privacy: the control's numbers and what they allow the rest to say
    (`dropped`: the privacy objectives left off the front for want of power; `trial_tokens`: the most training
    tokens of a compared trial, said beside a control that trained on more)."""
    t = power.control
    if t is None:
        return ("No positive control: this sweep ran no No-DP control on its data (sweep `control:`), so whether its "
                "canaries and attacks can see memorisation at all is unknown; an exposure at the floor is not shown "
                "to mean \"not memorised\".")
    budget = (f"{fmt(t.metric('tokens'))} training tokens, " if t.metric("tokens") is not None else "")
    released = "The control was trained without DP on the sweep's data: its numbers are released outside any ε."
    if power.separated:
        tokens = t.metric("tokens")
        more = (f" The compared trials trained on at most {fmt(trial_tokens)} tokens: part of a trial's distance from "
                "the control is its smaller budget, not its protection." if tokens and trial_tokens
                and tokens > 1.05 * trial_tokens else "")
        return (f"Power: the No-DP control (trial {t.trial_id}, {budget}the sweep's data and canaries) memorised its "
                f"canaries: {_control_numbers(t, '<')}. The privacy numbers below can see "
                f"memorisation at this design and budget: an exposure at the floor is evidence.{more} {released}")
    why = (f"the control did not finish ({t.state})" if t.state != "finished" or t.metric("exposure_p_value") is None
           else f"its inserted canaries do not outrank the held-out ones: {_control_numbers(t, '≥')}")
    objectives = (f" The privacy objective {', '.join(map(metric_label, dropped))} is dropped from the front for that "
                  "reason." if dropped else "")
    return (f"{NO_POWER.capitalize()}: the No-DP control (trial {t.trial_id}, {budget}the sweep's data and canaries) "
            f"shows no memorisation: {why}. A model with no protection is not seen to memorise, so no exposure, audit "
            f"or membership-inference number of this sweep can tell a private model from a leaky one: each reads "
            f"\"{NO_POWER}\".{objectives} {released}")
