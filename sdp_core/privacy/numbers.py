"""How privacy numbers are printed: rounded up, so a printed bound or noise multiplier is never below the value."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal


def round_up(x: float, digits: int) -> str:
    """`x` (≥ 0) to `digits` significant digits, rounded up: the printed number reads back as a float ≥ x. Rounded
    on the shortest decimal that reads back as x (`repr`), so 0.001 stays 0.001."""
    shortest = Decimal(repr(float(x)))
    if shortest == 0:
        return "0"
    return str(shortest.quantize(Decimal(1).scaleb(shortest.adjusted() - digits + 1), rounding=ROUND_CEILING))


def epsilon_number(epsilon: float, digits: int = 3) -> str:
    """An ε bound for people, rounded up (`round_up`), so it is never printed below itself and a nonzero ε never
    as 0: 0.001 -> `0.001`, 2.99999 -> `3`, 5.1631 -> `5.17`; `∞` without a bound."""
    return "∞" if math.isinf(epsilon) else f"{float(round_up(epsilon, digits)):g}"
