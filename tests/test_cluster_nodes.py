"""A trial and its Ray Train workers as one placement group (the bundles each trial asks for), on a multi-node Ray
on one machine (`ray.cluster_utils.Cluster`): trials and their workers land on different nodes, a sweep whose
`concurrency` trials cannot all hold their workers at once still finishes (no deadlock), the rows reach the driver
and the report is built. Each Ray runs in a child process of its own session, stopped by PID (`run_isolated`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sdp_core.config.sweep import ResourcesConfig
from sdp_core.sweep.driver import trial_resources
from tests.conftest import REPO
from tests.test_sweep_cli import free_port, session_pids, stop_session

SMOKE = str(REPO / "sweeps" / "smoke.yaml")


def trial_config(workers: int, cpu_per_worker: float = 0.5) -> dict:
    return {"trial": {"training": {"workers": workers, "cpu_per_worker": cpu_per_worker}}}


@pytest.mark.parametrize("workers, resources, bundles", [
    (1, {"cpu": 1}, [{"CPU": 1}]),
    (2, {"cpu": 1}, [{"CPU": 1}, {"CPU": 0.5}, {"CPU": 0.5}]),
    (3, {"cpu": 2}, [{"CPU": 2}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]),
    # GPU workers cannot be carved out of the trial's group (trial_resources): they ask the cluster themselves.
    (2, {"cpu": 4, "gpu": 1}, [{"CPU": 4, "GPU": 1}]),
])
def test_a_trial_reserves_its_cpu_workers_in_its_own_placement_group(workers, resources, bundles):
    group = trial_resources(trial_config(workers), ResourcesConfig(**resources))
    assert group.bundles == bundles


def run_isolated(code: str, args: list[str], log: Path, timeout: float) -> int:
    """Run `code` in a new Python process and session (its Ray with it), stdout and stderr to `log`; on a timeout
    fail the test. Every process of the session is stopped by PID afterwards, whatever happened."""
    with open(log, "w") as sink:  # a file: Ray's daemons inherit it and never close it
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no result in {timeout:.0f} s (a deadlock?): {log.read_text()[-3000:]}")
    finally:
        stop_session(proc.pid)
        assert not session_pids(proc.pid)


# Three one-CPU nodes: the head and two workers. A trial (1 CPU) and its two workers (1 CPU each) fill the
# cluster, so its three bundles sit on three nodes, and with `concurrency` 2 the second trial must wait for the
# first: were each trial to ask for its own CPU alone, both would start and wait forever for CPUs for their
# workers. The sweep runs through the CLI, as a user would with --address; afterwards the actor table says where
# each actor ran and which actor started it.
THREE_NODES = """
    import json
    import sys

    from ray.cluster_utils import Cluster

    from sdp_core.cli import main

    out, result, dashboard_port, agent_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cluster = Cluster(initialize_head=True, head_node_args={  # the GCS port is a random one
        "num_cpus": 1, "include_dashboard": False, "dashboard_port": dashboard_port,
        "dashboard_agent_listen_port": agent_port})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        settings = ["base.training.workers=2", "base.training.cpu_per_worker=1", "resources.cpu=1", "concurrency=2",
                    "num_trials=2", "base.training.max_steps=2"]
        code = main(["run", sys.argv[5], "--out", out, "--address", cluster.address,
                     *[a for s in settings for a in ("--set", s)]])
        actors = [{"class": a["ActorClassName"], "node": a["Address"]["NodeID"], "port": a["Address"]["Port"],
                   "owner_node": a["OwnerAddress"]["NodeID"], "owner_port": a["OwnerAddress"]["Port"]}
                  for a in cluster.global_state.actor_table(None).values()]
        nodes = [cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)]
        with open(result, "w") as f:
            json.dump({"code": code, "actors": actors, "nodes": nodes}, f)
    finally:
        cluster.shutdown()
"""


@pytest.mark.slow
def test_concurrent_trials_that_fit_one_at_a_time_all_finish_with_their_workers_on_other_nodes(tmp_path):
    out, result = tmp_path / "out", tmp_path / "result.json"
    args = [str(out), str(result), str(free_port()), str(free_port()), SMOKE]
    code = run_isolated(THREE_NODES, args, tmp_path / "log", timeout=300)
    assert code == 0 and result.is_file(), (tmp_path / "log").read_text()[-3000:]
    run = json.loads(result.read_text())
    assert run["code"] == 0, (tmp_path / "log").read_text()[-3000:]
    rows = [json.loads(p.read_text()) for p in (out / "trials").glob("*.json")]
    assert len(rows) == 2 and all(r["state"] == "finished" for r in rows), [r["error"] for r in rows]
    assert (out / "report" / "index.html").is_file()

    # Each Ray Train run: its controller runs beside the trial that started it; its two workers, started by the
    # controller, run on the two other nodes.
    actors, nodes = run["actors"], set(run["nodes"])
    # Tune's trial actor: Ray names its class `ImplicitFunc` or, in some runs, by its qualified name
    # (`wrap_function.<locals>.ImplicitFunc`, seen in full suites on this machine).
    trials = {a["node"] for a in actors if a["class"].rsplit(".", 1)[-1] == "ImplicitFunc"}
    controllers = [a for a in actors if a["class"] == "TrainController"]
    assert len(controllers) == 2 and {c["node"] for c in controllers} <= trials  # one private phase per trial
    for controller in controllers:
        workers = [a for a in actors if a["class"] == "RayTrainWorker"
                   and (a["owner_node"], a["owner_port"]) == (controller["node"], controller["port"])]
        assert len(workers) == 2
        assert {w["node"] for w in workers} == nodes - {controller["node"]}
