"""A sweep's output folder, the contract the report layer reads.

```
OUT/sweep.yaml              the resolved SweepConfig (overrides applied, search space inlined)
OUT/trials/<trial_id>.json  one row per trial (`row.TrialRow`), written atomically, with what the sweep adds:
                            trial_id, params (sampled dotted-path values), objectives ({metric: value})
OUT/optuna.journal          the Optuna studies, one per mechanism (JournalFileStorage): what `sdp-sweep resume` continues
OUT/.tune/                  Ray Tune's own logs (not part of the contract)
```

Sweeps do not save trial models: every row holds its full config and seed, and `sdp-sweep trial` re-trains
any of them bit-for-bit (for `sdp-sweep audit`, say).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from sdp_core.config import parse_model
from sdp_core.config.sweep import SweepConfig
from sdp_core.errors import UserError
from sdp_core.io import atomic_write_json, atomic_write_text, read_yaml
from sdp_core.row import TRIAL_STATES



@dataclass(frozen=True)
class SweepStore:
    root: Path

    @property
    def config_file(self) -> Path:
        return self.root / "sweep.yaml"

    @property
    def trials_dir(self) -> Path:
        return self.root / "trials"

    @property
    def journal_file(self) -> Path:
        return self.root / "optuna.journal"

    @property
    def models_dir(self) -> Path:
        """`models/<trial_id>/`: each trial's model and result.json (its privacy report); see `keep_models`."""
        return self.root / "models"

    @property
    def tune_dir(self) -> Path:
        return self.root / ".tune"

    def create(self, cfg: SweepConfig) -> None:
        """Start a new sweep folder: its resolved config first, so a crash at any later point is resumable."""
        self.trials_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config_file, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))

    def load_config(self) -> SweepConfig:
        if not self.config_file.is_file():
            raise UserError("no sweep.yaml: not a sweep folder", str(self.root))
        return parse_model(SweepConfig, read_yaml(self.config_file), str(self.config_file))

    def write_row(self, row: dict) -> Path:
        assert row["state"] in TRIAL_STATES, row["state"]
        return atomic_write_json(self.trials_dir / f"{row['trial_id']}.json", row)

    def read_row(self, trial_id: str) -> dict | None:
        path = self.trials_dir / f"{trial_id}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def rows(self) -> dict[str, dict]:
        """Every recorded trial, by trial id."""
        return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.trials_dir.glob("*.json"))}
