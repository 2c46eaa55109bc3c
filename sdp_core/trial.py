"""One trial, end to end and without Ray: `run_trial(TrialConfig) -> TrialResult`.

records -> detector spans (cached) -> tokenizer trained on redacted text -> tokens with aligned masks ->
mechanism phases with calibrated σ -> training -> utility metrics and attacks -> ledger -> one result.
"""

from __future__ import annotations

import json
import logging
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from sdp_core import __version__
from sdp_core.attacks import canary_exposures, empirical_epsilon, membership_inference
from sdp_core.config.trial import TrialConfig
from sdp_core.data.canaries import CanaryPlan
from sdp_core.data.classification import class_labels
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.loaders import load_records
from sdp_core.data.prepare import prepare_data
from sdp_core.data.records import Record, Span, Splits
from sdp_core.detectors import Policy, detect_records, get_policy
from sdp_core.detectors.evaluation import evaluate
from sdp_core.detectors.miss import drop_missed
from sdp_core.errors import UserError
from sdp_core.io import atomic_write_json, fingerprint
from sdp_core.mechanisms import MechanismPlan, TrialData, get_mechanism
from sdp_core.mechanisms.base import tokens_per_row
from sdp_core.metrics import utility_metrics
from sdp_core.models import build_model
from sdp_core.models.checkpoint import save_model
from sdp_core.privacy.relations import qualifiers
from sdp_core.tensors import LMData, model_device, record_losses
from sdp_core.text.encode import encode, encode_windows
from sdp_core.text.redaction import redact
from sdp_core.text.tokenizer import cached_bpe_tokenizer, load_pretrained_tokenizer
from sdp_core.train.loop import PhaseStats, make_optimizer, train_phase

log = logging.getLogger(__name__)


@dataclass
class TrialResult:
    """One row of a sweep: config, metrics, privacy report (ledger), timings, versions. JSON-serialisable."""

    name: str
    state: str  # finished | failed | infeasible
    seed: int
    config: dict
    metrics: dict = field(default_factory=dict)
    privacy: dict = field(default_factory=dict)
    ledger: dict = field(default_factory=dict)  # the saved ledger: `sdp-sweep epsilon --ledger` recomputes `privacy`
    mechanism: dict = field(default_factory=dict)
    phases: list[dict] = field(default_factory=list)
    canaries: dict | None = None
    attacks: dict = field(default_factory=dict)  # exposure, membership inference, empirical ε lower bound
    detector: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def summary_line(self) -> str:
        p, m = self.privacy, self.metrics
        eps = p.get("epsilon")
        privacy = (f"ε={eps:.3f} ({qualifiers(p)})"
                   if isinstance(eps, (int, float)) and eps != float("inf") else f"no DP guarantee ({p.get('notion')})")
        utility = (f"val ppl {m['val_perplexity']:.2f}" if m.get("val_perplexity") else
                   f"val acc {m['val_accuracy']:.3f}" if m.get("val_accuracy") is not None else None)
        return (f"{self.name}: {self.state}; {self.config['mechanism']['name']}; {privacy}; "
                f"{utility}; {self.timings.get('total', 0):.0f}s" if utility else f"{self.name}: {self.state}")


def versions() -> dict:
    import opacus
    import transformers

    return {"sdp_sweep": __version__, "torch": torch.__version__, "opacus": opacus.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def training_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_out_dir(cfg: TrialConfig) -> Path:
    return Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _canary_adjusted(spans: list[list[Span]], records: list[Record], plan: CanaryPlan | None) -> list[list[Span]]:
    """The detector sees every canary, or (missed-secret experiments) none: canary spans added or carved out."""
    if plan is None:
        return spans
    by_record: dict[int, list[Span]] = {}
    for ins in plan.insertions:
        by_record.setdefault(ins.record, []).append(ins.span)
    out = list(spans)
    for r, canary_spans in by_record.items():
        if plan.missed_by_detector:
            out[r] = [s for s in spans[r] if not any(s.start < c.end and c.start < s.end for c in canary_spans)]
        else:
            out[r] = sorted([*spans[r], *canary_spans])
    return out


def _known_secrets(record: Record, detected: list[Span]) -> list[Span]:
    """Detected spans plus gold spans: everything known to be secret, kept out of the tokenizer's vocabulary."""
    return sorted({*detected, *(record.spans or ())})


def public_records(cfg: TrialConfig) -> list[Record]:
    """Public text for the tokenizer: `tokenizer.public_path`, or CustomerSim dialogs generated from a seed
    stream apart from the data's (the same distribution, none of its records)."""
    if cfg.tokenizer.public_path:
        return load_records(cfg.tokenizer.public_path)
    if cfg.data.source == "customersim":
        return generate_customersim(cfg.data.n_train, f"public-{cfg.data.seed}")
    raise UserError("tokenizer.corpus public needs tokenizer.public_path (a file of public text)")


def build_tokenizer(cfg: TrialConfig, train: list[Record], train_spans: list[list[Span]], policy: Policy
                    ) -> PreTrainedTokenizerFast:
    """A pretrained tokenizer, or a BPE trained (once per text, `cached_bpe_tokenizer`) on text with every known
    secret redacted: the training text (`tokenizer.corpus: training`) or public text (`public`)."""
    if cfg.tokenizer.kind == "pretrained":
        return load_pretrained_tokenizer(cfg.tokenizer.name_or_path)
    if cfg.tokenizer.corpus == "public":
        train = public_records(cfg)
        train_spans = detect_records(train, policy)
    clean = [redact(r.text, _known_secrets(r, s)) for r, s in zip(train, train_spans)]
    return cached_bpe_tokenizer(clean, cfg.tokenizer.vocab_size)


def data_fingerprint(splits: Splits) -> str:
    """One digest of every split's texts, canaries included: trials on one front must share it."""
    return fingerprint(r.text for part in (splits.train, splits.validation, splits.test) for r in part)


def not_covered(cfg: TrialConfig, plan: MechanismPlan) -> list[str]:
    """What the trial's ε does not cover: data-dependent choices made outside the accounted steps."""
    out = ["the number of training records N (the sampling rate q = B/N uses it)"]
    if cfg.tokenizer.kind == "bpe" and cfg.tokenizer.corpus == "training" and plan.ledger.notion == "DP":
        out.append("the BPE tokenizer, trained on the policy-redacted training text (tokenizer.corpus: public "
                   "trains it on public text instead)")
    w = max((int(p.data.record_index.bincount().max()) for p in plan.phases if p.private and len(p.data)), default=1)
    if w > 1:  # text.encode: rows, not records, are sampled and clipped
        out.append(f"records longer than a row (data.max_length) as one unit: they are split into up to {w} windows "
                   f"and ε is per window, so a record of w windows is protected as a group of w (w·ε, w·e^((w−1)ε)·δ)")
    return out + plan.not_covered


def data_key(cfg: TrialConfig) -> str:
    """What a trial's prepared data depends on: trials with the same key get the same `prepare_trial_data`."""
    return json.dumps([cfg.data.model_dump(mode="json"), cfg.detector.model_dump(mode="json"),
                       cfg.tokenizer.model_dump(mode="json"), cfg.model.model_dump(mode="json")], sort_keys=True)


_LAST_PREPARED: dict[str, tuple[TrialData, CanaryPlan | None, dict]] = {}


def prepared_trial_data(cfg: TrialConfig, timings: dict) -> tuple[TrialData, CanaryPlan | None, dict]:
    """`prepare_trial_data`, kept for the next trial this process runs on the same data (`data_key`): Ray runs a
    sweep's trials in turn in a few reused processes, which then read, encode and tokenize the data once."""
    key = data_key(cfg)
    if key in _LAST_PREPARED:
        timings.update(data=0.0, detect=0.0, tokenize=0.0)
    else:
        _LAST_PREPARED.clear()  # one entry: a process holds one data set at a time
        _LAST_PREPARED[key] = prepare_trial_data(cfg, timings)
    data, plan, detector = _LAST_PREPARED[key]
    return replace(data, cfg=cfg), plan, detector


def prepare_trial_data(cfg: TrialConfig, timings: dict) -> tuple[TrialData, CanaryPlan | None, dict]:
    t0 = time.perf_counter()
    splits, plan = prepare_data(cfg.data, cfg.data.seed)
    timings["data"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    policy = get_policy(cfg.detector.policy, cfg.detector)
    train_spans = _canary_adjusted(detect_records(splits.train, policy), splits.train, plan)
    train_spans = drop_missed(splits.train, train_spans, cfg.detector.miss_rate, cfg.data.seed)
    eval_spans = {name: [list(r.spans) if r.spans is not None else None for r in recs]
                  for name, recs in (("validation", splits.validation), ("test", splits.test))}
    for name, recs in (("validation", splits.validation), ("test", splits.test)):
        if any(s is None for s in eval_spans[name]):  # unannotated data: the policy decides what is private
            eval_spans[name] = detect_records(recs, policy)
    timings["detect"] = time.perf_counter() - t0
    log.info("%s: %d spans detected in %d of %d training records", policy.name, sum(map(len, train_spans)),
             sum(bool(s) for s in train_spans), len(splits.train))
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
    whole = plan.inserted_texts() if plan is not None else []
    train, windows = encode_windows([r.text for r in splits.train], train_spans, tokenizer, L, labels["train"],
                                    keep_whole=whole, on_long=on_long)
    data = TrialData(
        cfg=cfg,
        records=splits,
        train_spans=train_spans,
        train=train,
        train_redacted=encode([redact(r.text, s) for r, s in zip(splits.train, train_spans)],
                              [[] for _ in splits.train], tokenizer, L, labels["train"], keep_whole=whole,
                              on_long=on_long),
        validation=encode([r.text for r in splits.validation], eval_spans["validation"], tokenizer, L,
                          labels["validation"], on_long=on_long),
        test=encode([r.text for r in splits.test], eval_spans["test"], tokenizer, L, labels["test"], on_long=on_long),
        tokenizer=tokenizer,
    )
    timings["tokenize"] = time.perf_counter() - t0
    log.info("%d training records -> %d rows of %d tokens (%d split, up to %d windows each; %d tokens dropped)",
             windows.records, windows.rows, L, windows.records_split, windows.windows_per_record_max,
             windows.tokens_dropped)
    return data, plan, {**detector_summary(policy, splits.train, train_spans, data), "windows": windows.to_dict()}


def detector_summary(policy, records: list[Record], spans: list[list[Span]], data: TrialData) -> dict:
    """Counts and rates only: redacted fraction, and recall per label with 95 % intervals where gold exists."""
    summary = {"policy": policy.name, "policy_version": policy.version, "train_records": len(records),
               "redacted_token_fraction": float(data.train.sensitive.sum() / data.train.valid.sum())}
    if all(r.spans is not None for r in records):
        ev = evaluate(records, spans)
        rate = lambda r: {"value": r.value, "low": r.low, "high": r.high, "n": r.n}  # noqa: E731
        summary.update(recall=rate(ev.recall), missing_rate=rate(ev.missing_rate), precision=ev.precision,
                       recall_per_label={k: rate(v.tokens) for k, v in ev.per_label.items()})
    return summary


# (attack section, its key, the metric name in a trial row)
ATTACK_METRICS = [("exposure", "exposure_mean", "exposure_mean"), ("exposure", "exposure_max", "exposure_max"),
                  ("membership_inference", "auc", "mia_auc"), ("membership_inference", "group_auc", "mia_group_auc"),
                  ("empirical_epsilon", "epsilon_lower_bound", "empirical_epsilon_lower_bound"),
                  ("empirical_epsilon", "epsilon_lower_bound_per_record", "empirical_epsilon_per_record")]


def run_attacks(model, data: TrialData, plan: CanaryPlan | None) -> dict:
    """Canary exposure (+ the one-run ε lower bound from inserted vs held-out canaries) and membership inference on
    gold secrets.

    Both attack a language model's token likelihoods; a classifier has none, so it gets no attacks.
    """
    if data.train.task == "classification":
        return {}
    ev, p = data.cfg.evaluation, data.cfg.privacy
    out: dict = {}
    if ev.exposure and plan is not None:
        out["exposure"] = canary_exposures(model, data.tokenizer, plan, method=ev.exposure_method, limit=ev.exposure_limit)
        out["empirical_epsilon"] = empirical_epsilon(out["exposure"]["exposures"], out["exposure"]["held_out_exposures"],
                                                     delta=p.delta, group_size=plan.repeats)
    train = data.records.train[: ev.max_eval_records]
    if ev.mia and all(r.spans is not None for r in train) and data.test.sensitive.any():
        members = encode([r.text for r in train], [list(r.spans) for r in train], data.tokenizer, data.cfg.data.max_length,
                         on_long=data.cfg.data.on_long_records)
        out["membership_inference"] = membership_inference(model, members, data.test)
    model.train()
    return out


@dataclass(frozen=True)
class TrainingProgress:
    """What a trial tells its caller while it trains: counts, public losses and held-out quantities only.

    A private batch's loss or size is never here (un-noised statistics of private records).
    """

    step: int  # batches trained so far, over every phase
    phase: str
    public_loss: float | None  # the last public step's loss; None during a private phase
    validation_loss: Callable[[], float]  # mean record loss on held-out validation rows (costs a forward pass)


def held_out_loss(model: torch.nn.Module, data: LMData, rows: int = 128) -> float:
    """Mean record loss of `model` on the first `rows` validation rows: the sweep's early-stopping signal."""
    batch = data.subset(range(min(rows, len(data)))).to(model_device(model))
    model.eval()
    with torch.no_grad():
        loss = record_losses(model(batch.input_ids), batch.input_ids, batch.weights, batch.labels).mean().item()
    model.train()
    return loss


def train_phases(model: torch.nn.Module, plan: MechanismPlan, cfg: TrialConfig, validation: LMData, show_progress: bool,
                 on_step: Callable[[TrainingProgress], None] | None) -> list[PhaseStats]:
    """Run the plan's phases in order through the one loop (`train_phase`), on Ray Train workers for the private
    phases when `training.workers` > 1."""
    from sdp_core.progress import phase_progress

    t = cfg.training
    optimizer = make_optimizer(model, t.optimizer, t.learning_rate, t.weight_decay)
    done: list[PhaseStats] = []
    validation_loss = partial(held_out_loss, model, validation)
    with phase_progress(plan.phases, enabled=show_progress) as advance:
        for i, phase in enumerate(plan.phases):
            def step_hook(stats: PhaseStats) -> None:
                advance(phase.name, stats)
                if on_step is not None:
                    public_loss = stats.losses[-1] if stats.losses and not stats.private else None
                    on_step(TrainingProgress(sum(s.steps for s in done) + stats.steps, phase.name, public_loss,
                                             validation_loss))

            seed = cfg.seed * 1000 + i
            if phase.private and t.workers > 1:  # Ray Train: data parallel over `workers`, noise added once per step
                from sdp_core.train.distributed import run_private_phase_distributed

                make = partial(make_optimizer, name=t.optimizer, lr=t.learning_rate, weight_decay=t.weight_decay)
                state, stats = run_private_phase_distributed(
                    model, make, phase, plan.ledger, seed, t.grad_sample_mode, t.workers,
                    reproducible_noise=cfg.privacy.reproducible_noise, cpu_per_worker=t.cpu_per_worker)
                model.load_state_dict(state)
                step_hook(stats)
            else:
                stats = train_phase(model, optimizer, phase, plan.ledger, seed, grad_sample_mode=t.grad_sample_mode,
                                    reproducible_noise=cfg.privacy.reproducible_noise, on_step=step_hook)
            done.append(stats)
    return done


NOISE_SOURCES = {
    False: "secret: seeded from the OS entropy pool per phase, never stored",
    True: "reproducible from the published trial seed (privacy.reproducible_noise): the DP guarantee does not hold",
}


def prepare_shared(trials: list[TrialConfig]) -> None:
    """Do, once, the work the trials of a sweep share, so that they find it in the caches instead of each doing it:
    data preparation, detection and tokenizer training per distinct data setting, and each mechanism's plan (CRT's
    conservative detection of lines). A problem here is left for its trial to report."""
    prepared: dict[str, TrialData] = {}
    planned: set[tuple[str, str]] = set()
    for cfg in trials:
        key = data_key(cfg)
        try:
            if key not in prepared:
                prepared[key] = prepare_trial_data(cfg, {})[0]
            if (key, cfg.mechanism.name) not in planned:
                planned.add((key, cfg.mechanism.name))
                get_mechanism(cfg.mechanism.name).plan(replace(prepared[key], cfg=cfg))
        except UserError:  # includes PrivacyError: the trial itself records it
            continue


def run_trial(cfg: TrialConfig, out_dir: Path | None = None, show_progress: bool = False,
              on_step: Callable[[TrainingProgress], None] | None = None, *,
              on_plan: Callable[[dict], None] | None = None) -> TrialResult:
    """Train and evaluate one configuration. Raises `PrivacyError` if the ε target cannot be met.

    `on_plan` gets the calibrated ledger (`PrivacyLedger.to_dict()`) before any step, so a caller can charge the
    whole plan to a trial that is stopped or dies before it returns.
    """
    start = time.perf_counter()
    timings: dict[str, float] = {}
    data, canary_plan, detector = prepared_trial_data(cfg, timings)
    seed_everything(cfg.seed)  # after the data, which depends on data.seed alone, reused or not
    n = len(data.records.train)
    if cfg.privacy.delta >= 1 / n:  # δ should be well below 1/N: a δ-chance of leaking one whole record is likely
        print(f"warning: privacy.delta = {cfg.privacy.delta:g} is not below 1/N = {1 / n:.3g} ({n} training records)",
              file=sys.stderr)
    plan = get_mechanism(cfg.mechanism.name).plan(data)
    if on_plan is not None:
        on_plan(plan.ledger.to_dict())

    # A GPU when the trial has one (a sweep's `resources.gpu`); batches follow the model (train.loop.model_device).
    model = build_model(cfg.model, len(data.tokenizer), cfg.data.max_length).to(training_device())
    t0 = time.perf_counter()
    phase_stats = train_phases(model, plan, cfg, data.validation, show_progress, on_step)
    timings["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    metrics = {**utility_metrics(model, data.validation, "val"), **utility_metrics(model, data.test, "test")}
    timings["evaluate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    attacks = run_attacks(model, data, canary_plan)
    metrics.update({metric: attacks[name][key] for name, key, metric in ATTACK_METRICS if name in attacks})
    if (attacks.get("exposure") or {}).get("interval"):  # the mean's 95 % interval and random-rank floor, for the front
        metrics["exposure_mean_low"], metrics["exposure_mean_high"] = attacks["exposure"]["interval"]
        metrics["exposure_floor"] = attacks["exposure"]["floor"]
    timings["attacks"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - start
    # Compute of the whole trial (every phase): optimizer steps, tokens trained on (expected for a Poisson batch),
    # wall time; then of the DP phases only: steps, expected per-record gradients (q·N a batch) and seconds.
    metrics["steps"] = sum(s.steps for s in phase_stats)
    metrics["tokens"] = round(sum(s.records_seen * tokens_per_row(p) for s, p in zip(phase_stats, plan.phases)))
    metrics["wall_seconds"] = timings["total"]
    metrics["private_steps"] = sum(s.steps for s in phase_stats if s.private)
    metrics["private_records"] = round(sum(s.records_seen for s in phase_stats if s.private), 1)
    metrics["private_seconds"] = sum(s.seconds for s in phase_stats if s.private)
    metrics["train_seconds"] = timings["train"]

    result = TrialResult(
        name=cfg.name, state="finished", seed=cfg.seed, config=cfg.model_dump(mode="json"), metrics=metrics,
        privacy={**plan.ledger.report(), "noise": NOISE_SOURCES[cfg.privacy.reproducible_noise],
                 "not_covered": not_covered(cfg, plan)},
        ledger=plan.ledger.to_dict(), mechanism=plan.details, phases=[s.to_dict() for s in phase_stats],
        canaries=canary_plan.summary() if canary_plan else None, attacks=attacks,
        detector={**detector, "data_seed": cfg.data.seed, "data_fingerprint": data_fingerprint(data.records)},
        timings={k: round(v, 3) for k, v in timings.items()}, versions=versions(),
    )
    if out_dir is not None:
        save_model(Path(out_dir) / "model", model, data.tokenizer, cfg.model, cfg.data.max_length)
        atomic_write_json(Path(out_dir) / "result.json", result.to_dict())
    return result
