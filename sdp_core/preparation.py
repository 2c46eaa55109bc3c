"""A trial's prepared data: records -> detector spans (cached) -> tokenizer trained on redacted text -> tokens with
aligned masks. It depends on the data, detector, tokenizer and model settings alone (`data_key`), never on the
mechanism, training or seed, so the trials of a sweep share it: the sweep prepares each distinct data setting once
and hands it to its trials, and `run_trial` prepares its own when it is given none.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from transformers import PreTrainedTokenizerFast

from sdp_core.config.detector import DetectorConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.data.canaries import Canaries
from sdp_core.data.classification import class_labels
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.loaders import load_records
from sdp_core.data.splits import splits_with_canaries
from sdp_core.data.records import Record, Span, SpanColumns, Splits, record_columns
from sdp_core.detectors import Policy, detect_records, get_policy, masked_share
from sdp_core.detectors.cache import texts_of
from sdp_core.detectors.estimate import estimable_types, estimate_summary
from sdp_core.detectors.evaluation import Evaluation, Rate, evaluate
from sdp_core.detectors.miss import drop_missed
from sdp_core.detectors.registry import policy_types
from sdp_core.detectors.review import Labels, labels_path, review_recall, review_summary
from sdp_core.errors import UserError
from sdp_core.io import fingerprint
from sdp_core.tensors import LMData, memoised, row_counts
from sdp_core.text.encode import encode, encode_windows
from sdp_core.text.redaction import RedactedTexts, redact
from sdp_core.text.tokenizer import cached_bpe_tokenizer, load_pretrained_tokenizer

if TYPE_CHECKING:
    from ray import ObjectRef

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class TrialRecords:
    """Every split's records (their text and gold spans) and the policy's spans of each training record: the part
    of a trial's data that is text, and grows with it (about 1.3 KB a clinic note). Only what reads the text itself
    needs them (CRT's line units, JFT's missing rate from gold spans, membership inference past the sample kept
    beside the rows); a sweep keeps them apart in Ray's object store (`PreparedData.apart`), and a trial of any
    other mechanism never fetches them."""

    splits: Splits  # pickled as arrays (`data.records.Splits`), which Ray's object store keeps as they are
    train_spans: SpanColumns  # policy spans of each training record


@dataclass(frozen=True)
class TrialData:
    """Everything a mechanism may train on, already tokenized.

    `train.sensitive` marks what the detector policy flags (the mechanism's notion of private);
    `train_redacted` is the policy-redacted text, where each sensitive run is one `<mask>` of weight 0.
    Validation and test mark gold spans where the data has them, else the policy's.
    The records themselves (`fetch_records`) are in hand, or, in a sweep's trial, a reference into Ray's object store
    fetched only when read; `train_records` and the first training records (`first_train_records`) are always here.
    """

    records: TrialRecords | ObjectRef | None  # None: held apart (`PreparedData.apart`) and not given back
    train_records: int  # N: how many training records (a record longer than a row is several rows)
    train: LMData
    train_redacted: LMData
    validation: LMData
    test: LMData
    tokenizer: PreTrainedTokenizerFast
    first_train: tuple[Record, ...] = ()  # the first training records, kept beside the rows when the rest is apart
    missing_rate: Rate | None = None  # of the training records' gold secret tokens, the share the policy missed
    # (JFT's m̃, `detectors.evaluation`); None without gold spans. Counted once here, so no trial reads the records
    derivations: dict[str, Any] = field(default_factory=dict, compare=False)  # `derived`'s, kept with the data

    def derived(self, compute: Callable[..., T], *args: object) -> T:
        """`compute(self, *args)`: what a mechanism derives from the data alone (CRT's split of the training lines,
        `mechanisms.crt.crt_split`), computed once per `args` and kept with the data. A sweep plans every mechanism
        before its data goes to the object store (`sweep.prepare.prepare_shared`), so its trials read what was
        derived there instead of the records; `args` name every setting `compute` reads."""
        return memoised(self.derivations, compute, self, *args)

    def fetch_records(self) -> TrialRecords:
        """The records: in hand, or read from Ray's object store (a copy of all of them in this process)."""
        if isinstance(self.records, TrialRecords):
            return self.records
        if self.records is None:
            raise RuntimeError("the records were held apart from this data (PreparedData.apart) and not given back")
        import ray  # only a sweep's trial holds a reference, and Ray is loaded there

        return ray.get(self.records)

    def first_train_records(self, n: int) -> list[Record]:
        """The first `n` training records (membership inference's members): those kept beside the rows when they
        are as many (`PreparedData.apart`), else fetched with the rest (`fetch_records`)."""
        if len(self.first_train) >= min(n, self.train_records):
            return list(self.first_train[:n])
        return list(self.fetch_records().splits.train[:n])


@dataclass(frozen=True)
class PreparedData:
    """A trial's prepared data and what the trial reports of it (counts and rates, never text)."""

    data: TrialData
    canaries: tuple[Canaries, ...]  # each family drawn and inserted (flagged, then missed), for the attacks
    detector: dict  # the policy, redacted share, recall where gold exists, windows, data seed and fingerprint
    timings: dict[str, float]  # seconds spent on data, detect, tokenize

    def apart(self, first_train: int) -> tuple[PreparedData, TrialRecords]:
        """This data without its records, keeping only the first `first_train` training records (the most any trial
        reads as membership inference's members: `evaluation.max_eval_records`), and the records: what every trial
        of a sweep reads, bounded whatever the data's size, and what only some do (`sweep.prepare.SharedData`)."""
        records = self.data.fetch_records()
        kept = tuple(records.splits.train[:first_train])
        return replace(self, data=replace(self.data, records=None, first_train=kept)), records

    def with_records(self, records: TrialRecords | ObjectRef) -> PreparedData:
        """This data with its records given back (`apart`): the records themselves, or their reference in Ray's
        object store, which `TrialData.fetch_records` reads only when a mechanism or an attack needs them."""
        return replace(self, data=replace(self.data, records=records))


def _canary_adjusted(spans: SpanColumns, families: tuple[Canaries, ...]) -> SpanColumns:
    """The detector's spans with each canary family as the policy judged it before insertion (`data.canaries.insert_canaries`):
    a flagged family's spans added, a missed family's carved out (as are a flagged family's in missed-secret
    experiments, `missed_by_detector`)."""
    out: dict[int, list[Span]] = {}  # the lists changed, by record
    for canaries in families:
        redacted = canaries.family == "flagged" and not canaries.missed_by_detector
        by_record: dict[int, list[Span]] = {}
        for ins in canaries.insertions:
            by_record.setdefault(ins.record, []).append(ins.span)
        for r, canary_spans in by_record.items():
            before = out.get(r, spans[r])
            if redacted:
                out[r] = sorted([*before, *canary_spans])
            else:
                out[r] = [s for s in before if not any(s.start < c.end and c.start < s.end for c in canary_spans)]
    return spans.replaced(out)


def _known_secrets(record: Record, detected: Sequence[Span]) -> list[Span]:
    """Detected spans plus gold spans: everything known to be secret, kept out of the tokenizer's vocabulary."""
    return sorted({*detected, *(record.spans or ())})


def public_records(cfg: TrialConfig) -> Sequence[Record]:
    """Public text for the tokenizer: `tokenizer.public_path`, or CustomerSim dialogs generated from a seed
    stream apart from the data's (the same distribution, none of its records)."""
    if cfg.tokenizer.public_path:
        return load_records(cfg.tokenizer.public_path)
    if cfg.data.source == "customersim":
        return generate_customersim(cfg.data.n_train, f"public-{cfg.data.seed}")
    raise UserError("tokenizer.corpus public needs tokenizer.public_path (a file of public text)")


def tokenizer_sample(records: int, cfg: TrialConfig) -> list[int]:
    """The indices, in order, of the records of a corpus of `records` the BPE learns from: `tokenizer.train_records`
    of them drawn by the data seed (`random.Random(data.seed).sample`), or all of them."""
    limit = cfg.tokenizer.train_records
    if limit is None or records <= limit:
        return list(range(records))
    return sorted(random.Random(cfg.data.seed).sample(range(records), limit))


def build_tokenizer(cfg: TrialConfig, train: Sequence[Record], train_spans: Sequence[Sequence[Span]], policy: Policy
                    ) -> PreTrainedTokenizerFast:
    """A pretrained tokenizer, or a BPE trained (once per text, `cached_bpe_tokenizer`) on text with every known
    secret redacted: the training text (`tokenizer.corpus: training`) or public text (`public`), or the seeded
    sample of it that `tokenizer.train_records` allows (`tokenizer_sample`)."""
    if cfg.tokenizer.kind == "pretrained":
        assert cfg.tokenizer.name_or_path is not None, "validated: a pretrained tokenizer is named"
        return load_pretrained_tokenizer(cfg.tokenizer.name_or_path)
    if cfg.tokenizer.corpus == "public":
        public = public_records(cfg)
        train = [public[i] for i in tokenizer_sample(len(public), cfg)]
        train_spans = detect_records(train, policy)
    else:
        sample = tokenizer_sample(len(train), cfg)
        train, train_spans = [train[i] for i in sample], [train_spans[i] for i in sample]
    clean = [redact(r.text, _known_secrets(r, s)) for r, s in zip(train, train_spans)]
    return cached_bpe_tokenizer(clean, cfg.tokenizer.vocab_size)


def data_fingerprint(splits: Splits) -> str:
    """One digest of every split's texts, canaries included: trials on one front must share it."""
    return fingerprint(r.text for part in (splits.train, splits.validation, splits.test) for r in part)


def data_key(cfg: TrialConfig) -> str:
    """What a trial's prepared data depends on: trials with the same key get the same `prepare_trial_data`."""
    classify = cfg.model.task == "classification"  # of the model, preparation reads its task and labels only
    model = {"task": cfg.model.task, **({"num_labels": cfg.model.num_labels} if classify else {})}
    return json.dumps([cfg.data.model_dump(mode="json"), cfg.detector.model_dump(mode="json"),
                       cfg.tokenizer.model_dump(mode="json"), model], sort_keys=True)


def prepare_trial_data(cfg: TrialConfig) -> PreparedData:
    """Records, detection, tokenizer and tokens for `cfg`; what it reads of `cfg` is what `data_key` holds."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    policy = get_policy(cfg.detector.policy, cfg.detector)
    splits, canaries = splits_with_canaries(cfg.data, cfg.data.seed, (cfg.detector.policy, policy.detect))
    timings["data"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    train_spans = _canary_adjusted(detect_records(splits.train, policy), canaries)
    train_spans = drop_missed(splits.train, train_spans, cfg.detector.miss_rate, cfg.data.seed)
    held_out = (("validation", splits.validation), ("test", splits.test))
    policy_spans = {"train": train_spans, **{name: detect_records(recs, policy) for name, recs in held_out}}
    eval_spans: dict[str, Sequence[Sequence[Span]]] = {}
    for name, recs in held_out:  # gold spans; in unannotated data the policy decides what is private
        gold = [list(r.spans) for r in recs if r.spans is not None]
        eval_spans[name] = gold if len(gold) == len(recs) else policy_spans[name]
    timings["detect"] = time.perf_counter() - t0
    log.info("%s: %d spans detected in %d of %d training records", policy.name, train_spans.total,
             int((train_spans.counts > 0).sum()), len(splits.train))
    # Examples only of records with gold spans, masked with every known secret: without gold, a secret the policy
    # missed would print in the clear.
    if log.isEnabledFor(logging.DEBUG):
        for r, s in [(r, s) for r, s in zip(splits.train, train_spans) if r.spans is not None][:3]:
            log.debug("redacted example: %r", redact(r.text, _known_secrets(r, s))[:200])

    t0 = time.perf_counter()
    tokenizer = build_tokenizer(cfg, splits.train, train_spans, policy)
    L, on_long = cfg.data.max_length, cfg.data.on_long_records
    classify = cfg.model.task == "classification"
    labels = {name: class_labels(recs, cfg.model.num_labels, f"{name} data") if classify else None
              for name, recs in (("train", splits.train), ("validation", splits.validation), ("test", splits.test))}
    # Records longer than a row become windows (text.encode); every copy of a canary stays inside one window.
    whole = [text for family in canaries for text in family.inserted_texts()]
    train_texts = texts_of(splits.train)
    train, windows = encode_windows(train_texts, train_spans, tokenizer, L, labels["train"],
                                    keep_whole=whole, on_long=on_long)
    on_gold = evaluate(splits.train, train_spans) if all(r.spans is not None for r in splits.train) else None
    data = TrialData(
        records=TrialRecords(splits, train_spans),
        train_records=len(splits.train),
        train=train,
        train_redacted=encode(RedactedTexts(train_texts, train_spans), [()] * len(train_texts), tokenizer, L,
                              labels["train"], keep_whole=whole, on_long=on_long),
        validation=encode(texts_of(splits.validation), eval_spans["validation"], tokenizer, L,
                          labels["validation"], on_long=on_long),
        test=encode(texts_of(splits.test), eval_spans["test"], tokenizer, L, labels["test"], on_long=on_long),
        tokenizer=tokenizer,
        missing_rate=on_gold.missing_rate if on_gold is not None else None,
    )
    timings["tokenize"] = time.perf_counter() - t0
    log.info("%d training records -> %d rows of %d tokens (%d split, up to %d windows each; %d tokens dropped)",
             windows.records, windows.rows, L, windows.records_split, windows.windows_per_record_max,
             windows.tokens_dropped)
    reviewed = Labels.read(labels_path(cfg.data.path)) if cfg.data.source == "file" and cfg.data.path else None
    detector = {**detector_summary(policy, splits, policy_spans, data, cfg.detector, on_gold, reviewed),
                "windows": windows.to_dict(),
                "data_seed": cfg.data.seed, "data_fingerprint": data_fingerprint(splits)}
    return PreparedData(data, canaries, detector, timings)


def detector_summary(policy: Policy, splits: Splits, policy_spans: dict[str, SpanColumns], data: TrialData,
                     settings: DetectorConfig, gold: Evaluation | None, labels: Labels | None = None) -> dict:
    """Counts and rates only: records per split, secrets detected in train, redacted fraction (of the training rows'
    tokens), the share of each split's non-space characters the policy masks (what Redacted, JFT's phase 1 and CRT's
    public set lose) beside the share gold spans cover, and recall per label with 95 % intervals where gold exists
    (`gold`: the training records' evaluation against their gold spans, None without);
    the types the policy `settings` name masks, masks without claiming them and leaves in the clear, where it
    declares them; without gold, the recall estimate per type (at most `settings.estimate_per_type` secrets each);
    and recall on the records a person reviewed (`labels`, `sdp-sweep detect --review`)."""
    records, spans = splits.train, policy_spans["train"]
    types = policy_types(settings.policy)
    rate = lambda r: {"value": r.value, "low": r.low, "high": r.high, "n": r.n}  # noqa: E731
    parts = {name: getattr(splits, name) for name in ("train", "validation", "test")}
    counts = data.train.statistic(row_counts)  # block by block: no whole-rows temporary
    summary = {"policy": policy.name, "policy_version": policy.version, "train_records": len(records),
               "records": {name: len(recs) for name, recs in parts.items()},
               "secrets_detected": spans.total, "records_with_secrets": int((spans.counts > 0).sum()),
               "redacted_token_fraction": counts.flagged / max(counts.valid, 1),
               "masked_char_share": {name: rate(masked_share(texts_of(recs), policy_spans[name]))
                                     for name, recs in parts.items()},
               "gold_char_share": {name: rate(masked_share(texts_of(recs), record_columns(recs).spans))
                                   for name, recs in parts.items() if recs and all(r.spans is not None for r in recs)}}
    if gold is not None:
        summary.update(recall=rate(gold.recall), missing_rate=rate(gold.missing_rate), precision=gold.precision,
                       recall_per_label={k: rate(v.tokens) for k, v in gold.per_label.items()})
    elif records:  # no gold: the policy's recall per type, estimated by inserting secrets into copies of the data
        summary["recall_estimate"] = estimate_summary(records, policy,
                                                      types=estimable_types(types.masks if types else None),
                                                      per_type=settings.estimate_per_type)
    if types:
        summary["types"] = types.to_dict(settings.policy)
    if labels is not None:  # every split's reviewed records: the policy's recall on what a person labelled
        on_reviewed = review_recall(chain.from_iterable(parts.values()),
                                    chain.from_iterable(policy_spans[name] for name in parts), labels)
        if on_reviewed is not None:
            summary["review"] = review_summary(on_reviewed)
    return summary
