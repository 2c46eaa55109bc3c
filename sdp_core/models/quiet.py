"""transformers' own progress bars (loading or writing weight shards) stay out of our output, which shows its own."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from transformers.utils import logging as hf_logging


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' bars off inside the block, as they were after it."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
