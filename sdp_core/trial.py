"""One trial, end to end and without Ray: `run_trial(TrialConfig) -> TrialRow`.

prepared data (`preparation`) -> mechanism phases with calibrated σ -> training -> utility metrics and attacks ->
ledger -> one result.
"""

from __future__ import annotations

import logging
import platform
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from sdp_core import __version__
from sdp_core.attacks.audit import empirical_epsilon
from sdp_core.attacks.canaries import canary_exposures
from sdp_core.attacks.mia import membership_inference
from sdp_core.config.trial import TrialConfig
from sdp_core.data.canaries import Canaries
from sdp_core.io import atomic_write_json
from sdp_core.learning import noise_to_signal, validation_loss
from sdp_core.mechanisms import MechanismPlan, TrialData, get_mechanism
from sdp_core.mechanisms.base import tokens_per_unit
from sdp_core.metrics import evaluation_rows, utility_metrics
from sdp_core.models import build_model, parameter_counts
from sdp_core.models.checkpoint import save_model
from sdp_core.preparation import PreparedData, prepare_trial_data
from sdp_core.row import TrialRow
from sdp_core.tensors import LMData, model_device, record_losses
from sdp_core.text.encode import encode
from sdp_core.train.loop import PhaseStats, StepSettings, make_optimizer, train_phase

log = logging.getLogger(__name__)


def versions() -> dict:
    """What a trial ran on: package versions and the training device (a step time means little without it)."""
    import opacus
    import transformers

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"sdp_sweep": __version__, "torch": torch.__version__, "opacus": opacus.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(), "device": device}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def training_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_out_dir(cfg: TrialConfig) -> Path:
    return Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"


TRAINING_STATISTICS = (
    "the detector's counts and rates on the training records, computed without noise: secrets detected, records "
    "with secrets, the redacted token share, the training split's masked and gold character shares, recall on gold "
    "spans or its estimate, and how records became rows (`detector.secrets_detected`, "
    "`detector.records_with_secrets`, `detector.redacted_token_fraction`, `detector.masked_char_share.train`, "
    "`detector.gold_char_share.train`, `detector.recall`, `detector.missing_rate`, `detector.precision`, "
    "`detector.recall_per_label`, `detector.recall_estimate`, `detector.review`, `detector.windows`)")
SIDE_CHANNELS = (
    "side channels: wall-clock times (`timings`, `metrics.wall_seconds`, `metrics.train_seconds`, "
    "`metrics.private_seconds`, `phases.seconds`) and the data fingerprint (`detector.data_fingerprint`, a hash of "
    "every text, which only confirms a guess of the whole dataset)")


def not_covered(cfg: TrialConfig, plan: MechanismPlan) -> list[str]:
    """What a trial releases that its ε does not cover, each with the result.json keys that hold it: the dataset
    size, the detector's statistics of the training records, side channels, a tokenizer trained on training text
    under DP, then what the mechanism derives from the training data (`MechanismPlan.not_covered`).

    Everything else a result holds is the model's evaluation (computed from the trained model and held-out
    records), the config, or a count fixed by N, what neighbours share and the config (steps, q, σ, tokens:
    `mechanisms.base.tokens_per_unit`).
    """
    out = ["the number of training records N, which sets the sampling rate q = B/N and the steps of an epoch "
           "(`detector.records`, `detector.train_records`)", TRAINING_STATISTICS, SIDE_CHANNELS]
    if cfg.tokenizer.kind == "bpe" and cfg.tokenizer.corpus == "training" and plan.ledger.notion == "DP":
        out.append("the BPE tokenizer, trained on the policy-redacted training text (tokenizer.corpus: public "
                   "trains it on public text instead)")
    return out + plan.not_covered


PRIVACY_UNIT = ("a record, whatever its length: a record longer than a row (data.max_length) is several windows, "
                "sampled together and clipped as one (q = B/N counts records)")
"""What one ε protects (`train.loop`, `text.encode`). The same words for every trial: how many windows the longest
training record became is a statistic of the training data."""


CANARY_ATTACKS = ("exposure", "exposure_missed")  # the attack sections of `format`'s and `missed_format`'s canaries
# (attack section, its key, the metric name in a trial row)
ATTACK_METRICS = [("exposure", "exposure_mean", "exposure_mean"), ("exposure", "exposure_max", "exposure_max"),
                  ("membership_inference", "auc", "mia_auc"), ("membership_inference", "group_auc", "mia_group_auc"),
                  ("empirical_epsilon", "epsilon_lower_bound", "empirical_epsilon_lower_bound"),
                  ("empirical_epsilon", "epsilon_lower_bound_per_record", "empirical_epsilon_per_record")]


def run_attacks(model, data: TrialData, canaries: tuple[Canaries, ...], cfg: TrialConfig, test: LMData) -> dict:
    """Canary exposure of each family with its rank test (`exposure`: `data.canaries.format`'s, flagged or missed
    as the policy treats it; `exposure_missed`: `missed_format`'s), the one-run ε lower bound from the first
    family's inserted vs held-out canaries, and membership inference on gold secrets (the test rows `test` the
    non-members).

    Both attack a language model's token likelihoods; a classifier has none, so it gets no attacks.
    """
    if data.train.task == "classification":
        return {}
    ev, p = cfg.evaluation, cfg.privacy
    out: dict = {}
    if ev.exposure and canaries:
        for section, family in zip(CANARY_ATTACKS, canaries):
            out[section] = canary_exposures(model, data.tokenizer, family, method=ev.exposure_method,
                                            limit=ev.exposure_limit)
        out["empirical_epsilon"] = empirical_epsilon(out["exposure"]["exposures"], out["exposure"]["held_out_exposures"],
                                                     delta=p.delta, group_size=canaries[0].repeats)
    train = data.first_train_records(ev.max_eval_records) if ev.mia else []
    if ev.mia and all(r.spans is not None for r in train) and any(bool(block.sensitive.any()) for block in test.blocks()):
        members = encode([r.text for r in train], [list(r.spans or ()) for r in train], data.tokenizer, cfg.data.max_length,
                         on_long=cfg.data.on_long_records)
        out["membership_inference"] = membership_inference(model, members, test)
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
    settings = StepSettings.from_config(t, cfg.privacy)
    optimizer = make_optimizer(model, t.optimizer, t.learning_rate, t.weight_decay)
    settings.set_process_switches(model_device(model))
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
                state, stats = run_private_phase_distributed(model, make, phase, plan.ledger, seed, settings, t.workers,
                                                             cpu_per_worker=t.cpu_per_worker)
                model.load_state_dict(state)
                step_hook(stats)
            else:
                stats = train_phase(model, optimizer, phase, plan.ledger, seed, settings=settings, on_step=step_hook)
            done.append(stats)
    return done


NOISE_SOURCES = {
    False: "secret: AES-256-CTR keystreams (a GPU's noise: Philox) keyed from the OS entropy pool per phase, "
           "never stored",
    True: "reproducible from the published trial seed (privacy.reproducible_noise): the DP guarantee does not hold",
}

REPRODUCIBLE_NOISE = {"holds": False, "condition": "holds only with secret noise: this trial's noise and sampling "
                                                   "are reproducible from its published seed "
                                                   "(privacy.reproducible_noise), so the guarantee does not hold"}
"""What a trial with reproducible noise adds to its privacy report: its ε is what the schedule would give with
secret noise, and no guarantee (`report.load.Trial.guaranteed`, `privacy.relations.qualifiers`)."""


def warn_on_delta(delta: float, n: int) -> None:
    """δ should be well below 1/N (N training records): a δ-chance of leaking one whole record is likely."""
    if delta >= 1 / n:
        print(f"warning: privacy.delta = {delta:g} is not below 1/N = {1 / n:.3g} ({n} training records)",
              file=sys.stderr)


@contextmanager
def timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """`timings[key]`: the seconds the block took."""
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0


def attack_metrics(attacks: dict) -> dict[str, float]:
    """The attacks' numbers a trial row holds as metrics: each canary family's mean exposure with its 95 % interval
    and random-rank floor, and its rank test's AUC, p-value and true-positive rate at a low false-positive rate."""
    metrics = {metric: attacks[name][key] for name, key, metric in ATTACK_METRICS if name in attacks}
    for section, prefix in zip(CANARY_ATTACKS, ("", "missed_")):
        exposure = attacks.get(section) or {}
        if exposure.get("exposure_mean") is not None:
            metrics[f"{prefix}exposure_mean"] = exposure["exposure_mean"]
        if exposure.get("interval"):
            metrics[f"{prefix}exposure_mean_low"], metrics[f"{prefix}exposure_mean_high"] = exposure["interval"]
            metrics[f"{prefix}exposure_floor"] = exposure["floor"]
        if exposure.get("rank_test"):
            test = exposure["rank_test"]
            metrics.update({f"{prefix}exposure_auc": test["auc"], f"{prefix}exposure_p_value": test["p_value"],
                            f"{prefix}exposure_tpr_at_low_fpr": test["tpr_at_fpr"]})
    return metrics


def compute_metrics(phase_stats: list[PhaseStats], plan: MechanismPlan, timings: dict[str, float], held_out: LMData
                    ) -> dict[str, float]:
    """Compute of the whole trial (every phase): optimizer steps, tokens trained on (expected for a Poisson batch,
    counted from what neighbours share: `tokens_per_unit`), wall time; then of the DP phases only: steps, expected
    per-record gradients (q·N a batch) and seconds."""
    private = [s for s in phase_stats if s.private]
    return {"steps": sum(s.steps for s in phase_stats),
            "tokens": round(sum(s.records_seen * tokens_per_unit(p, plan.ledger.notion, held_out)
                                for s, p in zip(phase_stats, plan.phases))),
            "wall_seconds": timings["total"],
            "private_steps": sum(s.steps for s in private),
            "private_records": round(sum(s.records_seen for s in private), 1),
            "private_seconds": sum(s.seconds for s in private),
            "train_seconds": timings["train"]}


def canary_summary(families: tuple[Canaries, ...]) -> dict | None:
    """A row's `canaries`: the first family's summary, and `missed_format`'s under `missed`."""
    if not families:
        return None
    first, *missed = families
    return {**first.summary(), **({"missed": missed[0].summary()} if missed else {})}


def run_trial(cfg: TrialConfig, out_dir: Path | None = None, show_progress: bool = False,
              on_step: Callable[[TrainingProgress], None] | None = None, *,
              on_plan: Callable[[dict], None] | None = None, prepared: PreparedData | None = None) -> TrialRow:
    """Train and evaluate one configuration. Raises `PrivacyError` if the ε target cannot be met.

    `prepared` is the data of `cfg`'s data setting (`preparation.data_key`) when the caller prepared it (a sweep
    prepares it once for all its trials); without it the trial prepares its own. `on_plan` gets the calibrated
    ledger (`PrivacyLedger.to_dict()`) before any step, so a caller can charge the whole plan to a trial that is
    stopped or dies before it returns.
    """
    start = time.perf_counter()
    if prepared is None:
        prepared = prepare_trial_data(cfg)
        timings = dict(prepared.timings)
    else:  # prepared once by the caller for every trial that shares it: no time of this trial's
        timings = dict.fromkeys(prepared.timings, 0.0)
    data = prepared.data
    seed_everything(cfg.seed)  # after the data, which depends on data.seed alone, prepared here or not
    warn_on_delta(cfg.privacy.delta, data.train_records)
    with timed(timings, "plan"):  # the mechanism's plan: its phases' rows, calibration, its ledger
        plan = get_mechanism(cfg.mechanism.name)(data, cfg)
    if on_plan is not None:
        on_plan(plan.ledger.to_dict())
    # A GPU when the trial has one (a sweep's `resources.gpu`); batches follow the model (train.loop.model_device).
    model = build_model(cfg.model, len(data.tokenizer), cfg.data.max_length).to(training_device())
    # Every trial of a sweep evaluates on the same held-out records: drawn from its shared data by the data seed.
    validation, test = (evaluation_rows(rows, cfg.evaluation.held_out_records, cfg.data.seed)
                        for rows in (data.validation, data.test))
    untrained = validation_loss(utility_metrics(model, validation, "val"))  # what training must beat
    with timed(timings, "train"):
        phase_stats = train_phases(model, plan, cfg, validation, show_progress, on_step)
    with timed(timings, "evaluate"):
        metrics = {**utility_metrics(model, validation, "val"), **utility_metrics(model, test, "test")}
    with timed(timings, "attacks"):
        attacks = run_attacks(model, data, prepared.canaries, cfg, test)
    timings["total"] = time.perf_counter() - start
    metrics.update(attack_metrics(attacks))
    metrics.update(compute_metrics(phase_stats, plan, timings, data.validation))
    metrics.update(untrained_val_loss=untrained, noise_to_signal=noise_to_signal([s.to_dict() for s in phase_stats]))
    result = TrialRow(
        name=cfg.name, state="finished", seed=cfg.seed, config=cfg.model_dump(mode="json"), metrics=metrics,
        privacy={**plan.ledger.report(), "unit": PRIVACY_UNIT, "noise": NOISE_SOURCES[cfg.privacy.reproducible_noise],
                 "not_covered": not_covered(cfg, plan), **(REPRODUCIBLE_NOISE if cfg.privacy.reproducible_noise else {})},
        ledger=plan.ledger.to_dict(), mechanism=plan.details, phases=[s.to_dict() for s in phase_stats],
        canaries=canary_summary(prepared.canaries), attacks=attacks,
        detector=prepared.detector, model=parameter_counts(model),
        timings={k: round(v, 3) for k, v in timings.items()}, versions=versions(),
    )
    if out_dir is not None:
        save_model(Path(out_dir) / "model", model, data.tokenizer, cfg.model, cfg.data.max_length)
        atomic_write_json(Path(out_dir) / "result.json", result.to_dict())
    return result
