"""On a multi-node Ray on one machine (`ray.cluster_utils.Cluster`) trials and their workers land on different
nodes, the rows reach the driver and the report is built (a file of its own: test files run side by side)."""

from __future__ import annotations

import json

import pytest

from tests.test_cluster_placement import SMOKE, run_isolated
from tests.test_sweep_cli import free_port


# Three one-CPU nodes: the head and two workers. A trial (1 CPU) and its two workers (1 CPU each) fill the
# cluster, so its three bundles sit on three nodes. The sweep runs through the CLI, as a user would with
# --address; afterwards the actor table says where each actor ran and which actor started it.
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
def test_trials_and_their_workers_land_on_different_nodes_of_a_multi_node_cluster(tmp_path):
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
    trials = {a["node"] for a in actors if a["class"] == "ImplicitFunc"}
    controllers = [a for a in actors if a["class"] == "TrainController"]
    assert len(controllers) == 2 and {c["node"] for c in controllers} <= trials  # one private phase per trial
    for controller in controllers:
        workers = [a for a in actors if a["class"] == "RayTrainWorker"
                   and (a["owner_node"], a["owner_port"]) == (controller["node"], controller["port"])]
        assert len(workers) == 2
        assert {w["node"] for w in workers} == nodes - {controller["node"]}
