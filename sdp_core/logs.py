"""Log verbosity: `sdp-sweep -v` (INFO) or `-vv` (DEBUG), handed to Ray workers through `SDP_LOG_LEVEL`.

What sdp_core logs is counts and masked examples only, never a raw secret, at every level (tests/test_leakage.py
scans the logs of a whole run at DEBUG).
"""

from __future__ import annotations

import logging
import os

LEVEL_ENV = "SDP_LOG_LEVEL"


def configure_logging(verbosity: int | None = None) -> None:
    """Set the level from `-v` counts, or (in a Ray worker) from the driver's `SDP_LOG_LEVEL`."""
    if verbosity is None:
        level = int(os.environ.get(LEVEL_ENV, logging.WARNING))
    else:
        level = max(logging.DEBUG, logging.WARNING - 10 * verbosity)
        os.environ[LEVEL_ENV] = str(level)  # workers started after this inherit it
    # Only sdp_core's own logger: other libraries' debug output is not covered by the masking guarantee.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("sdp_core").setLevel(level)
