"""CRT: Confidentially Redacted Training (Zhao et al., NAACL 2022, paper 002).

The paper's data points are sentences; here a sentence unit is a line (a dialog turn, or one line of a
plain-text record). Dedup marks the second and later copies of a sentence; redaction replaces them and every
span of the policy π with `<mask>`. A line flagged by π or by the conservative π_c, or holding a `<mask>`, is
private; the rest are public.

Lines are trained in the context of their record, the unit every mechanism is evaluated on:
- D_pub holds every record with a public line, each private line replaced by one `<mask>` (no loss on it, and
  none of its text): the public lines keep their record's positions and neighbours, and no private text reaches
  a step without noise.
- D_pri holds every record with a private line, redacted (π and dedup), and DP-SGD samples and clips records
  with q = B/|D_pri|. A record contains each of its sentences, so record-level confidentiality bounds every
  sentence's; the `<mask>` pattern is fixed by the redaction, which neighbouring datasets share.
Each epoch is one SGD epoch on D_pub then one DP-SGD epoch on D_pri, and a minibatch never mixes the two sets.
An epoch is then two record epochs of optimizer steps, not one step per line batch.

Claims (ε, δ)-confidentiality from the DP-SGD part, which holds only if π_c flags every secret π misses
(Zhao et al. 2022, Thm 8.1). Where gold spans show a secret masked by neither, it trained without noise in D_pub:
the trial's guarantee is then ε = ∞ (notion `none`), and `confidentiality` (in the details) keeps the
conditional (ε, δ) with `holds: false` and why. With gold spans, CRT also claims Bayesian confidentiality
ε_b = log(1 + γ(e^ε − 1)), δ_b = γδ + δ₂ (Thm 8.3), γ the share of gold secrets π does not fully mask and δ₂ the
share neither π nor π_c fully masks, both at their 95 % one-sided Clopper–Pearson upper bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sdp_core.config.detector import DetectorConfig
from sdp_core.config.mechanism import CRTConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.data.records import Record, Span
from sdp_core.detectors import detect_records, get_policy
from sdp_core.detectors.evaluation import evaluate
from sdp_core.errors import UserError
from sdp_core.mechanisms.base import MechanismPlan, calibrate, private_phase, public_phase
from sdp_core.mechanisms.registry import register_mechanism
from sdp_core.preparation import TrialData
from sdp_core.privacy import PrivacyLedger, bayesian_confidentiality_report, crt_gamma_delta2
from sdp_core.privacy.confidentiality import confidentiality_claim
from sdp_core.text.dedup import duplicate_spans
from sdp_core.tensors import LMData
from sdp_core.text.encode import OnLong, encode
from sdp_core.text.redaction import MASK, redact


def line_units(records: Sequence[Record], spans: Sequence[Sequence[Span]]
               ) -> tuple[list[str], list[list[Span]], list[tuple[Span, ...] | None], list[int]]:
    """Every non-blank line of every record, with the policy's spans and the gold spans moved into the line's
    coordinates, and the index of the record it comes from."""
    texts, unit_spans, unit_gold, owners = [], [], [], []
    for r, (record, detected) in enumerate(zip(records, spans)):
        start = 0
        for line in record.text.split("\n"):
            end = start + len(line)
            inside = lambda ss: [Span(s.start - start, s.end - start, s.label)  # noqa: E731
                                 for s in ss if s.start < end and start < s.end]
            if line.strip():
                texts.append(line)
                unit_spans.append([Span(max(s.start, 0), min(s.end, len(line)), s.label) for s in inside(detected)])
                unit_gold.append(tuple(inside(record.spans)) if record.spans is not None else None)
                owners.append(r)
            start = end + 1
    return texts, unit_spans, unit_gold, owners


def in_context(records: Sequence[Record], lines: list[str], private: list[bool]) -> tuple[list[str], list[str]]:
    """The records rebuilt from their `lines` (in `line_units` order; blank lines kept): (D_pri, D_pub).

    D_pri: each record with a private line, every line as given (redacted). D_pub: each record with a public line,
    every private line replaced by one `<mask>`.
    """
    pri, pub, u = [], [], 0
    for record in records:
        as_private, as_public, flags = [], [], []
        for line in record.text.split("\n"):
            if line.strip():
                as_private.append(lines[u])
                as_public.append(MASK if private[u] else lines[u])
                flags.append(private[u])
                u += 1
            else:
                as_private.append(line)
                as_public.append(line)
        if any(flags):
            pri.append("\n".join(as_private))
        if not all(flags):
            pub.append("\n".join(as_public))
    return pri, pub


@dataclass(frozen=True)
class CRTSplit:
    """CRT's split of the training records' lines (`crt_split`), which depends on the data and its settings alone:
    D_pri and D_pub as rows, the counts the report gives, and, with gold spans, the gold secrets, those π does not
    fully mask and those neither π nor π_c does (None without gold)."""

    private_rows: LMData
    public_rows: LMData | None  # None: every record has a private line
    units: int
    private_units: int
    private_records: int
    public_records: int
    duplicates_masked: int
    conservative_policy: str
    gold_secrets: int | None
    missed_by_policy: int | None
    missed_by_both: int | None


def crt_split(d: TrialData, detector: DetectorConfig, dedup: bool, max_length: int, on_long: OnLong) -> CRTSplit:
    """Every training line, deduplicated (`dedup`) and redacted by π, flagged private by π, π_c (the `detector`
    settings' conservative policy) or a `<mask>`, and rebuilt into D_pri and D_pub (`in_context`) as rows: read
    from the records once per data setting (`TrialData.derived`), so that a sweep's CRT trials do not read them."""
    records = d.fetch_records()
    texts, pi_spans, gold, _ = line_units(records.splits.train, records.train_spans)
    dups = duplicate_spans(texts) if dedup else [[] for _ in texts]
    conservative = get_policy(detector.conservative_policy, detector)
    pi_c_spans = detect_records(texts, conservative)
    redacted = [redact(t, sorted({*s, *u})) for t, s, u in zip(texts, pi_spans, dups)]
    private = [bool(s or c) or MASK in r for s, c, r in zip(pi_spans, pi_c_spans, redacted)]
    if not any(private):
        raise UserError("CRT found no private records (π and π_c flag nothing): use No-DP or a stronger policy")
    pri, pub = in_context(records.splits.train, redacted, private)
    rows = lambda texts: encode(texts, [()] * len(texts), d.tokenizer, max_length, on_long=on_long)  # noqa: E731
    secrets = missed_by_policy = missed_by_both = None
    if all(g is not None for g in gold):
        units = [Record(t, g) for t, g in zip(texts, gold)]
        caught = evaluate(units, pi_spans).secrets
        caught_by_either = evaluate(units, [sorted({*a, *b}) for a, b in zip(pi_spans, pi_c_spans)]).secrets
        secrets, missed_by_policy = caught.n, caught.n - caught.k
        missed_by_both = caught_by_either.n - caught_by_either.k
    return CRTSplit(rows(pri), rows(pub) if pub else None, len(texts), sum(private), len(pri), len(pub),
                    sum(len(u) for u in dups), conservative.name, secrets, missed_by_policy, missed_by_both)


def crt(d: TrialData, cfg: TrialConfig) -> MechanismPlan:
    m = cfg.mechanism
    assert isinstance(m, CRTConfig)
    split = d.derived(crt_split, cfg.detector, m.dedup, cfg.data.max_length, cfg.data.on_long_records)

    # One public and one private phase per epoch, in alternation; σ is the same for every private epoch.
    phases = []
    for epoch in range(cfg.training.epochs):
        if split.public_rows is not None:
            phases.append(public_phase(f"public_{epoch}", split.public_rows, cfg, 1))
        phases.append(private_phase(f"private_{epoch}", split.private_rows, cfg, 1))

    missed_by_both, estimates = split.missed_by_both, None  # None: no gold spans to check π and π_c against
    if split.gold_secrets:  # no gold secret at all leaves nothing to estimate γ and δ₂ from
        assert split.missed_by_policy is not None and missed_by_both is not None
        estimates = crt_gamma_delta2(split.missed_by_policy, missed_by_both, split.gold_secrets)
    phases, ledger = calibrate(phases, cfg, notion="confidentiality", held_out=d.validation, touches="private")
    if missed_by_both:  # a gold secret neither policy masks trained without noise in D_pub: no (ε, δ) holds for it
        ledger = PrivacyLedger.from_dict({**ledger.to_dict(), "notion": "none"})

    p = cfg.privacy
    details = {"units": split.units, "private_units": split.private_units,
               "public_units": split.units - split.private_units, "private_records": split.private_records,
               "public_records": split.public_records, "trained_as": "records (lines in context)",
               "duplicates_masked": split.duplicates_masked, "conservative_policy": split.conservative_policy,
               "confidentiality": confidentiality_claim(ledger.plan, p.delta, p.accountant, missed_by_both)}
    derived = ["CRT's split of the training lines by π, π_c and dedup, counted without noise: the sizes of D_pri "
               "(q = B/|D_pri| uses it) and D_pub (it sets the public steps) (`mechanism.units`, "
               "`mechanism.private_units`, `mechanism.public_units`, `mechanism.private_records`, "
               "`mechanism.public_records`, `mechanism.duplicates_masked`), and Thm 8.1's condition checked on the "
               "training records' gold spans (`mechanism.confidentiality.holds`, `mechanism.confidentiality.condition`)"]
    if estimates:
        details["bayesian_confidentiality"] = bayesian_confidentiality_report(ledger.plan, p.delta, p.accountant,
                                                                              **estimates)
        derived.append("CRT's γ and δ₂, the per-secret miss rates of π estimated on the training records' gold spans "
                       "without noise, and the Bayesian confidentiality built on them "
                       "(`mechanism.bayesian_confidentiality`)")
    return MechanismPlan(phases, ledger, details, derived)


register_mechanism("crt", crt)
