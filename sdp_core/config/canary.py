"""The canary format: the `data.canaries.format` template, parsed (plain data; the data layer draws and inserts).

A format holds one placeholder of format characters: `d` a digit, `a` a lower-case letter, `A` an upper-case
letter, `X` an upper-case letter or digit. `My ID is {dddddd}` has a secret space of 10^6 values.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import string
from dataclasses import dataclass

from sdp_core.errors import UserError

ALPHABETS = {"d": string.digits, "a": string.ascii_lowercase, "A": string.ascii_uppercase,
             "X": string.ascii_uppercase + string.digits}
_PLACEHOLDER = re.compile(r"\{([daAX]+)\}")


@dataclass(frozen=True)
class CanaryFormat:
    """A parsed format: the text before and after the secret, and one alphabet per secret character."""

    template: str
    prefix: str
    suffix: str
    alphabets: tuple[str, ...]

    @classmethod
    def parse(cls, template: str) -> "CanaryFormat":
        matches = list(_PLACEHOLDER.finditer(template))
        if len(matches) != 1:
            raise UserError(
                f"canary format {template!r} needs exactly one placeholder like {{dddddd}} "
                f"(d digit, a lower, A upper, X upper or digit); found {len(matches)}"
            )
        m = matches[0]
        return cls(template, template[: m.start()], template[m.end() :], tuple(ALPHABETS[c] for c in m.group(1)))

    @property
    def space_size(self) -> int:
        """|R|: how many secrets the format can hold."""
        return math.prod(len(a) for a in self.alphabets)

    def render(self, secret: str) -> str:
        return self.prefix + secret + self.suffix

    def random_secret(self, rng: random.Random) -> str:
        return "".join(rng.choice(a) for a in self.alphabets)

    def all_secrets(self):
        """Every candidate, in a fixed order (only for spaces small enough to enumerate)."""
        return ("".join(chars) for chars in itertools.product(*self.alphabets))
