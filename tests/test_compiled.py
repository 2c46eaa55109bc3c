"""`compiled_or_eager`: the compiled function's own results where TorchInductor cannot compile it, or where TorchDynamo
would need one more graph than its recompile limit allows, each logged once."""

from __future__ import annotations

import logging

import torch

from sdp_core.train.compiled import compiled_or_eager


def _tripled_squares(x: torch.Tensor) -> torch.Tensor:
    return x.float().square().sum(-1) * 3


def _our_messages(caplog) -> list[str]:
    return [r.getMessage().split(":")[0] for r in caplog.records if r.name == "sdp_core.train.compiled"]


def test_a_function_that_cannot_compile_runs_eagerly(caplog):
    """No working C++ compiler: the first call logs one line (besides TorchInductor's own report) and returns the
    function's own result, and later calls run it eagerly without trying again."""
    run = compiled_or_eager(_tripled_squares)
    x = torch.randn(3, 4, 32).bfloat16()
    no_compiler = {"cpp.cxx": (None, "/nonexistent/c++"), "fx_graph_cache": False}
    with torch._inductor.config.patch(no_compiler), caplog.at_level(logging.WARNING, "sdp_core.train.compiled"):
        assert torch.equal(run(x), _tripled_squares(x))
        assert torch.equal(run(x + 1), _tripled_squares(x + 1))
    assert _our_messages(caplog) == ["_tripled_squares runs uncompiled (slower)"]


def test_inputs_past_the_recompile_limit_run_eagerly_and_the_compiled_graph_still_serves(caplog):
    """A limit of one graph: bf16 inputs compile, fp16 and fp64 ones (each would need a graph of its own) return the
    eager result with one log line between them, and bf16 inputs still run the compiled graph (no new warning)."""
    run = compiled_or_eager(_tripled_squares)
    x = torch.randn(3, 4, 32)
    with torch._dynamo.config.patch(recompile_limit=1), caplog.at_level(logging.WARNING, "sdp_core.train.compiled"):
        assert torch.allclose(run(x.bfloat16()), _tripled_squares(x.bfloat16()))
        for dtype in (torch.float16, torch.float64, torch.float16):
            assert torch.equal(run(x.to(dtype)), _tripled_squares(x.to(dtype)))
        assert torch.allclose(run(x.bfloat16() + 1), _tripled_squares(x.bfloat16() + 1))
    past_the_limit = "_tripled_squares runs uncompiled (slower) for inputs past TorchDynamo's recompile limit"
    assert _our_messages(caplog) == [past_the_limit]
