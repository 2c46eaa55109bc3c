"""The paper-setting cluster sweeps load, build a valid trial at both ends of every range, and hold the papers'
settings (JFT Table 5 ranges, ε = 3, C = 0.1, δ = 1e-6 for generation and ≤ 1/(2|D|) for GLUE, GPUs). Not run here."""

from __future__ import annotations

import pytest

from sdp_core.sweep.preflight import resolve_sweep
from tests.conftest import REPO

SST2_TRAIN = 67_349
CLUSTER_SWEEPS = ["wikitext2_gpt2", "abcd_gpt2", "glue_roberta", "customersim_lstm"]


@pytest.mark.parametrize("name", CLUSTER_SWEEPS)
def test_cluster_sweep_holds_the_papers_settings(name):
    cfg = resolve_sweep(str(REPO / "sweeps" / f"{name}.yaml"), [])  # every range end builds a valid trial
    base, space = cfg.base, cfg.search_space.parameters
    assert base.privacy.target_epsilon == 3.0 and base.privacy.max_grad_norm == 0.1
    assert set(space["training.batch_size"].values) <= {256, 512, 1024}
    assert max(space["training.epochs"].values) <= 200
    lr = space["training.learning_rate"]
    if base.model.arch == "lstm":  # an LSTM from scratch needs larger steps than fine-tuning a transformer
        assert 5e-5 <= lr.low < lr.high <= 5e-3
    else:
        assert (lr.low, lr.high) == (5e-5, 5e-4)
        assert base.model.name_or_path and base.tokenizer.kind == "pretrained"  # pretrained by name
    if base.model.task == "classification":
        assert base.privacy.delta <= 1 / (2 * SST2_TRAIN)
        assert cfg.objectives[0].metric == "val_accuracy" and cfg.objectives[0].mode == "max"
    else:
        assert base.privacy.delta == 1e-6
    assert cfg.resources.gpu >= 1 or base.training.workers >= 2  # a GPU per trial, or per Ray Train worker
    assert cfg.num_trials >= 20
