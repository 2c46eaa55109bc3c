"""A synthetic sweep folder with realistic trial rows, for the report's tests and benchmark (no training).

Rows have the shapes `run_trial` and the sweep write: every state (finished, early_stopped, infeasible, failed),
ledgers with events (a stopped or failed trial's row holds only the plan it published), JFT light-noise trials
(an empirical estimate with its formal bound), CRT trials whose confidentiality gold spans show not to hold,
canary and detector summaries. `secrets` are planted only in fields a report must never
copy (canary values, detector examples, phase samples, mechanism details), so a test can scan for them.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import yaml

from sdp_core.config.base import apply_settings
from sdp_core.config.sweep import SweepConfig
from sdp_core.config.trial import TrialConfig
from sdp_core.privacy import events_from_dicts, privacy_report
from sdp_core.privacy.light_noise import CAVEAT, ESTIMATE, REAL_SAMPLE_RATES

MECHANISMS = ("dpsgd", "jft", "crt", "atdp", "redacted", "nodp")
NOTION = {"dpsgd": "DP", "jft": "SDP", "crt": "confidentiality", "atdp": "SDP", "redacted": "SDP", "nodp": "none"}
BASE_PPL = {"nodp": 18.0, "redacted": 24.0, "dpsgd": 60.0, "jft": 27.0, "crt": 33.0, "atdp": 30.0}
BASE_EXPOSURE = {"nodp": 14.0, "redacted": 5.0, "dpsgd": 1.2, "jft": 1.8, "crt": 2.2, "atdp": 1.6}
TRAIN_RECORDS = 2000
MISSING_RATE = 0.01  # m̃ of the light-noise trials: phase 1 is charged at q·m̃
LIGHT_NOISE_FORMAL_EPSILON = 41.0  # their formal bound, phase 1 at its real rate q


def sweep_config(name: str, n_trials: int) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": name,
        "base": {"data": {"n_train": TRAIN_RECORDS, "canaries": {"format": "My ID is {dddddd}", "count": 1,
                                                                 "repeats": 10}}},
        "mechanisms": list(MECHANISMS),
        "objectives": [{"metric": "val_perplexity", "mode": "min"}, {"metric": "exposure_mean", "mode": "min"}],
        "search_space": {"parameters": {
            "training.learning_rate": {"type": "loguniform", "low": 5e-4, "high": 5e-3},
            "training.batch_size": {"type": "choice", "values": [16, 32, 64]}}},
        "num_trials": -(-n_trials // len(MECHANISMS)) * len(MECHANISMS),  # an equal budget each; rows may stop short
    })


def _rate(k: int, n: int) -> dict:
    half = 1.96 * math.sqrt(max(k * (n - k), 1) / n) / n
    return {"value": k / n, "low": max(0.0, k / n - half), "high": min(1.0, k / n + half), "n": n}


def _state(i: int, rng: random.Random) -> str:
    # The first rows cover every state; then mostly finished.
    fixed = {3: "infeasible", 5: "failed", 7: "early_stopped"}
    if i in fixed:
        return fixed[i]
    return rng.choices(["finished", "early_stopped", "infeasible", "failed"], [0.8, 0.08, 0.06, 0.06])[0]


def _events(mechanism: str, q: float, sigma: float, light_noise: bool) -> list[dict]:
    """The planned events: one private phase, or JFT's light-noise phase 1 (at q·m̃) then phase 2."""
    if mechanism in ("redacted", "nodp"):
        return []
    dp = {"sample_rate": q, "noise_multiplier": sigma, "steps": 60, "phase": "dp", "mechanism": mechanism,
          "touches": "private" if mechanism == "crt" else "all"}
    if not light_noise:
        return [dp]
    return [{**dp, "phase": "phase1", "sample_rate": q * MISSING_RATE, "noise_multiplier": 0.4},
            {**dp, "phase": "phase2"}]


def _ledger(notion: str, events: list[dict], q: float, light_noise: bool, spent: bool) -> dict:
    """The saved ledger; `spent` False: the plan a trial published before training (nothing spent yet)."""
    ledger = {"format": "sdp-ledger/1", "notion": notion, "delta": 1e-5, "accountant": "rdp", "plan": events,
              "spent_steps": {e["phase"]: e["steps"] if spent else 0 for e in events}}
    return {**ledger, REAL_SAMPLE_RATES: {"phase1": q}} if light_noise else ledger


def trial_row(cfg: SweepConfig, i: int, rng: random.Random, secrets: tuple[str, ...]) -> dict:
    """One trial row as the sweep stores it in `trials/<trial_id>.json`."""
    mechanism = MECHANISMS[i % len(MECHANISMS)]
    light_noise = mechanism == "jft" and i % 12 == 7  # every other JFT trial, t0007 (stopped early) first
    conditional = mechanism == "crt" and i % 12 == 8  # gold spans show a secret neither π nor π_c masks
    notion = "none" if conditional else NOTION[mechanism]
    state = _state(i, rng)
    lr = math.exp(rng.uniform(math.log(5e-4), math.log(5e-3)))
    batch = rng.choice([16, 32, 64])
    trial_id = f"t{i:04d}"
    base = cfg.base.model_dump(mode="json")
    config = TrialConfig.model_validate({
        **base, "name": f"{cfg.name}-{trial_id}", "seed": cfg.seed + i,
        "mechanism": {"name": mechanism, **({"phase1_mode": "light_noise"} if light_noise else {})},
        "training": {**base["training"], "learning_rate": lr, "batch_size": batch},
    }).model_dump(mode="json")
    secret = secrets[i % len(secrets)] if secrets else "000000"
    row = {
        "trial_id": trial_id, "name": config["name"], "state": state, "seed": config["seed"], "config": config,
        "params": {"training.learning_rate": lr, "training.batch_size": batch},
        "metrics": {}, "objectives": {}, "privacy": {}, "mechanism": {"leaked_example": secret}, "phases": [],
        "canaries": {"format": "My ID is {dddddd}", "space_size": 10**6, "count": 1, "repeats": 10,
                     "records": [4, 17, 99], "missed_by_detector": False, "secrets": [secret]},
        "detector": {"policy": config["detector"]["policy"], "policy_version": "1", "train_records": TRAIN_RECORDS,
                     "redacted_token_fraction": 0.071, "examples": [f"call me at {secret}"],
                     "data_seed": 0, "data_fingerprint": "0f" * 16,
                     "recall": _rate(912, 1000), "missing_rate": _rate(88, 14000), "precision": 0.97,
                     "recall_per_label": {"phone": _rate(400, 410), "address": _rate(512, 590)}},
        "timings": {}, "versions": {"sdp_sweep": "0.1.0", "torch": "2.13.0", "opacus": "1.6.0", "python": "3.12"},
        "error": None,
    }
    if state in ("infeasible", "failed"):
        row["error"] = (f"PrivacyError: target ε=3 at δ=1e-05 is unreachable: even σ=50 spends ε={rng.uniform(3, 9):.4g} "
                        "(rdp); raise the target or lower the sampling rate or the steps"
                        if state == "infeasible" else "RuntimeError: loss is NaN at step 41")
        row["canaries"] = None
        if state == "failed":  # it failed while training, after publishing its plan
            q = batch / TRAIN_RECORDS
            row["ledger"] = _ledger(notion, _events(mechanism, q, 1.0, light_noise), q, light_noise, spent=False)
        return row

    quality = 1.0 + 3.0 * (math.log(lr) - math.log(2e-3)) ** 2 / 5 + 0.04 * rng.random()
    partial = 1.6 if state == "early_stopped" else 1.0
    ppl = BASE_PPL[mechanism] * quality * partial
    exposure = BASE_EXPOSURE[mechanism] * (0.6 + 0.8 * rng.random())
    train = rng.uniform(60, 600) * (0.3 if state == "early_stopped" else 1.0)
    row["metrics"] = {
        "val_perplexity": ppl, "val_private_perplexity": ppl * 2.3, "val_public_perplexity": ppl * 0.9,
        "val_accuracy": 0.6 / quality, "test_perplexity": ppl * 1.02, "exposure_mean": exposure,
        "exposure_max": exposure * 1.4, "mia_auc": 0.5 + 0.02 * exposure, "private_steps": 60,
        "train_seconds": train,
    }
    row["objectives"] = {"val_perplexity": ppl, "exposure_mean": exposure}
    q = batch / TRAIN_RECORDS
    noised = mechanism not in ("redacted", "nodp")
    events = _events(mechanism, q, rng.uniform(0.8, 1.3) if noised else 0.0, light_noise)
    row["ledger"] = _ledger(notion, events, q, light_noise, spent=state == "finished")
    if state == "early_stopped":  # the sweep's row of a stopped trial: no privacy report, only the published plan
        return row
    epsilon = {"nodp": math.inf, "redacted": 0.0}.get(mechanism, 3.0 - 1e-6)
    planned = events_from_dicts(events)
    row["privacy"] = privacy_report(math.inf if conditional else epsilon, 1e-5, notion, "rdp", planned,
                                    complete=True) | {"unit": "a record"}
    if light_noise:
        formal = events_from_dicts([{**e, "sample_rate": q} for e in events])
        row["privacy"].update(guarantee=ESTIMATE, caveat=CAVEAT,
                              formal=privacy_report(LIGHT_NOISE_FORMAL_EPSILON, 1e-5, "SDP", "rdp", formal))
    if mechanism == "crt":  # CRT also reports its confidentiality claim and Bayesian confidentiality
        gamma = 0.088
        row["mechanism"].update(
            units=5200, private_units=1900, public_units=3300,
            confidentiality=privacy_report(epsilon, 1e-5, "confidentiality", "rdp", planned, holds=not conditional,
                                           condition="holds only if π_c flags every secret π misses"),
            bayesian_confidentiality=privacy_report(math.log1p(gamma * math.expm1(epsilon)), gamma * 1e-5 + 0.01,
                                                    "bayesian_confidentiality", "rdp", planned, gamma=gamma,
                                                    delta2=0.01))
    row["phases"] = [{"name": "dp", "steps": 60, "sample_text": f"my number is {secret}"}]
    row["timings"] = {"total": train * 1.2, "train": train}
    return row


AUDIT = {"epsilon_lower_bound": 0.0, "epsilon_lower_bound_per_record": 0.0, "delta": 1e-5, "confidence": 0.95,
         "notion": "empirical lower bound", "neighbouring": "replace_one", "accountant": "audit:one_run",
         "method": "one_run", "canaries": 1000, "members": 480, "nonmembers": 520, "guesses": 0, "correct": 0,
         "ceiling": 4.47, "group_size": 1}
"""A one-run audit as a finished trial's row holds it (`attacks.empirical_epsilon`), 480 of 1,000 canaries inserted."""


def write_synthetic_sweep(directory: str | Path, n_trials: int = 40, seed: int = 0, name: str = "synthetic",
                          secrets: tuple[str, ...] = (), intervals: bool = False, audit: bool = False) -> Path:
    """Write `sweep.yaml` and `trials/t0000.json`, ... into `directory`; returns it. With `intervals`, exposure has
    a 95 % interval (±30 %) and the random-rank floor, as a real trial's row; with `audit`, every finished trial
    has a one-run audit (`AUDIT`, its bound growing with exposure)."""
    directory = Path(directory)
    (directory / "trials").mkdir(parents=True, exist_ok=True)
    cfg = sweep_config(name, n_trials)
    (directory / "sweep.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    rng = random.Random(seed)
    for i in range(n_trials):
        row = trial_row(cfg, i, rng, secrets)
        exposure = row["metrics"].get("exposure_mean")
        if intervals and exposure is not None:
            row["metrics"].update(exposure_mean_low=0.7 * exposure, exposure_mean_high=1.3 * exposure,
                                  exposure_floor=1.44)
        if audit and row["state"] == "finished":
            bound = round(max(0.0, exposure - 2.0) / 4, 2)
            row["attacks"] = {"empirical_epsilon": {**AUDIT, "epsilon_lower_bound": bound,
                                                    "epsilon_lower_bound_per_record": bound}}
        (directory / "trials" / f"{row['trial_id']}.json").write_text(json.dumps(row, indent=1))
    return directory


LADDER_PPL = {"dpsgd": 60.0, "jft": 27.0, "crt": 33.0, "atdp": 30.0, "nodp": 18.0}
"""Perplexity of each mechanism's best setting at ε = ∞ in `write_ladder_sweep`; at ε it is this × (1 + 2/ε)."""
LADDER_SAMPLE_RATE, LADDER_STEPS = 0.016, 60


def ladder_sigma(epsilon: float) -> float:
    """The σ that spends `epsilon` in the ladder trials' one private phase (RDP, δ = 1e-5, add/remove)."""
    from sdp_core.privacy import calibrate_noise

    return calibrate_noise([(LADDER_SAMPLE_RATE, LADDER_STEPS)], epsilon, 1e-5, "rdp")


def write_ladder_sweep(directory: str | Path, ladder: tuple[float, ...] = (1.0, 3.0, 8.0), per_cell: int = 3,
                       seed: int = 0, mechanisms: tuple[str, ...] = ("dpsgd", "jft", "crt", "atdp", "nodp"),
                       ppl: dict[str, float] | None = None, slope: dict[str, float] | None = None) -> Path:
    """A finished ε-ladder sweep as `sdp-sweep run` stores it: `per_cell` trials of every (mechanism, ε) cell (No-DP
    once), numbered as the driver numbers them, each calibrated to its ε with one private phase, its perplexity
    `ppl` (default `LADDER_PPL`) × (1 + `slope`/ε, slope 2 by default) × (1 + up to 10 % by chance)."""
    ppl, slope = {**LADDER_PPL, **(ppl or {})}, slope or {}
    from sdp_core.privacy import GaussianEvent

    directory = Path(directory)
    (directory / "trials").mkdir(parents=True, exist_ok=True)
    cfg = SweepConfig.model_validate({
        "name": "ladder", "mechanisms": list(mechanisms),
        "base": {"data": {"n_train": TRAIN_RECORDS}, "privacy": {"target_epsilon": list(ladder)}},
        "objectives": [{"metric": "val_perplexity", "mode": "min"}, {"metric": "exposure_mean", "mode": "min"}],
        "search_space": {"parameters": {"training.learning_rate": {"type": "loguniform", "low": 5e-4, "high": 5e-3}}},
        "trials_per_mechanism": per_cell})
    (directory / "sweep.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    rng = random.Random(seed)
    for n in range(per_cell):
        for c, cell in enumerate(cfg.cells):
            number = n * len(cfg.cells) + c
            m, epsilon = cell.mechanism, cell.epsilon
            lr = math.exp(rng.uniform(math.log(5e-4), math.log(5e-3)))
            params = {"mechanism.name": m, **({"privacy.target_epsilon": epsilon} if epsilon else {}),
                      "training.learning_rate": lr}
            config = TrialConfig.model_validate(apply_settings(
                {**cfg.base.model_dump(mode="json"), "name": f"ladder-trial_{number:04d}", "seed": number,
                 "mechanism": {"name": m}}, params)).model_dump(mode="json")
            perplexity = ppl[m] * (1 + slope.get(m, 2.0) / epsilon if epsilon else 1) * (1 + 0.1 * rng.random())
            exposure = BASE_EXPOSURE[m] * (0.8 + 0.4 * rng.random())
            notion = NOTION[m]
            events = ([] if epsilon is None else
                      [GaussianEvent(LADDER_SAMPLE_RATE, ladder_sigma(epsilon), LADDER_STEPS, "dp", m,
                                     "private" if m == "crt" else "all")])
            privacy = privacy_report(math.inf if epsilon is None else epsilon * (1 - 1e-6), 1e-5, notion, "rdp",
                                     events, complete=True)
            row = {"trial_id": f"trial_{number:04d}", "name": config["name"], "state": "finished", "seed": number,
                   "config": config, "params": params, "privacy": privacy,
                   "ledger": _ledger(notion, [e.__dict__ for e in privacy_events(privacy)], LADDER_SAMPLE_RATE,
                                     False, spent=True),
                   "metrics": {"val_perplexity": perplexity, "val_private_perplexity": 2.3 * perplexity,
                               "exposure_mean": exposure,
                               "exposure_mean_low": 0.7 * exposure, "exposure_mean_high": 1.3 * exposure,
                               "exposure_floor": 1.44, "mia_auc": 0.5 + 0.02 * exposure, "train_seconds": 100.0},
                   "objectives": {"val_perplexity": perplexity, "exposure_mean": exposure}, "mechanism": {},
                   "phases": [],
                   "canaries": None, "detector": {"policy": "customersim", "data_fingerprint": "0f" * 16},
                   "timings": {"total": 120.0}, "versions": {"sdp_sweep": "0.1.0"}, "error": None}
            (directory / "trials" / f"{row['trial_id']}.json").write_text(json.dumps(row, indent=1))
    return directory


def privacy_events(privacy: dict) -> list:
    return events_from_dicts(privacy["events"])
