"""Utility metrics on a seeded subset of held-out records, with intervals: against a direct, row-by-row computation on
exactly the records chosen, and the bootstrap interval against the delta method's."""

from __future__ import annotations

import math

import numpy as np
import torch

from sdp_core.config.model import ModelConfig
from sdp_core.metrics import evaluation_rows, language_model_metrics, ratio_interval
from sdp_core.models import build_model
from sdp_core.tensors import LMData

VOCAB, T = 50, 12


def _rows(records: int = 30) -> LMData:
    """`records` records, every third one two rows long, of random tokens with padding and a few sensitive ones."""
    g = torch.Generator().manual_seed(0)
    index = torch.tensor([r for r in range(records) for _ in range(2 if r % 3 == 0 else 1)])
    n = len(index)
    ids = torch.randint(0, VOCAB, (n, T), generator=g)
    lengths = torch.randint(3, T + 1, (n,), generator=g)
    weights = (torch.arange(T)[None] < lengths[:, None]) & (torch.arange(T)[None] > 0)
    sensitive = (torch.rand(n, T, generator=g) < 0.2) & weights
    return LMData(ids, weights, sensitive, index * 7 + 3)  # record numbers need not start at 0 nor be consecutive


def _direct(model: torch.nn.Module, data: LMData, chosen: set[int]) -> dict[str, float]:
    """Perplexities and accuracy summed row by row over the rows of the records in `chosen`, one forward per row."""
    nll = {"all": 0.0, "private": 0.0, "public": 0.0}
    count = dict.fromkeys(nll, 0)
    correct = 0
    with torch.no_grad():
        for r in range(len(data)):
            if int(data.record_index[r]) not in chosen:
                continue
            ids = data.input_ids[r].long()
            logp = torch.log_softmax(model(ids[None])[0].double(), -1)
            for t in range(1, T):
                if not data.weights[r, t]:
                    continue
                part = "private" if data.sensitive[r, t] else "public"
                for key in ("all", part):
                    nll[key] -= float(logp[t - 1, ids[t]])
                    count[key] += 1
                correct += int(logp[t - 1].argmax() == ids[t])
    return {**{f"val_{'' if k == 'all' else k + '_'}perplexity": math.exp(nll[k] / count[k]) for k in nll},
            "val_accuracy": correct / count["all"]}


def test_metrics_are_those_of_exactly_the_seeded_records_and_the_whole_set_is_one_setting_away():
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="gpt2", preset="gpt2-tiny"), VOCAB, T).eval()
    data = _rows()
    subset = evaluation_rows(data, 8, seed=5)
    chosen = set(subset.record_index.tolist())
    assert len(chosen) == 8 and chosen <= set(data.record_index.tolist())
    assert set(evaluation_rows(data, 8, seed=5).record_index.tolist()) == chosen  # the seed fixes it
    assert set(evaluation_rows(data, 8, seed=6).record_index.tolist()) != chosen
    assert evaluation_rows(data, None, seed=5) is data and evaluation_rows(data, 30, seed=5) is data

    metrics = language_model_metrics(model, subset, "val")
    for name, value in _direct(model, data, chosen).items():
        assert math.isclose(metrics[name], value, rel_tol=1e-4), name
        assert metrics[f"{name}_ci_low"] < metrics[name] < metrics[f"{name}_ci_high"], name
    whole = language_model_metrics(model, evaluation_rows(data, None, seed=5), "val")
    assert math.isclose(whole["val_perplexity"], _direct(model, data, set(data.record_index.tolist()))["val_perplexity"],
                        rel_tol=1e-4)


def test_ratio_interval_agrees_with_the_delta_method_for_a_ratio_of_record_sums():
    """Σ nll / Σ tokens over records: the delta method's 95 % interval, R ± 1.96 · √(Σ (nll_i − R·n_i)²) / Σ n_i
    (Cochran 1977, §6.4), which the bootstrap's matches at this many records."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(5, 200, 3000).astype(float)
    nll = tokens * rng.gamma(4.0, 0.8, 3000)  # each record's own mean loss
    r = nll.sum() / tokens.sum()
    half = 1.96 * math.sqrt(((nll - r * tokens) ** 2).sum()) / tokens.sum()
    low, high = ratio_interval(nll, tokens)
    assert math.isclose(r - low, half, rel_tol=0.1) and math.isclose(high - r, half, rel_tol=0.1)
    # Records that do not count (no tokens of the kind) are not resampled: the same interval with them added.
    assert ratio_interval(np.append(nll, [0, 0]), np.append(tokens, [0, 0])) == (low, high)
    assert ratio_interval(np.array([3.0, 0.0]), np.array([2.0, 0.0])) is None
