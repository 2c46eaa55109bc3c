"""`ray job submit` as the README shows it, against a real Ray head on loopback with token authentication on:
the sweep runs as a job in a copy of the working directory and writes its rows and report at the absolute
`--out`. The head lives in a session of its own and is stopped by PID, so no other Ray on the machine is touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_sweep_cli import free_port, session_pids, stop_session

BIN = Path(sys.executable).parent
README_EXCLUDES = [".venv", "reports", ".cache", "runs", ".git"]  # the README's --runtime-env-json


def test_readme_submits_jobs_with_token_auth_and_the_tested_excludes():
    readme = (REPO / "README.md").read_text()
    assert "RAY_AUTH_MODE=token ray job submit --address http://127.0.0.1:8265 --working-dir ." in readme
    assert f"--runtime-env-json '{json.dumps({'excludes': README_EXCLUDES})}'" in readme


@pytest.mark.slow
def test_ray_job_submit_with_token_auth_runs_a_sweep_to_its_report(tmp_path):
    # RAY_AUTH_MODE=token on both sides, as on a cluster (ray_cluster.yaml); the token is this test run's own
    # (RAY_AUTH_TOKEN_PATH, set in conftest), never one left in the home folder.
    token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
    assert token.stat().st_mode & 0o077 == 0  # readable by its owner only
    # PATH: the job's entrypoint finds `sdp-sweep` in this venv, as the cluster's nodes find theirs.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"RAY_AUTH_MODE": "token", "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}
    temp_dir = tempfile.mkdtemp(prefix="sdpjob-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    dashboard = free_port()
    start = [str(BIN / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(free_port()),
             "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--include-dashboard", "true",
             "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
             "--dashboard-agent-grpc-port", str(free_port()), "--metrics-export-port", str(free_port()),
             "--runtime-env-agent-port", str(free_port()), "--temp-dir", temp_dir, "--num-cpus", "2",
             "--disable-usage-stats"]
    out = tmp_path / "job-out"
    log = tmp_path / "ray-start.log"  # a file, not a pipe: the head's daemons inherit it and never close it
    with open(log, "w") as sink:
        head = subprocess.Popen(start, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert head.wait(timeout=180) == 0, log.read_text()[-2000:]
        with pytest.raises(urllib.error.HTTPError) as refused:  # the Jobs API refuses a request without the token
            urllib.request.urlopen(f"http://127.0.0.1:{dashboard}/api/jobs/", timeout=30)
        assert refused.value.code in (401, 403)
        submitted = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{dashboard}", "--working-dir", ".",
             "--runtime-env-json", json.dumps({"excludes": README_EXCLUDES}), "--",
             "sdp-sweep", "run", "sweeps/smoke.yaml", "--out", str(out), "--set", "base.data.n_train=120",
             "--set", "base.training.max_steps=2", "--set", "mechanisms=[jft]", "--set", "num_trials=1"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=420)
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-2000:]
    finally:
        stop_session(head.pid)  # this head's processes only (`ray stop` would stop every Ray on the machine)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not session_pids(head.pid)
    # One trial (JFT: detection, redaction and both phases) in the job: that both of the smoke sweep's mechanisms
    # finish is carried by the resumed smoke sweep (tests/test_sweep_cli.py), which needs no job to show it.
    rows = [json.loads(p.read_text()) for p in (out / "trials").glob("*.json")]
    assert len(rows) == 1 and all(r["state"] == "finished" for r in rows), [r["error"] for r in rows]
    assert rows[0]["config"]["mechanism"]["name"] == "jft"
    assert (out / "report" / "index.html").is_file()
    assert str(out / "report" / "index.html") in submitted.stdout  # the job's log ends with the report's path
