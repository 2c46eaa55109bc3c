"""Recall of the `customersim`, `conservative` and `general` policies on two generators, side by side, in one run,
and their detection speed per core, against an earlier checkout when asked.

For each generator (clinic notes and CustomerSim dialogs, the same size and seed) and each policy: per gold label,
token recall and secrets found (a secret counts as found only when redaction leaves nothing of it), both with 95 %
Wilson intervals; then overall token recall, secrets found, token precision and the speed of one cold detection
pass (no cache), in records per CPU second of this process (per core: the machine is shared, and what other
processes take of it does not count) and per wall-clock second. One-off loads (the spaCy model, the name lexicon)
happen in a warm-up pass on a few records and are not in the rates. The recall estimate a sweep makes on data
without gold spans (`sdp_core.detectors.estimate`) is timed on its own, once per policy.

`--against DIR` compares speed only: it times the same passes on this checkout and on the `sdp_core` of DIR (an
earlier commit's worktree, `git worktree add /tmp/before COMMIT`), each in its own process, in `--rounds`
alternating rounds, and prints the fastest round of each beside the ratio; recall is not compared.

    python -m benchmarks.detect_general [--n 500] [--seed 0]
    python -m benchmarks.detect_general --against /tmp/before [--n 300] [--rounds 3] [--policies general]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from sdp_core.data.clinic import generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Record
from sdp_core.detectors import Evaluation, Policy, Rate, evaluate, get_policy, load_spacy

POLICIES = ("customersim", "conservative", "general")
GENERATORS: dict[str, Callable[[int, int], list[Record]]] = {"clinic": generate_clinic,
                                                             "customersim": generate_customersim}
WARM_UP = 5  # records detected before timing: lexicons and lazy imports load here


def rate(r: Rate) -> str:
    return f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"


def secrets_found(ev: Evaluation) -> Rate:
    """Secrets fully masked over every gold label."""
    return Rate.of(sum(lr.secrets.k for lr in ev.per_label.values()), sum(lr.secrets.n for lr in ev.per_label.values()))


def timed_detect(policy: Policy, texts: list[str]) -> tuple[list, float, float]:
    """One cold detection pass after a warm-up: its spans, CPU seconds of this process and wall-clock seconds."""
    policy.detect(texts[:WARM_UP])
    wall, cpu = time.perf_counter(), time.process_time()
    detected = policy.detect(texts)
    return detected, time.process_time() - cpu, time.perf_counter() - wall


def measure(records: list[Record], policy_name: str) -> tuple[Evaluation, float]:
    """The evaluation of one cold detection pass (after a warm-up), and its records per CPU second."""
    detected, cpu, _ = timed_detect(get_policy(policy_name), [r.text for r in records])
    return evaluate(records, detected), len(records) / cpu


def timings(n: int, seed: int, policies: list[str], generators: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """CPU and wall seconds of one cold pass per generator and policy (what `--against` compares)."""
    load_spacy("en_core_web_sm")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for generator in generators:
        texts = [r.text for r in GENERATORS[generator](n, seed)]
        for name in policies:
            _, cpu, wall = timed_detect(get_policy(name), texts)
            out.setdefault(generator, {})[name] = {"cpu": cpu, "wall": wall, "records": len(texts)}
    return out


def run_against(args: argparse.Namespace) -> None:
    """Time this checkout and the one at `args.against` in alternating child processes; print the fastest of each."""
    from rich.console import Console
    from rich.table import Table

    here = Path(__file__).resolve().parents[1]
    trees = {"before": Path(args.against).resolve(), "after": here}
    for tree in trees.values():
        if not (tree / "sdp_core" / "__init__.py").is_file():
            raise SystemExit(f"{tree} holds no sdp_core package")
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for label in (("before", "after") if r % 2 == 0 else ("after", "before")):
            # -P: the child imports sdp_core from PYTHONPATH only, not from the folder of this script
            env = {**os.environ, "PYTHONPATH": str(trees[label])}
            child = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--timings-json",
                                    "--n", str(args.n), "--seed", str(args.seed), "--policies", args.policies,
                                    "--generators", args.generators],
                                   env=env, check=True, capture_output=True, text=True)
            result = json.loads(child.stdout.strip().splitlines()[-1])
            for generator, by_policy in result.items():
                for name, t in by_policy.items():
                    cell = best.setdefault(label, {}).setdefault((generator, name), t)
                    if t["cpu"] < cell["cpu"]:
                        best[label][(generator, name)] = t
            print(f"round {r + 1}/{args.rounds}: {label} done", file=sys.stderr)
    table = Table(title=f"Cold detection speed, {args.n} records per generator (seed {args.seed}), fastest of "
                        f"{args.rounds} alternating rounds; before = {trees['before']}")
    for col in ("generator", "policy", "before rec/CPU-s", "after rec/CPU-s", "after / before",
                "before rec/s (wall)", "after rec/s (wall)"):
        table.add_column(col, justify="right")
    for (generator, name), after in best["after"].items():
        before = best["before"][(generator, name)]
        per_cpu = {k: v["records"] / v["cpu"] for k, v in (("before", before), ("after", after))}
        table.add_row(generator, name, f"{per_cpu['before']:.1f}", f"{per_cpu['after']:.1f}",
                      f"{per_cpu['after'] / per_cpu['before']:.2f}", f"{before['records'] / before['wall']:.1f}",
                      f"{after['records'] / after['wall']:.1f}")
    Console(width=220).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="records per generator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--against", metavar="DIR", help="compare speed with the sdp_core of this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of --against")
    parser.add_argument("--policies", default=";".join(POLICIES), help="policies of --against, separated by ';'")
    parser.add_argument("--generators", default=";".join(GENERATORS), help="generators of --against, separated by ';'")
    parser.add_argument("--timings-json", action="store_true", help=argparse.SUPPRESS)  # a child of --against
    args = parser.parse_args()
    if args.timings_json:
        print(json.dumps(timings(args.n, args.seed, args.policies.split(";"), args.generators.split(";"))))
        return
    if args.against:
        run_against(args)
        return

    from rich.console import Console
    from rich.table import Table

    from sdp_core.detectors.estimate import estimate_recall

    load_spacy("en_core_web_sm")
    console = Console(width=220)
    summary = Table(title=f"Overall, {args.n} records per generator (seed {args.seed})")
    for col in ("generator", "policy", "token recall", "secrets found", "precision", "records/CPU-s", "records/s"):
        summary.add_column(col, justify="right")
    for generator, generate in GENERATORS.items():
        records = generate(args.n, args.seed)
        results = {}
        for name in POLICIES:
            detected, cpu, wall = timed_detect(get_policy(name), [r.text for r in records])
            results[name] = (evaluate(records, detected), len(records) / cpu, len(records) / wall)
        table = Table(title=f"{generator}: recall per gold label, 95 % Wilson intervals (tokens, secrets fully masked)")
        table.add_column("label (secrets, tokens)")
        for name in POLICIES:
            table.add_column(f"{name} tokens", justify="right")
            table.add_column(f"{name} secrets", justify="right")
        first = next(iter(results.values()))[0]
        for label, lr in first.per_label.items():
            cells = [c for ev, *_ in results.values() for c in (rate(ev.per_label[label].tokens),
                                                                 rate(ev.per_label[label].secrets))]
            table.add_row(f"{label} ({lr.secrets.n}, {lr.tokens.n})", *cells)
        table.add_row("all", *[c for ev, *_ in results.values() for c in (rate(ev.recall), rate(secrets_found(ev)))])
        console.print(table)
        for name, (ev, per_cpu, per_wall) in results.items():
            summary.add_row(generator, name, rate(ev.recall), rate(secrets_found(ev)), f"{ev.precision:.3f}",
                            f"{per_cpu:.1f}", f"{per_wall:.1f}")
    console.print(summary)
    texts = [r.text for r in generate_clinic(args.n, args.seed)]
    for name in POLICIES:
        cpu = time.process_time()
        estimates = estimate_recall(texts, get_policy(name))
        inserted = sum(e.recall.n for e in estimates.values())
        console.print(f"recall estimate, {name}: {inserted} records with an inserted secret, "
                      f"{time.process_time() - cpu:.1f} CPU-s")


if __name__ == "__main__":
    main()
