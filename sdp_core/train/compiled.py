"""Functions that a CPU runs compiled by TorchInductor (C++, and OpenMP over torch's own threads), with the same
arithmetic run eagerly where they cannot compile.

Each is compiled for any shapes (`dynamic`) and as one graph (`fullgraph`): a handful of fused loops, where eager
kernels would write and read back an intermediate tensor per operation. The first call in a process compiles
(seconds; TorchInductor's on-disk cache serves later processes).
"""

from __future__ import annotations

import functools
import logging
from typing import Callable, TypeVar

import torch

log = logging.getLogger(__name__)
Result = TypeVar("Result")


def compiled_or_eager(fn: Callable[..., Result]) -> Callable[..., Result]:
    """fn compiled by TorchInductor for any shapes (`dynamic`) when first called, or fn itself: from the first call
    that cannot be compiled on this machine (logged once), and for a call whose inputs would need one more graph than
    TorchDynamo's recompile limit allows (logged once; the graphs already compiled keep serving the inputs they fit).
    """
    chosen = [torch.compile(fn, dynamic=True, fullgraph=True)]

    @functools.wraps(fn)
    def run(*args: object) -> Result:
        try:
            return chosen[0](*args)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            log.warning("%s runs uncompiled (slower): %s", fn.__name__, str(error).splitlines()[0])
            chosen[0] = fn
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            _warn_once(f"{fn.__name__} runs uncompiled (slower) for inputs past TorchDynamo's recompile limit")
        return fn(*args)

    return run


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)
