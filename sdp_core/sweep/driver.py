"""Run a sweep: Ray Tune schedules the trials, an Optuna study per mechanism (through `SweepSearch`) chooses their
settings.

- Each trial is `run_trial` on one sampled config inside a Tune function trial; `run_trial` calibrates the
  trial's noise to the sweep's ε target itself. The trial reports a row; the driver writes it to
  `OUT/trials/<trial_id>.json` and then tells Optuna, in that order (a crash in between is repaired on resume).
- A trial whose private phases run on CPU Ray Train workers reserves them in its own placement group
  (`trial_resources`): trials start only when their workers fit too.
- Multi-objective: the sweep's objectives are the study's directions (one per objective).
- What Optuna is told, per stored state: `finished` -> COMPLETE with the objective values (FAIL instead when
  one is missing or not finite, e.g. an infinite ε); `infeasible` (the ε target cannot be met: `PrivacyError`)
  and `failed` -> FAIL, so samplers skip them and the study goes on (an infeasible trial has no objective
  values to constrain); `early_stopped` -> PRUNED, never
  COMPLETE with partial values. The state, trial id and error also go into the Optuna trial's user attributes.
- Equal budgets: each cell (a mechanism, at each ε of an ε ladder: `SweepConfig.cells`) has its own Optuna study
  (`<study>-<cell>`, one TPE sampler over its own space) and the same number of trials (`SweepConfig.per_cell`);
  trials are handed out in turn to the cell with the fewest, so no cell's share or search depends on another's
  results. Trial number n of cell i (of C) is sweep trial n·C + i: its id and seed follow from it.
- Early stopping (optional) is ASHA on the held-out validation loss (never a private batch's loss), with the
  cumulative optimizer step as its clock.
- Adaptive budget (`SweepConfig.adaptive`): once a round's trials are stored, each ranking family whose rank tests
  pass no step is due more trials per mechanism (`separation.due_trials`), which a further Tune run hands out,
  each cell continuing its own study, until a step passes or the cap is reached. The round is a function of the
  stored trials alone, so a resumed sweep continues the round it was in.
- Resume is rebuilt from the studies' journal and the trial files, not from Tune's snapshot: a trial with a
  row is done; a trial Optuna still lists as running without a row is re-run with the same parameters, id and
  seed; new trials fill each cell up to exactly its due trials. Nothing is lost or counted twice whenever the
  driver died.
- Each sweep's studies are named `<sweep name>-<hash of its resolved config>-<cell>` in `OUT/optuna.journal`
  (`Cell.name`: the mechanism, `dpsgd@eps3` at a rung of a ladder).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState
from ray import tune
from ray.tune.schedulers import ASHAScheduler, TrialScheduler
from ray.tune.search import Searcher

from sdp_core.config import parse_model
from sdp_core.config.loading import arm_trial_config, control_trial_config
from sdp_core.config.sweep import CONTROL_TRIAL, ResourcesConfig, SearchSpace, SweepConfig, sweep_number, trial_id
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import PrivacyError, UserError
from sdp_core.logs import configure_logging
from sdp_core.separation import due_trials
from sdp_core.sweep.prepare import SharedData, prepare_once
from sdp_core.sweep.space import MECHANISM_PARAM, sample, trial_config_dict
from sdp_core.sweep.store import SweepStore
from sdp_core.preparation import data_key
from sdp_core.row import TrialRow

if TYPE_CHECKING:
    from sdp_core.trial import TrainingProgress

MAX_RETRIES = 2
"""A trial whose Ray worker dies (killed, out of memory, node lost) is re-run from the start this many times
before it is recorded as failed; a trial that raises is not retried (its own error is its row)."""

ASHA_MAX_T = 1_000_000
"""ASHA's clock is the cumulative optimizer step; its `max_t` stops a trial that reaches it, so it is set far
beyond any trial's steps (trials end on their own, and only the rungs below matter)."""

OPTUNA_STATES = {"finished": TrialState.COMPLETE, "early_stopped": TrialState.PRUNED,
                 "failed": TrialState.FAIL, "infeasible": TrialState.FAIL}


# --------------------------------------------------------------------------------------------- rows


def write_row(search: TrialSearch, store: SweepStore, row: dict) -> bool:
    """Store a trial's row. A failed write (a full disk) is kept on the search as `write_error`, not raised inside
    Tune, which would re-run the trial as if its worker had died; `tune_run` raises it once the run is over."""
    try:
        store.write_row(row)
        return True
    except (UserError, OSError) as e:
        search.write_error = search.write_error or e
        return False


def completed_row(config: dict, result: dict | None, error: bool, stopped: bool, ledger: dict | None = None
                  ) -> dict | None:
    """The row of a trial Tune reports complete: its own final row, `early_stopped` (ASHA), or `failed` when its
    worker died after every retry; None when it was interrupted (so a resume re-runs it). A stopped or failed row
    carries `ledger`, the plan the trial published (`keep_ledger`)."""
    if result and result.get("final"):
        row = TrialRow.from_dict(json.loads(result["row"]))
    elif result and stopped:
        row = TrialRow.stub(config, "early_stopped", None,
                            {"val_loss": result.get("val_loss"), "steps": result.get("step")}, ledger)
    elif error:
        row = TrialRow.stub(config, "failed",
                            f"the trial's Ray worker died {MAX_RETRIES + 1} times (details in OUT/.tune)", ledger=ledger)
    else:
        return None
    return row.in_sweep(config["trial_id"], config["params"], config["objectives"]).to_dict()


def keep_ledger(ledgers: dict[str, dict], tune_trial_id: str, result: dict) -> None:
    """Keep the calibrated ledger a trial's report carries (`sweep_trial`), for the row of a trial that is stopped
    or whose worker dies before its final report."""
    if "ledger" in result:
        ledgers[tune_trial_id] = json.loads(result["ledger"])


def record_in_study(ot_trial: optuna.Trial, row: dict, objectives: list[str]) -> None:
    """Tell Optuna how a stored trial ended (see the module docstring for the mapping)."""
    state = OPTUNA_STATES[row["state"]]
    values = [row["objectives"].get(m) for m in objectives]
    if state == TrialState.COMPLETE and not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        state = TrialState.FAIL
        ot_trial.set_user_attr("reason", f"objective values {values} are not all finite numbers")
    ot_trial.set_user_attr("trial_id", row["trial_id"])
    ot_trial.set_user_attr("state", row["state"])
    if row.get("error"):
        ot_trial.set_user_attr("error", row["error"][:500])
    ot_trial.study.tell(ot_trial, values if state == TrialState.COMPLETE else None, state=state)


# -------------------------------------------------------------------------------------------- trial


def sweep_trial(config: dict, report_interval: float = 0.0, early_stopping: bool = False,
                models_dir: str | None = None, prepared: dict[str, SharedData] | None = None) -> None:
    """A Tune function trial: train one sampled config and report its row as the final result.

    While training it reports progress at most every `report_interval` seconds (a Tune round trip per optimizer
    step would dominate small trials): `step`, ASHA's clock and the live view's progress, and with
    `early_stopping` `val_loss`, ASHA's metric, measured on held-out validation rows at that moment. ASHA acts on
    the first report at or past each rung, so throttling delays a decision by at most one interval. Nothing
    computed from a private batch is reported. Once at the end it reports `final: True` and the row as JSON (a
    string, so Tune's flattening of results leaves it intact). A trial's own failure never raises: it becomes a
    `failed` or `infeasible` row. With `models_dir` the trial saves its model and result in `<models_dir>/<id>/`:
    DP noise is secret, so a trial cannot be re-trained to the same weights from its config. The ledger the trial
    calibrated (`run_trial`'s `on_plan`) is reported, as JSON, before its first private step, and goes into the row
    of a trial that fails after calibrating, so the sweep's cost charges it. `prepared` holds the sweep's prepared
    data in Ray's object store by `data_key` (its records fetched only if the trial reads them, `SharedData`); a
    trial whose setting is not there prepares its own.
    """
    configure_logging()  # the driver's -v, in this worker
    last: dict[str, Any] = {"step": 0, "val_loss": None, "time": time.monotonic()}
    ledger: dict = {}  # the calibrated plan, once the mechanism has made it

    def report(row: TrialRow | None = None, plan: dict | None = None) -> None:
        tune.report({**{m: row.objective(m) if row else None for m in config["objectives"]},
                     "step": last["step"], "val_loss": last["val_loss"], "final": row is not None,
                     **({"row": json.dumps(row.to_dict(), default=str)} if row else {}),
                     **({"ledger": json.dumps(plan)} if plan else {})})

    def on_plan(plan: dict) -> None:  # reported at once: a trial that dies before any progress report is charged
        ledger.update(plan)
        report(plan=plan)

    def on_step(progress: TrainingProgress) -> None:
        last["step"] = progress.step
        if time.monotonic() - last["time"] >= report_interval:
            last["val_loss"] = progress.validation_loss() if early_stopping else None
            last["time"] = time.monotonic()
            report()

    try:
        # Here, not at the top: the trial's stack (GPT-2's modelling, the attacks) is this trial worker's, and the
        # sweep's driver, which imports this module, never trains (about 1 CPU-s of its start, Opacus apart).
        from sdp_core.trial import run_trial

        cfg = parse_model(TrialConfig, config["trial"], config["trial_id"])
        out_dir = Path(models_dir) / config["trial_id"] if models_dir else None
        shared = (prepared or {}).get(data_key(cfg))
        data = shared.get() if shared is not None else None
        row = run_trial(cfg, out_dir, on_step=on_step, on_plan=on_plan, prepared=data)
    except PrivacyError as e:
        row = TrialRow.stub(config, "infeasible", str(e), ledger=ledger)
    except Exception as e:  # any other failure is this trial's: record it, the sweep goes on
        row = TrialRow.stub(config, "failed", f"{type(e).__name__}: {e}", ledger=ledger)
    report(row)


# ------------------------------------------------------------------------------------ search + stop


class StopRecordingASHA(ASHAScheduler):
    """ASHA that remembers which trials it stopped, so their rows say `early_stopped` (not `finished`, and not
    mistaken for trials interrupted by a crash or Ctrl-C, which resume re-runs)."""

    def __init__(self, stopped: set[str], **kwargs: Any):
        super().__init__(**kwargs)
        self.stopped = stopped

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.STOP and not result.get("final"):
            self.stopped.add(trial.trial_id)
        return decision


def reopen_trial(study: optuna.Study, frozen: FrozenTrial) -> optuna.Trial:
    """The live `optuna.Trial` of a trial still running in `study` (a crash left it), to re-run or finish it.

    Optuna has no public call for this: `optuna.Trial(study, storage id)` is how its own `Study.ask` builds one,
    and the storage id is private to `FrozenTrial`. This is the one place that relies on it
    (`tests/test_sweep.py` fails loudly if a new Optuna changes it).
    """
    return optuna.Trial(study, frozen._trial_id)


class TrialSearch(Searcher):
    """What the sweep's searches share: hand Tune one trial config per Tune trial (`next_config`, once; the same
    config again when Tune asks again), keep the plan each trial publishes, and on completion write its row
    (`completed_row`, `write_row`) and then `recorded` it. A trial whose row cannot be written stays pending, so
    a resume re-runs it. State lives in the trial files (and a search's journal), so Tune saves nothing."""

    def __init__(self, store: SweepStore, stopped_by_scheduler: set[str]):
        super().__init__()
        self._store = store
        self._stopped = stopped_by_scheduler
        self._configs: dict[str, dict] = {}  # Tune trial id -> what the trainable got
        self._ledgers: dict[str, dict] = {}  # Tune trial id -> the plan it published (`keep_ledger`)
        self._completed: set[str] = set()
        self.write_error: Exception | None = None  # the first row that could not be stored (see `write_row`)

    def next_config(self, tune_trial_id: str) -> dict | None:
        """The config of a new Tune trial; None when the search has handed out every trial."""
        raise NotImplementedError

    def recorded(self, tune_trial_id: str, row: dict) -> None:
        """Called once a trial's row is stored."""

    def suggest(self, tune_trial_id: str) -> dict | str:
        if tune_trial_id not in self._configs:
            config = self.next_config(tune_trial_id)
            if config is None:
                return Searcher.FINISHED
            self._configs[tune_trial_id] = config
        return self._configs[tune_trial_id]

    def on_trial_result(self, tune_trial_id: str, result: dict) -> None:
        keep_ledger(self._ledgers, tune_trial_id, result)

    def on_trial_complete(self, tune_trial_id: str, result: dict | None = None, error: bool = False) -> None:
        config = self._configs.get(tune_trial_id)
        if config is None or tune_trial_id in self._completed:
            return
        row = completed_row(config, result, error, tune_trial_id in self._stopped, self._ledgers.get(tune_trial_id))
        if row is None:
            return  # interrupted (Ctrl-C, driver stopping): still pending, so resume re-runs it
        if write_row(self, self._store, row):
            self.recorded(tune_trial_id, row)
            self._completed.add(tune_trial_id)

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the trial files (and the journal) are the state."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: resume recomputes the pending trials from the trial files (and the journal)."""


class SweepSearch(TrialSearch):
    """Ray Tune's searcher over one Optuna study per cell (a mechanism, at each ε of a ladder), each with the same
    trial budget.

    `suggest` takes the cell with the fewest trials so far among those below their `due` trials (by cell name;
    default each `per_cell`), in `cfg.cells` order on ties, asks its study for a
    trial, samples that mechanism's space into it (`space.sample`) and hands Tune the trial's id, parameters and
    full trial config; a stored row is told to that study. Trials left running by a crash (`orphans`, per cell
    name) are handed out again, with their stored values, before new ones are asked. Only public Ray Tune
    (`Searcher`) and Optuna (`ask`/`tell`) API, plus `reopen_trial`.
    """

    def __init__(self, cfg: SweepConfig, space: SearchSpace, store: SweepStore, studies: dict[str, optuna.Study],
                 orphans: dict[str, list[FrozenTrial]], stopped_by_scheduler: set[str],
                 control: Sequence[dict] = (), due: dict[str, int] | None = None):
        super().__init__(store, stopped_by_scheduler)
        self._cfg, self._space, self._studies = cfg, space, studies
        self._due = due or {c.name: cfg.per_cell for c in cfg.cells}
        self._control = list(control)  # the positive control's config while it has no row: handed out first
        self._objectives = [o.metric for o in cfg.objectives]
        self._orphans = {c.name: list(orphans.get(c.name, [])) for c in cfg.cells}
        # Trials each cell has had: its study's, less the orphans it will be handed again.
        self._taken = {c.name: len(studies[c.name].trials) - len(self._orphans[c.name]) for c in cfg.cells}
        self._trials: dict[str, optuna.Trial] = {}  # Tune trial id -> its Optuna trial

    def next_config(self, tune_trial_id: str) -> dict | None:
        if self._control:
            return self._control.pop()
        cell = next((c for c in self._cfg.cells if self._orphans[c.name]), None)
        if cell is not None:
            ot_trial = reopen_trial(self._studies[cell.name], self._orphans[cell.name].pop(0))
        else:
            open_ = [c for c in self._cfg.cells if self._taken[c.name] < self._due[c.name]]
            if not open_:
                return None
            cell = min(open_, key=lambda c: self._taken[c.name])
            ot_trial = self._studies[cell.name].ask()
        self._taken[cell.name] += 1
        self._trials[tune_trial_id] = ot_trial
        params = sample(ot_trial, self._space, cell, self._cfg.mechanisms)  # an orphan gets its values back
        number = sweep_number(self._cfg, cell, ot_trial.number)
        return {"trial_id": trial_id(number), "params": params, "objectives": self._objectives,
                "trial": trial_config_dict(self._cfg, params, number)}

    def recorded(self, tune_trial_id: str, row: dict) -> None:
        if tune_trial_id in self._trials:  # the control belongs to no study
            record_in_study(self._trials[tune_trial_id], row, self._objectives)

    def __getstate__(self) -> dict:
        """`Tuner` pickles its search algorithm (for `Tuner.restore`, unused here); the studies, whose journal
        storage holds a lock, stay behind."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_studies", "_trials")}


class GridSearch(TrialSearch):
    """A fixed grid (`experiments` × seeds): hands out the trials without a row, in order, and writes each row
    when its trial completes. Resume needs no journal: a trial with a row is done, the others run again."""

    def __init__(self, pending: list[dict], store: SweepStore):
        super().__init__(store, set())
        self._pending = list(pending)

    def next_config(self, tune_trial_id: str) -> dict | None:
        return self._pending.pop(0) if self._pending else None


def control_configs(cfg: SweepConfig) -> list[dict]:
    """The sweep's positive control (`SweepConfig.control`) as a trial config, or none."""
    if cfg.control is None:
        return []
    return [{"trial_id": CONTROL_TRIAL, "params": {"control": True}, "objectives": [o.metric for o in cfg.objectives],
             "trial": control_trial_config(cfg).model_dump(mode="json")}]


def grid_configs(cfg: SweepConfig) -> list[dict]:
    """Every trial of a grid sweep, arm by arm and seed by seed (its id `<arm>-s<seed>`), then its control."""
    objectives = [o.metric for o in cfg.objectives]
    assert cfg.experiments is not None, "a grid sweep"
    return [{"trial_id": f"{arm}-s{seed}", "params": {"experiment": arm, "seed": seed}, "objectives": objectives,
             "trial": arm_trial_config(cfg, arm, seed).model_dump(mode="json")}
            for arm, experiment in cfg.experiments.items() for seed in (experiment.seeds or cfg.seeds)
            ] + control_configs(cfg)


# -------------------------------------------------------------------------------------------- sweep


def study_name(cfg: SweepConfig) -> str:
    """`<sweep name>-<hash of the resolved config>`: the prefix of the sweep's studies, even in a shared storage."""
    digest = hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
    return f"{cfg.name}-{digest[:10]}"


def folder_study_names(cfg: SweepConfig, storage: JournalStorage) -> dict[str, str]:
    """The studies of a sweep folder, by cell name: `<prefix>-<cell>`, with the prefix its journal already holds (a
    newer version may hash the same sweep's resolved config differently, and new studies would restart the trial
    numbers)."""
    prefixes = {s.study_name.rsplit("-", 1)[0] for s in optuna.get_all_study_summaries(storage)}
    prefix = prefixes.pop() if len(prefixes) == 1 else study_name(cfg)
    return {c.name: f"{prefix}-{c.name}" for c in cfg.cells}


def open_studies(cfg: SweepConfig, store: SweepStore) -> dict[str, optuna.Study]:
    """The sweep's studies in `OUT/optuna.journal`, one per cell (by its name), created on first use.

    A driver killed in the middle of an append leaves a partial last line, which later appends would bury in
    the middle of the file (unreadable): it is cut off first, as if that write never happened.
    """
    if store.journal_file.is_file():
        journal = store.journal_file.read_bytes()
        if journal and not journal.endswith(b"\n"):
            store.journal_file.write_bytes(journal[:journal.rfind(b"\n") + 1])
    storage = JournalStorage(JournalFileBackend(str(store.journal_file)))
    directions = ["minimize" if o.mode == "min" else "maximize" for o in cfg.objectives]
    return {cell: optuna.create_study(storage=storage, study_name=name, load_if_exists=True, directions=directions)
            for cell, name in folder_study_names(cfg, storage).items()}


def reconcile(cfg: SweepConfig, studies: dict[str, optuna.Study], store: SweepStore) -> dict[str, list[FrozenTrial]]:
    """After a crash: tell each study about rows it never heard of; return, per cell name, its running trials
    without a row."""
    rows = store.rows()
    objectives = [o.metric for o in cfg.objectives]
    orphans: dict[str, list[FrozenTrial]] = {}
    for cell in cfg.cells:
        study = studies[cell.name]
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            row = rows.get(trial_id(sweep_number(cfg, cell, t.number)))
            if row is None:
                orphans.setdefault(cell.name, []).append(t)
            else:
                record_in_study(reopen_trial(study, t), row, objectives)
    return orphans


def grace_period(cfg: SweepConfig) -> int:
    """ASHA's first rung: a quarter of the step cap (or 10 steps without one)."""
    return max(1, (cfg.base.training.max_steps or 40) // 4)


def run_sweep(cfg: SweepConfig, space: SearchSpace | str | None, store: SweepStore, callbacks: list | None = None
              ) -> dict[str, dict]:
    """Run (or continue) the sweep in `store` until every cell holds its due trials (`separation.due_trials`: its
    planned ones, and with an adaptive budget those its family's looks add), one Tune run per round; Ray must be up.

    Returns every row by trial id.
    """
    if cfg.experiments is not None:
        done = store.rows()
        pending = [c for c in grid_configs(cfg) if c["trial_id"] not in done]
        if pending:
            tune_run(cfg, store, GridSearch(pending, store), None, len(pending), callbacks,
                     prepare_once([c["trial"] for c in pending], cfg.prepare_processes))
        return store.rows()
    assert isinstance(space, SearchSpace), "resolve the sweep first (its search space inlined)"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = open_studies(cfg, store)
    orphans = reconcile(cfg, studies, store)
    prepared: dict[str, SharedData] | None = None
    for _ in cfg.looks:  # a round per look at most: each adds trials only to families its look left tied
        rows = store.rows()
        due = due_trials(cfg, rows)
        control = [c for c in control_configs(cfg) if c["trial_id"] not in rows]
        remaining = sum(due.values()) - len(set(rows) - {CONTROL_TRIAL}) + len(control)
        if remaining <= 0:
            break
        if prepared is None:
            prepared = prepare_once([trial_config_dict(cfg, {MECHANISM_PARAM: m}, 0) for m in cfg.mechanisms],
                                    cfg.prepare_processes)
        stopped: set[str] = set()
        scheduler = (StopRecordingASHA(stopped, time_attr="step", metric="val_loss", mode="min",
                                       grace_period=grace_period(cfg), reduction_factor=2, max_t=ASHA_MAX_T)
                     if cfg.early_stopping else None)
        # Each cell's TPE seeded apart from the others' and with the trials already in its study: a resumed sweep
        # (or a later round) does not replay earlier random draws.
        for i, study in enumerate(studies.values()):
            study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + 10_000 * i + len(study.trials))
        search = SweepSearch(cfg, space, store, studies, orphans, stopped, control, due)
        tune_run(cfg, store, search, scheduler, remaining, callbacks, prepared)
        orphans = {}
        if len(store.rows()) < sum(due.values()) + (cfg.control is not None):
            break  # stopped before its round ended (Ctrl-C): resume continues it
    return store.rows()


def trial_resources(config: dict, resources: ResourcesConfig) -> tune.PlacementGroupFactory:
    """The placement group of one trial (`config` as the searcher made it): the trial's own bundle and, when its
    private phases run on CPU Ray Train workers (`training.workers` > 1, `resources.gpu` 0), one bundle per worker.

    Tune then starts a trial only once its workers fit as well, so `concurrency` trials never hold the resources
    each other's workers wait for. Ray Train V2 always makes a placement group of its own, which Ray cannot nest
    in the trial's; its workers are carved out of the trial's bundles instead, by asking for the group's own CPU
    resource (`train.distributed.worker_resources`). GPU workers cannot be: a GPU reached that way is not
    assigned to the worker (no CUDA device), so they ask the cluster for their GPUs when a phase starts, and a
    GPU cluster needs at least `concurrency` × `resources.gpu` + `workers` GPUs (one worker group can always start).
    """
    trial = {"CPU": resources.cpu, **({"GPU": resources.gpu} if resources.gpu else {})}
    training = config["trial"]["training"]
    if training["workers"] > 1 and not resources.gpu:
        return tune.PlacementGroupFactory([trial] + [{"CPU": training["cpu_per_worker"]}] * training["workers"])
    return tune.PlacementGroupFactory([trial])


class InterruptionNotes(logging.Filter):
    """Tune's notes on a Ctrl-C name Tune's own API (`Tuner.restore(...)`) and list the unfinished trials; the sweep
    says itself how to continue (`sdp-sweep resume DIR`, `sweep.cli.closing_lines`). They are dropped, and the first
    is replaced by one plain line of ours."""

    STOPPING = "stopping: the trials running now are not recorded and run again on resume (Ctrl-C again: at once)"
    NOTES = ("Stop signal received", "Experiment has been interrupted", "Trials did not complete")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.NOTES[0]):
            print(self.STOPPING, file=sys.stderr, flush=True)
        return not message.startswith(self.NOTES)


def tune_run(cfg: SweepConfig, store: SweepStore, search: TrialSearch,
             scheduler: TrialScheduler | None, num_samples: int, callbacks: list | None,
             prepared: dict[str, SharedData]) -> None:
    """One Tune run of `num_samples` trials chosen by `search`, each in its placement group (`trial_resources`) and
    reading its data from `prepared` (`prepare_once`); each attempt logs to its own `OUT/.tune/attempt-N`."""
    attempt = len(list(store.tune_dir.glob("attempt-*"))) if store.tune_dir.is_dir() else 0
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(
            sweep_trial, report_interval=cfg.report_interval, early_stopping=cfg.early_stopping,
            models_dir=str(store.models_dir) if cfg.keep_models != "none" else None, prepared=prepared),
            partial(trial_resources, resources=cfg.resources)),
        tune_config=tune.TuneConfig(
            search_alg=search, scheduler=scheduler, num_samples=num_samples, max_concurrent_trials=cfg.concurrency,
            reuse_actors=True,  # trials share warm processes: torch and spaCy load once
            trial_name_creator=lambda t: t.config["trial_id"], trial_dirname_creator=lambda t: t.config["trial_id"]),
        run_config=tune.RunConfig(name=f"attempt-{attempt}", storage_path=str(store.tune_dir), verbose=0,
                                  callbacks=callbacks or [], failure_config=tune.FailureConfig(max_failures=MAX_RETRIES)),
    )
    notes = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, InterruptionNotes) for f in notes.filters):
        notes.addFilter(InterruptionNotes())
    tuner.fit()
    if search.write_error is not None:
        raise search.write_error
