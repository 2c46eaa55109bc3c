"""A local sweep's Ray keeps token authentication on and prints none of Ray's cluster-auth notices."""

from __future__ import annotations

import subprocess
import sys
import tempfile

from tests.conftest import REPO

SCRIPT = """
import ray
from sdp_core.sweep.jobs import connect_ray
connect_ray(None)
from ray._private.authentication.authentication_utils import is_token_auth_enabled
print("token auth", is_token_auth_enabled())
ray.shutdown()
"""


def test_a_local_ray_prints_no_cluster_auth_warning():
    with tempfile.TemporaryDirectory(prefix="r", dir="/tmp") as ray_tmp:  # short: Ray's socket paths
        env = {"RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
        r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                           cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "token auth True" in r.stdout  # the protection stays on
    assert "Token authentication" not in r.stdout + r.stderr
