"""How the sweep's detection pipeline (`sdp_core.sweep.pipeline.detect_file`) grows with the data: generated clinic
notes of each size, read as a Ray Dataset from JSONL and detected on a private Ray cluster started for the run
(`ray start` on free, non-default ports, one session per node, stopped by PID afterwards).

Per size, on one node with `--cpus` CPUs: wall time, records/s and records/s per CPU of the pipeline, the driver's
peak resident memory (its `ru_maxrss`: the driver is a process of its own), the shards' size on disk, and what one
process detects per CPU second on a sample of the same notes beside what the pipeline's actors detected per CPU
second of theirs (the share of a core's work the pipeline adds, whatever else runs on the machine). Then, on the first size, a two-node cluster (a head and a second `ray start` joining it,
each with `--cpus` // 2 CPUs): how many records each node detected, and whether its shards equal the one-node run's,
record for record.

`--same-on-two-nodes` checks that a cluster's layout does not change what a trial gets or trains, per size: `prepare_once`
(detection on the cluster, then splits, canaries, tokenizer and rows in the preparation task) on a one-node Ray of
`--cpus` CPUs and on a two-node Ray of half as many each, every run with an empty cache of its own (so both detect
and train the tokenizer themselves), in a driver process of its own that digests what each data setting holds (40
canaries inserted 10 times each): each split's records (text, gold spans, label, meta), the policy's spans of the
training records, the first training records kept beside the rows, the canaries (their secrets and the records they
went into), the tokenizer (`backend_tokenizer.to_str()`), every row array of every split (ids, weights, secret mask,
record indices) and each entry of the detector's summary (but the seconds its recall estimate took). A table of the
two runs' digests side by side, the records each node's detection actors detected (the pipeline's manifest), and a
non-zero exit on any difference, or if detection did not run on both nodes. Then, in each layout, a DP-SGD and an
ATDP trial of 3 steps on that data (noise from the trial's seed, so two runs compare), in two nodes one on each:
the digests of their trained models' files, their metrics (but times) and their privacy reports, side by side.

`--trial-data` measures instead what a sweep prepares after detection, per size: `prepare_trial_data` (splits,
canaries, the tokenizer, the rows of every split) in a process of its own, its peak resident memory, wall and CPU
time, the time of its tokenizer and encoding (`timings["tokenize"]`) and the rows' bytes, on this checkout and,
with `--against DIR`, on DIR's `sdp_core` side by side (detection cached first by a pass not counted, so both sides
read it from the cache).

`--tokenizer-sample` compares a BPE trained on a seeded sample of each size with one trained on the largest
(`tokenizer.train_records`): the vocabulary they share and the tokens a held-out note becomes.

`--sweep-prep` measures every process of a sweep through its preparation and two trials, per size: `prepare_once`
(the file's detection on the cluster, then the rest of the preparation) in a driver process of its own connected to a
Ray head started for the run, then two trials (`run_trial` on the prepared data, two steps each, in Ray tasks side by
side), on this checkout and, with `--against DIR`, on DIR's. Every process of the run is sampled from /proc while it
runs, its peak resident memory (VmHWM) kept, and the largest of its own pages sampled (`RssAnon`: without the
object store's shared memory it maps), and named by what it ran: the driver, the preparation task, the detection
actors, the trials, and the rest (Ray's own processes, Ray Data's read tasks). `--json FILE` writes one row per size
and process kind, `{"size", "process", "peak_mb", "private_mb", "wall_s"}` (and `side`), wall time being what that kind
of process took (the driver: `prepare_once`; a kind of worker: from its first process seen to its last gone; a
trial: the longer of the two), beside each trial's start-up (reading the prepared data), its mechanism's plan (made
once more before the trial, timed alone) and evaluation seconds.
`--object-store-mb` sizes the head's object store (1 GiB by default): below the rows' size, the run spills to disk,
and what Ray spilled and restored is printed (`ray memory --stats-only`). The trials draw their noise from their seed
(`privacy.reproducible_noise`: no guarantee, which a benchmark's trials do not need), so two runs' trials compare
number for number.

    python -m benchmarks.prepare_scale [--sizes 10000 100000] [--policy general] [--cpus 2]
    python -m benchmarks.prepare_scale --same-on-two-nodes --sizes 10000 100000 [--policy identifier,phone,email]
    python -m benchmarks.prepare_scale --sizes 1000000 --policy identifier,phone,email --no-two-nodes   # 1 M
    python -m benchmarks.prepare_scale --trial-data --sizes 10000 100000 --policy identifier,phone,email \
        [--against /tmp/before]
    python -m benchmarks.prepare_scale --tokenizer-sample --sizes 10000 30000 100000
    python -m benchmarks.prepare_scale --sweep-prep --sizes 10000 100000 --policy identifier,phone,email \
        [--against /tmp/before] [--json rows.json] [--object-store-mb 75] [--mechanism crt]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:  # this file also runs on an earlier checkout's path (`in_checkout`): nothing of it at run time
    from sdp_core.data.records import Record
    from sdp_core.sweep.prepare import SharedData

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / ".cache" / "bench" / "prepare_scale"
CHUNK = 10_000  # notes generated at a time (each chunk from its own seed): the generator holds no more


def notes_file(n: int) -> Path:
    """`n` generated clinic notes as JSONL (written once, chunk by chunk, then reused)."""
    from sdp_core.data.clinic import generate_clinic

    path = DATA / f"clinic-{n}.jsonl"
    if path.is_file():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for k in range(0, n, CHUNK):
            for record in generate_clinic(min(CHUNK, n - k), f"scale-{k // CHUNK}"):
                f.write(json.dumps({"text": record.text}) + "\n")
    tmp.rename(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_node(cpus: int, head: str | None, log: Path, object_store_mb: int = 1024) -> subprocess.Popen:
    """`ray start --block` in a session of its own: the head (head=None) or a node joining `head`, its object store
    `object_store_mb`. Every port that has a fixed default gets a free one, so other Ray instances on the machine
    are left alone."""
    ports = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]
    args = [a for p in ports for a in (p, str(free_port()))]
    if head is None:
        args += ["--head", "--port", head_port := str(free_port()), "--ray-client-server-port", str(free_port()),
                 "--include-dashboard", "false", "--dashboard-port", str(free_port())]
    else:
        args += ["--address", head]
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--block", "--num-cpus", str(cpus),
           "--object-store-memory", str(object_store_mb << 20), "--disable-usage-stats", "--temp-dir", str(log.parent / "ray"), *args]
    with open(log, "a") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    proc.address = f"127.0.0.1:{head_port}" if head is None else head  # type: ignore[attr-defined]
    return proc


def session_pids(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-s", str(sid)], capture_output=True, text=True).stdout
    return [int(pid) for pid, stat in (line.split() for line in out.splitlines()) if not stat.startswith("Z")]


def stop(nodes: list[subprocess.Popen]) -> None:
    """Every process of the nodes' sessions (ours alone), by PID: SIGTERM, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for node in reversed(nodes):
            for pid in session_pids(node.pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        for _ in range(20):
            if not any(session_pids(n.pid) for n in nodes):
                return
            time.sleep(0.5)


def wait_for_cpus(address: str, cpus: int, timeout: float = 120) -> None:
    """Until the cluster at `address` has `cpus` CPUs (every node joined)."""
    code = ("import ray, sys, time; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR');"
            "t = time.time()\nwhile ray.cluster_resources().get('CPU', 0) < int(sys.argv[2]) and time.time() - t < "
            "float(sys.argv[3]): time.sleep(0.5)\nprint(ray.cluster_resources().get('CPU', 0))")
    deadline = time.monotonic() + timeout
    while True:  # a head still starting on a busy machine refuses the first connections
        out = subprocess.run([sys.executable, "-c", code, address, str(cpus), str(timeout)], capture_output=True,
                             text=True, timeout=timeout + 60)
        if out.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    if float((out.stdout.strip() or "0").splitlines()[-1]) < cpus:
        raise SystemExit(f"the cluster at {address} did not reach {cpus} CPUs: {out.stderr[-2000:]}")


def drive(path: Path, policy: str, address: str, cache: Path, workers: int) -> dict:
    """The driver, in this process (started as `--drive`): detect the file on the cluster; what it measured."""
    import ray

    from sdp_core.detectors import get_policy
    from sdp_core.sweep.pipeline import FileSource, detect_file

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    start = time.perf_counter()
    shards = detect_file(FileSource(path), get_policy(policy), workers, cache_dir=cache, progress=True)
    wall = time.perf_counter() - start
    manifest = shards.manifest or {}
    return {"wall_s": wall, "records": manifest["records"], "nodes": manifest["nodes"],
            "detect_cpu_s": manifest["detect_cpu_s"],
            "shard_bytes": sum(p.stat().st_size for p in shards.path.glob("*.parquet")), "shards": str(shards.path),
            "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_driver(path: Path, policy: str, address: str, cache: Path, workers: int, log: Path) -> dict:
    """`drive` in a new Python process (so that its peak memory is the driver's alone)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.prepare_scale", "--drive", str(path), "--policy", policy,
                          "--address", address, "--cache", str(cache), "--workers", str(workers)],
                         cwd=REPO, capture_output=True, text=True)
    log.write_text(out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"the driver failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def in_process_rate(path: Path, policy: str, n: int = 500) -> float:
    """Records one process detects per CPU second on the file's first `n` notes (after a warm-up)."""
    from sdp_core.detectors import get_policy

    with open(path) as f:
        texts = [json.loads(next(f))["text"] for _ in range(n)]
    p = get_policy(policy)
    p.detect(texts[:20])
    start = time.process_time()
    p.detect(texts)
    return n / (time.process_time() - start)


def trial_data(path: Path, policy: str, max_length: int) -> dict:
    """In this process (started as `--trial-data-drive`): `prepare_trial_data` on the file; what it measured."""
    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.preparation import prepare_trial_data

    cfg = parse_model(TrialConfig, {"data": {"source": "file", "path": str(path), "max_length": max_length},
                                    "detector": {"policy": policy}})
    start, cpu = time.perf_counter(), time.process_time()
    prepared = prepare_trial_data(cfg)
    data = prepared.data
    parts = (data.train, data.train_redacted, data.validation, data.test)
    rows = sum(t.numel() * t.element_size() for p in parts
               for t in (p.input_ids, p.weights, p.sensitive, p.record_index))
    return {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
            "tokenize_s": prepared.timings["tokenize"], "rows_mb": rows / 2**20,
            "tokens": sum(p.input_ids.numel() for p in parts),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def sweep_prep(path: Path, policy: str, max_length: int, address: str, trials: int, mechanism: str | None) -> dict:
    """In this process (started as `--sweep-prep-drive`): what a sweep's driver does before its trials start,
    `prepare_once` on the file (detection on the cluster, then splits, tokenizer, rows and plans), connected to the
    head at `address`, then `trials` trials side by side; the driver's peak memory and wall time, and the trials'
    times."""
    import ray

    from sdp_core.sweep.driver import prepare_once  # where earlier checkouts have it too

    # The job's workers run the same checkout as this driver.
    ray.init(address=address, log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    # Noise from the trial's seed (no guarantee, a benchmark's trials), so that two runs' trials can be compared
    trial = {"data": {"source": "file", "path": str(path), "max_length": max_length}, "detector": {"policy": policy},
             "training": {"max_steps": 2}, "evaluation": {"exposure": False, "mia": False},
             "privacy": {"reproducible_noise": True}, **({"mechanism": {"name": mechanism}} if mechanism else {})}
    start = time.perf_counter()
    prepared = prepare_once([trial], None)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    (ref,) = prepared.values()
    task = ray.remote(num_cpus=1, max_calls=1)(_trial_task)
    ran = ray.get([task.remote({**trial, "seed": seed}, [ref]) for seed in range(trials)])
    return {"wall_s": wall, "settings": len(prepared), "peak_mb": peak, "trials": ran}


def _trial_task(trial: dict, prepared: object) -> dict:
    """One trial on the prepared data (what a sweep's trial does, without Tune): its start-up (the data in hand,
    unpickled from the object store), the time until its first step ended (the model built, the first batch read
    from the rows), evaluation and whole wall time. `prepared` arrives as what `prepare_once` gave
    for the setting, inside a list, so that its reading is timed here: a `SharedData` (the object every trial reads,
    the records' reference beside it), or, in earlier checkouts, the one object's reference."""
    import ray

    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.mechanisms import get_mechanism
    from sdp_core.trial import run_trial

    cfg = parse_model(TrialConfig, trial)
    start = time.perf_counter()
    shared = prepared[0]  # type: ignore[index]
    data = ray.get(shared) if isinstance(shared, ray.ObjectRef) else shared.get()
    startup = time.perf_counter() - start
    get_mechanism(cfg.mechanism.name)(data.data, cfg)  # the plan alone, timed the same way on either checkout
    plan = time.perf_counter() - start - startup
    steps: list[float] = []  # when each step ended
    row = run_trial(cfg, prepared=data, on_step=lambda progress: steps.append(time.perf_counter()))
    return {"startup_s": startup, "plan_s": plan, "first_step_s": steps[0] - start if steps else None,
            "evaluate_s": row.timings["evaluate"],
            "wall_s": time.perf_counter() - start,
            **{k: row.metrics.get(k) for k in ("val_perplexity", "val_perplexity_ci_low", "val_perplexity_ci_high")}}


def digest(*parts: object) -> str:
    """A digest of `parts`: bytes as they are, anything else as its JSON (sorted keys; `repr` where JSON has no
    form), each length-prefixed."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=repr).encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def records_digest(records: Iterable[Record]) -> str:
    """The records' text, gold spans, label and meta, in order."""
    return digest([[r.text, None if r.spans is None else [(s.start, s.end, s.label) for s in r.spans], r.label, r.meta]
                   for r in records])


def untimed(summary: dict) -> dict:
    """The detector's summary without the seconds its recall estimate took (`recall_estimate.cost.seconds`: a wall
    time, which no two runs share)."""
    estimate = summary.get("recall_estimate")
    if estimate is None:
        return summary
    cost = {k: v for k, v in estimate["cost"].items() if k != "seconds"}
    return {**summary, "recall_estimate": {**estimate, "cost": cost}}


def setting_digests(shared: SharedData) -> dict[str, str]:
    """Per item a trial of the setting reads (`SharedData`, fetched as a trial fetches it, records included), its
    digest."""
    prepared = shared.get()
    data, records = prepared.data, prepared.data.fetch_records()
    out = {f"records {name}": records_digest(getattr(records.splits, name)) for name in ("train", "validation", "test")}
    out["policy spans of training records"] = digest([[(s.start, s.end, s.label) for s in spans]
                                                      for spans in records.train_spans])
    out["first training records"] = records_digest(data.first_train)
    out["training records (count)"] = digest(data.train_records)
    for family in prepared.canaries:
        out[f"canaries {family.family}: secrets"] = digest(family.secrets, family.inserted)
        out[f"canaries {family.family}: insertions"] = digest([(i.canary, i.record, i.span.start, i.span.end,
                                                                i.span.label) for i in family.insertions])
        out[f"canaries {family.family}: the rest"] = digest(repr(replace(family, secrets=(), insertions=())))
    out["tokenizer"] = digest(data.tokenizer.backend_tokenizer.to_str())
    for split in ("train", "train_redacted", "validation", "test"):
        rows = getattr(data, split)
        for array in ("input_ids", "weights", "sensitive", "record_index"):
            t = getattr(rows, array).contiguous()
            out[f"{split}.{array}"] = digest(str(t.dtype), list(t.shape), t.numpy().tobytes())
    out |= {f"detector summary: {key}": digest(value) for key, value in untimed(prepared.detector).items()}
    return out


SAME_TRIALS = ("dpsgd", "atdp")
"""The trials each layout of `--same-on-two-nodes` trains on its prepared data, seed 0 and 1: in two nodes, the
first on the head and the second on the other node."""


def trained_digest(trial: dict, prepared: list) -> dict:
    """In a Ray task: one trial on the setting's shared data (`prepared[0]`, a `SharedData`, read as a sweep's trial
    reads it), its trained model saved; the digest of the model's files and of its metrics but the timed ones,
    and the node it ran on."""
    import ray

    from sdp_core.config import parse_model
    from sdp_core.config.trial import TrialConfig
    from sdp_core.trial import run_trial

    with tempfile.TemporaryDirectory() as out:
        row = run_trial(parse_model(TrialConfig, trial), Path(out), prepared=prepared[0].get())
        files = sorted((Path(out) / "model").iterdir())
        model = digest(*[(f.name.encode(), f.read_bytes()) for f in files if f.is_file()])
    metrics = {k: v for k, v in row.metrics.items() if not (k.endswith("_seconds") or k.startswith("time"))}
    return {"model": model, "metrics": digest(metrics), "epsilon": digest(row.privacy),
            "node": ray.get_runtime_context().get_node_id()}


def same_drive(path: Path, policy: str, max_length: int, address: str) -> dict:
    """In this process (started as `--same-drive`): `prepare_once` on the file, connected to the cluster at
    `address`, with this run's cache (`$SDP_CACHE_DIR`, set by the caller); every data setting's digests
    (`setting_digests`), the records each node's detection actors detected (the pipeline's manifest), and the
    `SAME_TRIALS` trained on it (`trained_digest`: a few steps each, noise from the trial's seed so that two runs
    compare), the i-th on the cluster's i-th node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from sdp_core.io import cache_root
    from sdp_core.sweep.prepare import prepare_once

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    canaries = {"format": "My ID is {dddddd}", "count": 40, "repeats": 10}
    trial = {"data": {"source": "file", "path": str(path), "max_length": max_length, "canaries": canaries},
             "detector": {"policy": policy}}
    start = time.perf_counter()
    prepared = prepare_once([trial], None)
    wall = time.perf_counter() - start
    manifests = [json.loads(m.read_text()) for m in (cache_root() / "detections").glob("*.shards/manifest.json")]
    (shared,) = prepared.values()
    head = ray.get_runtime_context().get_node_id()
    nodes = [head, *sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)]
    task = ray.remote(num_cpus=1, max_calls=1)(trained_digest)
    settings = {"training": {"max_steps": 3}, "evaluation": {"exposure": False, "mia": False},
                "privacy": {"reproducible_noise": True}}
    on = lambda i: NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)  # noqa: E731
    trained = ray.get([task.options(scheduling_strategy=on(i)).remote(
        {**trial, **settings, "seed": i, "mechanism": {"name": name}}, [shared]) for i, name in enumerate(SAME_TRIALS)])
    return {"wall_s": wall, "nodes": [sorted(m["nodes"].values(), reverse=True) for m in manifests],
            "settings": {key: setting_digests(shared) for key, shared in prepared.items()},
            "trained": {name: {**t, "node": nodes.index(t.pop("node"))} for name, t in zip(SAME_TRIALS, trained)}}


def same_on_two_nodes(sizes: list[int], policy: str, max_length: int, cpus: int, work: Path) -> bool:
    """`prepare_once` per size on one node of `cpus` CPUs and on two of half as many each (a fresh cache each):
    whether every digest is equal and detection ran on both nodes; a table of both."""
    from sdp_core.io import CACHE_ENV

    half = max(1, cpus // 2)
    ok = True
    for n in sizes:
        path = notes_file(n)
        runs = {}
        for layout in ([cpus], [half, half]):
            os.environ[CACHE_ENV] = str(work / f"cache-{n}-{len(layout)}-nodes")  # the nodes and the driver inherit it
            args = ["--policy", policy, "--max-length", str(max_length)]
            runs[len(layout)] = on_cluster(layout, work, lambda address: in_checkout(
                REPO, "--same-drive", path, [*args, "--address", address]))
        one, two = runs[1], runs[2]
        print(f"\n{n:,} notes, policy {policy}: one node of {cpus} CPUs {one['wall_s']:.1f} s, two nodes of {half} "
              f"{two['wall_s']:.1f} s; records each node's detection actors detected: one node {one['nodes']}, "
              f"two nodes {two['nodes']}")
        both = len(two["nodes"]) == 1 and len(two["nodes"][0]) == 2 and min(two["nodes"][0]) > 0
        ok &= both and one["settings"].keys() == two["settings"].keys()
        print(f"{'item':>44} {'one node':>12} {'two nodes':>12} {'equal':>5}")
        for key, mine in one["settings"].items():
            theirs = two["settings"].get(key, {})
            for item in dict.fromkeys([*mine, *theirs]):
                a, b = mine.get(item, "-"), theirs.get(item, "-")
                ok &= a == b
                print(f"{item:>44} {a[:12]:>12} {b[:12]:>12} {'yes' if a == b else 'NO':>5}")
        print(f"detection ran on both nodes: {'yes' if both else 'NO'}", flush=True)
        print(f"\n{'trained (node: one / two nodes)':>44} {'one node':>12} {'two nodes':>12} {'equal':>5}")
        for name, mine in one["trained"].items():
            theirs = two["trained"][name]
            for item in ("model", "metrics", "epsilon"):
                same = mine[item] == theirs[item]
                ok &= same
                label = f"{name} {item} (node {mine['node']} / {theirs['node']})"
                print(f"{label:>44} {mine[item][:12]:>12} {theirs[item][:12]:>12} {'yes' if same else 'NO':>5}")
        apart = sorted(t["node"] for t in two["trained"].values()) == list(range(len(SAME_TRIALS)))
        ok &= apart
        print(f"the two-node run's trials ran on both nodes: {'yes' if apart else 'NO'}", flush=True)
    return ok


def in_checkout(code: Path, flag: str, path: Path, args: list[str], peaks: "Peaks | None" = None) -> dict:
    """This file's `flag` mode on `path` in a new process running the `sdp_core` of checkout `code` (named the
    driver in `peaks`, when given)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    with subprocess.Popen([sys.executable, __file__, flag, str(path), *args], cwd=code, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        if peaks is not None:
            peaks.name(proc.pid, "driver")
        stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{flag} failed in {code}: {stderr[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


KINDS = {"_prepare_remotely": "preparation", "PolicyDetector": "detection", "BlockEncoder": "encoding",
         "_trial_task": "trial"}
"""A task or actor a Ray worker runs -> the kind of process it is."""


class Peaks:
    """Every process of some sessions (a Ray cluster's, started for the run) and of those named, sampled from /proc
    every `interval` s in a thread: each one's peak resident memory (VmHWM: the kernel's own high-water mark, so a
    peak between two samples is not missed), the largest of its own pages sampled (`RssAnon`: shared memory such as
    the object store's, which VmHWM counts in every process that reads it, left out) and kind (`name`, else what its Ray worker log in `logs` says it ran,
    `KINDS`; `other` for the rest), and when it was first and last seen."""

    def __init__(self, sessions: list[int], logs: Path, interval: float = 0.2):
        # Here, not at the top: this file also runs on an earlier checkout's path (`in_checkout`), whose
        # benchmarks package may not have it.
        from benchmarks.proctree import peak_rss_mb, private_mb

        self.peak_rss_mb, self.private_mb = peak_rss_mb, private_mb
        self.sessions, self.logs, self.interval = sessions, logs, interval
        self.named: dict[int, str] = {}
        self.seen: dict[int, dict] = {}  # pid -> {"kind", "peak_mb", "private_mb", "first", "last"}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "Peaks":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def name(self, pid: int, kind: str) -> None:
        self.named[pid] = kind

    def _kind(self, pid: int) -> str:
        """The process's name, else the first task or actor its worker log names (Ray writes `:task_name:` and
        `:actor_name:` lines there; a process title can read `ray::IDLE` while a streaming task runs)."""
        if pid in self.named:
            return self.named[pid]
        for log in self.logs.glob(f"worker-*-{pid}.*"):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith((":task_name:", ":actor_name:")):
                    return next((kind for key, kind in KINDS.items() if key in line), "other")
        return "other"

    def _sample(self) -> None:
        while not self.done.wait(self.interval):
            now = time.perf_counter()
            for pid in [*self.named, *(p for sid in self.sessions for p in session_pids(sid))]:
                peak = self.peak_rss_mb(pid)
                if not peak:
                    continue  # ended
                entry = self.seen.setdefault(pid, {"kind": "other", "peak_mb": 0.0, "private_mb": 0.0, "first": now})
                kind = self._kind(pid)
                if entry["kind"] == "other" and kind != "other":  # a worker is named by the first task it ran
                    entry.update(kind=kind, first=now)
                entry.update(peak_mb=max(entry["peak_mb"], peak), last=now,
                             private_mb=max(entry["private_mb"], self.private_mb(pid)))

    def take(self) -> dict[str, dict]:
        """Per kind, since the last `take`: the largest peak of its processes (resident and private) and its wall
        time (first seen to last seen); then forget the processes that have ended."""
        kinds: dict[str, dict] = {}
        for entry in self.seen.values():
            k = kinds.setdefault(entry["kind"], {"peak_mb": 0.0, "private_mb": 0.0, "first": entry["first"],
                                                 "last": entry["last"]})
            k.update(peak_mb=max(k["peak_mb"], entry["peak_mb"]), private_mb=max(k["private_mb"], entry["private_mb"]),
                     first=min(k["first"], entry["first"]), last=max(k["last"], entry["last"]))
        # Processes still alive (Ray's own) count from here for the next `take`: their peak is their lifetime's.
        self.seen = {pid: {**e, "first": e["last"]} for pid, e in self.seen.items() if self.peak_rss_mb(pid)}
        self.named.clear()
        return {kind: {"peak_mb": v["peak_mb"], "private_mb": v["private_mb"], "wall_s": v["last"] - v["first"]}
                for kind, v in kinds.items()}


def side_by_side(sizes: list[int], against: Path | None, measure: Callable[[Path, Path], dict],
                 warm_up: Callable[[Path], object] | None = None) -> list[dict]:
    """`measure(file, checkout)` per size on this checkout and `against` (when given; then after a first pass on
    this checkout that is not counted, `warm_up(file)` or `measure` itself: detection into the cache, so that both
    sides read it from there)."""
    sides = {"now": REPO, **({"before": against} if against else {})}
    rows = []
    for n in sizes:
        path = notes_file(n)
        if against:
            (warm_up or (lambda p: measure(p, REPO)))(path)
        for name, code in sides.items():
            rows.append({"size": n, "side": name, **measure(path, code)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def growth(rows: list[dict]) -> None:
    """Each side's peak memory at its largest size over its smallest."""
    for name in dict.fromkeys(r["side"] for r in rows):
        mine = [r for r in rows if r["side"] == name]
        if len(mine) > 1:
            print(f"{name}: peak memory, {mine[-1]['size']:,} vs {mine[0]['size']:,} records: "
                  f"{mine[-1]['peak_mb'] / mine[0]['peak_mb']:.2f}x")


def trial_data_table(sizes: list[int], policy: str, max_length: int, against: Path | None) -> None:
    """Peak memory of a trial's data preparation per size, this checkout beside `against` (when given)."""
    rows = side_by_side(sizes, against, lambda path, code: in_checkout(
        code, "--trial-data-drive", path, ["--policy", policy, "--max-length", str(max_length)]))
    print(f"\n{'records':>9} {'side':>6} {'wall s':>7} {'CPU s':>7} {'tokenize s':>10} {'peak MB':>8} {'rows MB':>8} "
          f"{'bytes/token':>11}")
    for r in rows:
        print(f"{r['size']:>9,} {r['side']:>6} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['tokenize_s']:>10.1f} "
              f"{r['peak_mb']:>8.0f} {r['rows_mb']:>8.0f} {r['rows_mb'] * 2**20 / r['tokens']:>11.1f}")
    growth(rows)


def sweep_prep_table(sizes: list[int], policy: str, max_length: int, against: Path | None, cpus: int,
                     work: Path, json_path: Path | None, object_store_mb: int, mechanism: str | None) -> None:
    """Every process's peak memory through a sweep's preparation and two trials per size, on a Ray head of `cpus`
    CPUs and an object store of `object_store_mb` started for the run, this checkout beside `against` (when given);
    the rows to `json_path` (when given); what the object store spilled to disk."""
    head = ray_node(cpus, None, work / "ray.log", object_store_mb)
    processes: list[dict] = []
    settings = ["--policy", policy, "--max-length", str(max_length), *(["--mechanism", mechanism] if mechanism else [])]
    try:
        address = head.address  # type: ignore[attr-defined]
        wait_for_cpus(address, cpus)
        with Peaks([head.pid], work / "ray" / "session_latest" / "logs") as peaks:
            def measure(path: Path, code: Path) -> dict:
                peaks.take()  # what ran before (a first pass, an earlier side) is not this one's
                run = in_checkout(code, "--sweep-prep-drive", path, [*settings, "--address", address], peaks)
                time.sleep(2 * peaks.interval)  # the last samples of the trials' workers
                kinds = peaks.take()
                # Its own count of its peak: exact; its private pages as sampled.
                kinds["driver"] = {**kinds.get("driver", {"private_mb": 0.0}), "peak_mb": run["peak_mb"],
                                   "wall_s": run["wall_s"]}
                kinds["trial"]["wall_s"] = max(t["wall_s"] for t in run["trials"])
                run["processes"] = kinds
                return run

            rows = side_by_side(sizes, against, measure, lambda path: in_checkout(
                REPO, "--sweep-prep-drive", path, [*settings, "--address", address, "--trials", "0"]))
        stats = subprocess.run([str(Path(sys.executable).parent / "ray"), "memory", "--stats-only", "--address",
                                address], capture_output=True, text=True).stdout
        print(f"object store of {object_store_mb:,} MB:", *[line.strip() for line in stats.splitlines()
                                                          if "pilled" in line or "Restored" in line], sep="\n  ")
    finally:
        stop([head])
    print(f"\n{'records':>9} {'side':>6} {'process':>12} {'peak MB':>8} {'private MB':>10} {'wall s':>7}")
    for r in rows:
        for kind, p in sorted(r["processes"].items()):
            processes.append({"size": r["size"], "side": r["side"], "process": kind, "peak_mb": round(p["peak_mb"]),
                              "private_mb": round(p["private_mb"]), "wall_s": round(p["wall_s"], 1)})
            print(f"{r['size']:>9,} {r['side']:>6} {kind:>12} {p['peak_mb']:>8.0f} {p['private_mb']:>10.0f} "
                  f"{p['wall_s']:>7.1f}")
    print(f"\n{'records':>9} {'side':>6} {'trial start-up s':>16} {'plan s':>7} {'first step s':>12} "
          f"{'trial evaluation s':>18} {'val perplexity':>14} {'95 % interval':>15}")
    for r in rows:
        for t in r["trials"]:
            interval = (f"{t['val_perplexity_ci_low']:.2f}–{t['val_perplexity_ci_high']:.2f}"
                        if t.get("val_perplexity_ci_low") is not None else "")
            first = f"{t['first_step_s']:.2f}" if t.get("first_step_s") is not None else "–"  # an earlier checkout's
            print(f"{r['size']:>9,} {r['side']:>6} {t['startup_s']:>16.3f} {t['plan_s']:>7.3f} {first:>12} "
                  f"{t['evaluate_s']:>18.1f} {t['val_perplexity']:>14.2f} {interval:>15}")
    if json_path is not None:
        json_path.write_text(json.dumps(processes, indent=1) + "\n")


def tokenizer_sample_table(sizes: list[int], vocab_size: int) -> None:
    """A BPE trained on a seeded sample of each size against one trained on the largest size (the same generated
    clinic notes as the other modes, their gold secrets redacted, as the tokenizer reads them): the share of its
    vocabulary they share, and the tokens a held-out note becomes with each (2,000 notes of a seed of their own)."""
    import random

    from sdp_core.data.clinic import generate_clinic
    from sdp_core.text.redaction import redact
    from sdp_core.text.tokenizer import train_bpe_tokenizer

    largest = max(sizes)
    texts = [redact(r.text, r.spans) for k in range(0, largest, CHUNK)
             for r in generate_clinic(min(CHUNK, largest - k), f"scale-{k // CHUNK}")]
    held_out = [redact(r.text, r.spans) for r in generate_clinic(2_000, "tokenizer-held-out")]
    print(f"{'sample':>9} {'of':>9} {'train s':>7} {'vocabulary shared':>17} {'tokens a held-out note':>22}")
    whole = None
    for n in sorted(sizes, reverse=True):
        start = time.perf_counter()
        tokenizer = train_bpe_tokenizer(random.Random(0).sample(texts, n) if n < largest else texts, vocab_size)
        wall = time.perf_counter() - start
        whole = whole or tokenizer
        shared = len(set(tokenizer.get_vocab()) & set(whole.get_vocab())) / len(whole.get_vocab())
        tokens = sum(map(len, tokenizer(held_out, add_special_tokens=False)["input_ids"])) / len(held_out)
        print(f"{n:>9,} {largest:>9,} {wall:>7.1f} {shared:>17.1%} {tokens:>22.1f}", flush=True)


def on_cluster(cpus: list[int], work: Path, run: Callable[[str], dict]) -> dict:
    """Start a cluster of `cpus` nodes (a head, then the others joining it), `run(its address)`, stop the cluster."""
    nodes = [ray_node(cpus[0], None, work / "ray.log")]
    try:
        address = nodes[0].address  # type: ignore[attr-defined]
        wait_for_cpus(address, cpus[0])
        nodes += [ray_node(c, address, work / "ray.log") for c in cpus[1:]]
        wait_for_cpus(address, sum(cpus))
        return run(address)
    finally:
        stop(nodes)


def cluster_run(path: Path, policy: str, cpus: list[int], cache: Path, work: Path) -> dict:
    """Detect the file on a cluster of `cpus` nodes started for it."""
    return on_cluster(cpus, work, lambda address: run_driver(path, policy, address, cache, sum(cpus),
                                                             work / f"driver-{len(cpus)}-nodes.log"))


def same_spans(a: str, b: str) -> bool:
    """Whether two runs' shards hold the same spans for every record."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def read(folder: str) -> pa.Table:
        shards = [pq.read_table(p) for p in sorted(Path(folder).glob("part-*.parquet"))]
        return pa.concat_tables(shards).select(["record", "start", "end", "label"])

    return read(a).equals(read(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--policy", help="the detector policy (general; identifier,phone,email with "
                        "--same-on-two-nodes)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the one-node cluster (two nodes: half each)")
    parser.add_argument("--no-two-nodes", action="store_true")
    parser.add_argument("--trial-data", action="store_true", help="measure the preparation after detection")
    parser.add_argument("--max-length", type=int, default=128, help="rows' length (--trial-data, --sweep-prep, "
                        "--same-on-two-nodes)")
    parser.add_argument("--against", type=Path, help="an earlier checkout to compare with (--trial-data, --sweep-prep)")
    parser.add_argument("--drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sweep-prep", action="store_true", help="measure the sweep driver through its preparation")
    parser.add_argument("--tokenizer-sample", action="store_true",
                        help="a BPE trained on a sample of each size against one on the largest")
    parser.add_argument("--vocab-size", type=int, default=4000, help="the BPE's vocabulary (--tokenizer-sample)")
    parser.add_argument("--json", type=Path, help="--sweep-prep: the rows per size and process kind to this file")
    parser.add_argument("--object-store-mb", type=int, default=1024,
                        help="--sweep-prep: the head's object store (below the rows' size, the run spills to disk)")
    parser.add_argument("--same-on-two-nodes", action="store_true",
                        help="what a trial gets, prepared on one node and on two, digest for digest")
    parser.add_argument("--same-drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--trial-data-drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sweep-prep-drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--trials", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--mechanism", help="--sweep-prep: the trials' mechanism (by default the default trial's)")
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.policy = args.policy or ("identifier,phone,email" if args.same_on_two_nodes else "general")
    if args.same_drive:
        print(json.dumps(same_drive(args.same_drive, args.policy, args.max_length, args.address)))
        return
    if args.drive:
        print(json.dumps(drive(args.drive, args.policy, args.address, args.cache, args.workers)))
        return
    if args.trial_data_drive:
        print(json.dumps(trial_data(args.trial_data_drive, args.policy, args.max_length)))
        return
    if args.sweep_prep_drive:
        print(json.dumps(sweep_prep(args.sweep_prep_drive, args.policy, args.max_length, args.address, args.trials,
                                    args.mechanism)))
        return
    if args.tokenizer_sample:
        tokenizer_sample_table(args.sizes, args.vocab_size)
        return
    if args.trial_data:
        trial_data_table(args.sizes, args.policy, args.max_length, args.against)
        return

    work = Path(tempfile.mkdtemp(prefix="prepare-scale-"))
    # A token of this run's own for its clusters and drivers (inherited by the subprocesses), none under ~/.ray.
    token = work / "auth_token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    print(f"policy {args.policy}; logs and shards in {work}", flush=True)
    if args.same_on_two_nodes:
        if not same_on_two_nodes(args.sizes, args.policy, args.max_length, args.cpus, work):
            raise SystemExit("two nodes prepared or trained otherwise than one node, or did not both detect and train")
        return
    if args.sweep_prep:
        sweep_prep_table(args.sizes, args.policy, args.max_length, args.against, args.cpus, work, args.json,
                         args.object_store_mb, args.mechanism)
        return
    rows = []
    for n in args.sizes:
        path = notes_file(n)
        per_cpu_s = in_process_rate(path, args.policy)
        run = cluster_run(path, args.policy, [args.cpus], work / f"one-node-{n}", work)
        run.update(size=n, file_mb=path.stat().st_size / 2**20, in_process=per_cpu_s)
        rows.append(run)
        print(json.dumps(run), flush=True)
    print(f"\n{'records':>9} {'wall s':>8} {'rec/s':>7} {'rec/s/CPU':>9} {'actors rec/CPU-s':>16} "
          f"{'1 process rec/CPU-s':>19} {'driver peak MB':>14} {'shards MB':>9} {'file MB':>8}")
    for r in rows:
        rate = r["records"] / r["wall_s"]
        print(f"{r['records']:>9,} {r['wall_s']:>8.1f} {rate:>7.1f} {rate / args.cpus:>9.1f} "
              f"{r['records'] / r['detect_cpu_s']:>16.1f} {r['in_process']:>19.1f} {r['driver_peak_mb']:>14.0f} "
              f"{r['shard_bytes'] / 2**20:>9.1f} {r['file_mb']:>8.1f}")
    if len(rows) > 1:
        print(f"driver peak memory, {rows[-1]['records']:,} vs {rows[0]['records']:,} records: "
              f"{rows[-1]['driver_peak_mb'] / rows[0]['driver_peak_mb']:.2f}x")
    if args.no_two_nodes:
        return
    n, half = args.sizes[0], max(1, args.cpus // 2)
    two = cluster_run(notes_file(n), args.policy, [half, half], work / f"two-nodes-{n}", work)
    print(f"\ntwo nodes of {half} CPU(s), {n:,} records: {two['wall_s']:.1f} s; records per node: "
          f"{sorted(two['nodes'].values(), reverse=True)}; the same spans as one node, record for record: "
          f"{same_spans(two['shards'], rows[0]['shards'])}")


if __name__ == "__main__":
    main()
