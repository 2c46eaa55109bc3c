"""The bf16 and LoRA sweep files run end to end: each trial they search trains, spends exactly its ε, and saves a
model that `from_pretrained` loads and `sdp-sweep audit` scores."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from sdp_core.config.base import parse_model
from sdp_core.config.loading import load_sweep_config
from sdp_core.config.trial import TrialConfig
from sdp_core.sweep.space import trial_config_dict
from sdp_core.trial import run_trial
from conftest import REPO, run_main
from test_lora import lora_parameters


@pytest.mark.parametrize("sweep_file,params", [
    ("bf16_gpt2.yaml", {"mechanism.name": "dpsgd", "training.learning_rate": 2e-3}),
    ("lora_gpt2.yaml", {"mechanism.name": "jft", "model.adapter.rank": 4, "training.learning_rate": 5e-3}),
    ("lora_gpt2.yaml", {"mechanism.name": "crt", "model.adapter.rank": 4, "training.learning_rate": 5e-3}),
    ("lora_gpt2.yaml", {"mechanism.name": "atdp", "model.adapter.rank": 4, "training.learning_rate": 5e-3}),
])
def test_sweep_file_trial_runs_end_to_end_and_its_model_loads(sweep_file, params, tmp_path):
    sweep = load_sweep_config(REPO / "sweeps" / sweep_file)
    cfg = parse_model(TrialConfig, trial_config_dict(sweep, params, 0))
    result = run_trial(cfg, tmp_path)
    assert result.state == "finished" and result.metrics["private_steps"] >= 3
    assert result.privacy["epsilon"] <= cfg.privacy.target_epsilon
    saved = json.loads((tmp_path / "result.json").read_text())["config"]
    assert saved["training"]["precision"] == cfg.training.precision and saved["model"] == cfg.model.model_dump(mode="json")
    model_dir = tmp_path / "model"
    if cfg.model.adapter is None:
        hf = AutoModelForCausalLM.from_pretrained(model_dir)
        assert all(torch.isfinite(p).all() for p in hf.parameters())
    else:
        assert (model_dir / "adapter" / "adapter_config.json").is_file()
        assert json.loads((model_dir / "adapter" / "adapter_config.json").read_text())["r"] == 4
        counted = json.loads((tmp_path / "result.json").read_text())["model"]
        assert counted["trainable_parameters"] == lora_parameters(2, 128, 4)  # gpt2-tiny: 2 layers of width 128
        assert counted["trainable_share"] == counted["trainable_parameters"] / counted["parameters"] < 0.1
    # Four digits: every one of the 10⁴ candidates is scored exactly through the saved model (10⁶: 5.5 CPU-s each)
    audit = run_main("audit", str(model_dir), "--canary", "My ID is {dddd}", "--context", "USR: ",
                     "--secret", "1234", "--json")
    assert audit.returncode == 0, audit.stderr
    scored = json.loads(audit.stdout)
    assert scored["space_size"] == 10**4 and 1 <= scored["ranks"][0] <= 10**4
    assert 0 <= scored["exposures"][0] <= scored["max_exposure"]
