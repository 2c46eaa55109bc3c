"""Where a sweep's Ray comes from: a private local instance, a named cluster, or the cluster of a Ray job.

Local sweeps start their own Ray (`address="local"`) and never attach to one they happen to find on the machine.
`--address` / `RAY_ADDRESS` joins a cluster; an address nobody answers at is one line and exit code 2. Inside
`ray job submit` (the job supervisor sets `RAY_JOB_CONFIG_JSON_ENV_VAR`) a bare `ray.init()` joins the job's
cluster, and outputs need absolute paths because the job runs in a temporary copy of the working directory.
"""

from __future__ import annotations

import logging
import os
import socket
from urllib.parse import urlsplit

from sdp_core.errors import UserError


def in_ray_job() -> bool:
    """Whether this process is the entrypoint of a `ray job submit`."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


def _probe(address: str) -> None:
    """Fail fast when nothing listens at the address (`ray.init` would retry for a long time)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise UserError(f"--address {address!r}: expected host:port (the head's GCS port), ray://host:port or auto")
    try:
        socket.create_connection((parts.hostname, port), timeout=5).close()
    except OSError as e:
        raise UserError(f"no Ray cluster answers at {address} ({e.strerror or e})") from None


def _local_auth_notice(record: logging.LogRecord) -> bool:
    """A logging filter: False for Ray's notice that a new local cluster enabled token authentication."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def connect_ray(address: str | None) -> None:
    """Join the job's cluster, the cluster at `address` (or `RAY_ADDRESS`), or start a private local Ray."""
    import ray

    quiet = dict(log_to_driver=False, logging_level=logging.WARNING)  # trial errors are in the rows
    if in_ray_job():
        ray.init(**quiet)
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address == "local":
        # A new local Ray turns token authentication on (a token under ~/.ray) and warns that it did: advice
        # about opting out that is meant for clusters. The protection stays; only that one warning is dropped.
        auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
        auth_log.addFilter(_local_auth_notice)
        try:
            ray.init(address="local", include_dashboard=False, **quiet)
        finally:
            auth_log.removeFilter(_local_auth_notice)
        return
    if address != "auto":
        _probe(address)
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(f"cannot join the Ray cluster at {address}: {str(e).splitlines()[0]}") from None
