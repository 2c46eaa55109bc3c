"""A value set for the length of a `with` block: what a caller hands to code it calls, without passing it through
every function between (a detection runner, a row encoder, a progress relay, a call after each block read)."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, TypeVar

T = TypeVar("T")


@contextmanager
def set_within(var: ContextVar[T], value: T) -> Iterator[None]:
    """`var` set to `value` inside the block, and back to what it was after it."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)
