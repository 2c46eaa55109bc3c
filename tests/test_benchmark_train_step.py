"""`benchmarks.train_step --profile`'s operator count: on a CPU, one per op that does work, none for views, no-op
casts and allocations, one per multi-tensor or fused optimizer op (a GPU's single kernel), at least one for a
compiled graph, within the part's range only; and `--json` rows saved as each process ends."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import record_function

from benchmarks.train_step import part_ops
from sdp_core.train.fp32_reads import chunked_squared_norms


def test_a_part_counts_the_ops_that_move_data_once_each():
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    parameters = [torch.nn.Parameter(torch.randn(4)) for _ in range(5)]
    for p in parameters:
        p.grad = torch.randn(4)
    optimizer = torch.optim.AdamW(parameters, fused=True)
    optimizer.step()  # its state made
    chunks = torch.randn(4, 96).bfloat16()
    chunked_squared_norms(chunks)  # compiled
    with torch.profiler.profile() as profiler:
        x @ y  # outside every part: not counted
        with record_function("step.clipping"):
            with record_function("bk.ghost_norms"):
                (x @ y).sum(dtype=torch.float64)  # mm; a cast and a reduction (its zero fill)
                x.view(64).t()  # views: nothing
                x.to(torch.float32)  # already fp32: nothing
            torch._foreach_add([x, y, x], [y, x, y])  # one multi-tensor op
            torch.empty(3)  # an allocation: nothing
        with record_function("step.optimizer"):
            optimizer.step()  # its step counts advanced (one multi-tensor op), then one fused update
        with record_function("bk.small_layers"):
            chunked_squared_norms(chunks)  # a compiled graph: its generated kernel, which the profiler cannot see
    counts = part_ops(profiler, gpu=False)
    assert counts["bk.ghost_norms"] == 3
    assert counts["step.clipping"] == 4
    assert counts["step.optimizer"] == 2
    assert counts["bk.small_layers"] >= 1


def test_a_run_that_stops_before_its_tables_keeps_the_rows_it_measured(tmp_path, monkeypatch):
    """`--json` is written after every process, not only at the end: a run that stops early (a GPU lease that
    ends, a timeout) keeps what it measured, marked incomplete."""
    import json
    import sys

    from benchmarks import train_step

    class Stopped(Exception):
        pass

    def stopped(*args, **kwargs):
        raise Stopped

    out = tmp_path / "rows.json"
    monkeypatch.setattr(train_step, "print_tables", stopped)
    monkeypatch.setattr(sys, "argv", ["train_step", "--shape", "gpt2-tiny", "--batch", "2", "--length", "8",
                                      "--precision", "fp32", "--variants", "non-private", "--steps", "1",
                                      "--warmup", "0", "--json", str(out)])
    with pytest.raises(Stopped):
        train_step.main()
    saved = json.loads(out.read_text())
    assert saved["complete"] is False
    assert [(row["shape"], row["variant"]) for row in saved["rows"]] == [("gpt2-tiny", "non-private")]
    assert saved["rows"][0]["step_s"] > 0


def test_a_ratio_by_round_is_the_median_with_the_order_statistics_that_cover_it():
    """Each round's ratio pairs the two variants' steps of that round (a round where either failed drops out); the
    interval is the widest-ranked pair of order statistics (x_(k), x_(n+1−k)) whose binomial coverage of the median
    reaches 95 %, computed here from the binomial distribution itself; too few rounds give none."""
    import math
    import random
    import statistics

    from benchmarks.train_step import paired_ratio

    rng = random.Random(0)
    for n in range(6, 21):
        steps = [rng.uniform(1.0, 2.0) for _ in range(n)]
        reference = [rng.uniform(0.9, 1.1) for _ in range(n)]
        ratios = sorted(s / r for s, r in zip(steps, reference))
        k = max(j for j in range(1, n // 2 + 1)
                if 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n >= 0.95)
        median, low, high = paired_ratio(steps, reference)
        assert median == pytest.approx(statistics.median(ratios))
        assert (low, high) == pytest.approx((ratios[k - 1], ratios[n - k])), n

    median, low, high = paired_ratio([1.2, None, 1.1, 1.3, 1.0, 1.25], [1.0, 1.0, None, 1.0, 1.0, 1.0])
    assert median == pytest.approx(1.225) and math.isnan(low) and math.isnan(high)  # 4 paired rounds: no interval
    assert all(math.isnan(x) for x in paired_ratio([None], [1.0]))
