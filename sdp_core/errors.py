"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations

# Line breaks and other control characters that a message quotes from the user's data (a key, a column name) are
# shown escaped, so the message stays one line whatever the data holds.
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(32), 127)}


class UserError(Exception):
    """A problem with the user's input (config, data, target): one clear line, exit 2.

    `where` names the file (and optionally the YAML path) the problem is in.
    """

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return (f"{self.where}: {self.message}" if self.where else self.message).translate(_ESCAPED)


class ConfigError(UserError):
    """A config file (sweep, search space, trial) that does not validate.

    Holds every problem found, each as `file: yaml.path: message`.
    """

    def __init__(self, problems: list[str], where: str | None = None):
        self.problems = problems
        super().__init__("; ".join(problems), where)

    def lines(self) -> list[str]:
        prefix = f"{self.where}: " if self.where else ""
        return [prefix + p for p in self.problems]


class DataError(UserError):
    """Data that cannot be used: empty, not text, spans outside the text."""


class PrivacyError(UserError):
    """A privacy target that cannot be met, or a ledger asked to overspend."""
