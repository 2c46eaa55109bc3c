"""Encoding records into rows (`sdp_core.text.encode.encode_windows`): CPU seconds per 1,000 records and the share
of them the tokenizer itself takes (its `__call__` with offsets, alone), this checkout beside an earlier one's
`text/encode.py` in the same process, rounds alternated, on the same texts, spans and tokenizer, and the rows of
both checked equal.

The records are generated clinic notes (most longer than a row of 128 tokens, so cut into windows) with the regex
policy's spans, and the same notes redacted (as JFT's first phase and Redacted encode them); a BPE of `--vocab`
tokens trained on the redacted notes. Time is the process's CPU time (one thread), which other jobs on the machine
move far less than the wall clock; the median of `--rounds`.

With `--on-ray CPUS`, then the notes encoded in this process beside the same notes encoded on a local Ray of CPUS
CPUs by blocks (`sdp_core.sweep.encoding`, as a sweep's preparation encodes them: the actor pool's start included),
the wall clock of each, the rows checked equal.

    python -m benchmarks.encode [--records 2000] [--rounds 5] [--against /tmp/before] [--on-ray 2]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

from sdp_core.data.clinic import generate_clinic
from sdp_core.detectors import detect_records, get_policy
from sdp_core.text import encode as encode_now
from sdp_core.text.redaction import redact
from sdp_core.text.tokenizer import train_bpe_tokenizer

POLICY = "identifier,phone,email"


def module_of(checkout: Path) -> ModuleType:
    """`checkout`'s `sdp_core/text/encode.py`, loaded beside this checkout's (it imports this checkout's other
    modules: the rows' type and the span alignment, which it shares)."""
    spec = importlib.util.spec_from_file_location("encode_before", checkout / "sdp_core" / "text" / "encode.py")
    assert spec is not None and spec.loader is not None, checkout
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4_000)
    parser.add_argument("--against", type=Path, help="an earlier checkout whose text/encode.py runs beside")
    parser.add_argument("--on-ray", type=int, metavar="CPUS", help="also: here against on a local Ray of CPUS CPUs")
    args = parser.parse_args()
    torch.set_num_threads(1)

    records = generate_clinic(args.records, "encode-benchmark")
    texts = [r.text for r in records]
    spans = detect_records(records, get_policy(POLICY))
    redacted = [redact(t, s) for t, s in zip(texts, spans)]
    tokenizer = train_bpe_tokenizer(redacted, args.vocab)
    inputs = {"notes": (texts, spans), "redacted": (redacted, [()] * len(texts))}
    sides = {"now": encode_now, **({"before": module_of(args.against)} if args.against else {})}

    seconds: dict[tuple[str, str], list[float]] = {(s, i): [] for s in [*sides, "tokenizer"] for i in inputs}
    rows: dict[tuple[str, str], object] = {}
    for _ in range(args.rounds):
        for name, (these, their_spans) in inputs.items():
            start = time.process_time()
            tokenizer(list(these), add_special_tokens=False, return_offsets_mapping=True)
            seconds["tokenizer", name].append(time.process_time() - start)
            for side, module in sides.items():
                start = time.process_time()
                data, summary = module.encode_windows(these, their_spans, tokenizer, args.max_length)
                seconds[side, name].append(time.process_time() - start)
                rows[side, name] = (data, summary)
    for name in inputs:  # both checkouts make the same rows
        if "before" in sides:
            (a, sa), (b, sb) = rows["now", name], rows["before", name]  # type: ignore[misc]
            assert sa.to_dict() == sb.to_dict(), name
            assert all(torch.equal(x, y) for x, y in zip(a.stored()[:4], b.stored()[:4])), name

    print(f"\n{args.records:,} clinic notes, rows of {args.max_length} tokens, {args.rounds} rounds, one thread, "
          "CPU seconds per 1,000 records (median)")
    print(f"{'input':>9} {'rows':>7} " + " ".join(f"{s:>8}" for s in sides) + f" {'tokenizer':>9}"
          + ("  now / before" if "before" in sides else ""))
    for name in inputs:
        per = {s: statistics.median(seconds[s, name]) * 1_000 / args.records for s in [*sides, "tokenizer"]}
        ratio = f"  {per['now'] / per['before']:>12.2f}x" if "before" in per else ""
        print(f"{name:>9} {rows['now', name][1].rows:>7,} " + " ".join(f"{per[s]:>8.3f}" for s in sides)  # type: ignore[index]
              + f" {per['tokenizer']:>9.3f}" + ratio)
    if args.on_ray:
        on_ray(texts, spans, tokenizer, args.max_length, args.on_ray, args.rounds)


def on_ray(texts: list[str], spans: list, tokenizer: object, max_length: int, cpus: int, rounds: int) -> None:
    """The notes encoded here and on a local Ray of `cpus` CPUs (blocks of a quarter of the notes over the CPUs,
    so that each actor gets several), wall clock, the fastest of `rounds` each, rows checked equal."""
    import ray

    from sdp_core.sweep import encoding

    torch.set_num_threads(cpus)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    encoding.BLOCK_RECORDS = -(-len(texts) // (4 * cpus))
    walls: dict[str, list[float]] = {"here": [], "on Ray": []}
    made = {}
    try:
        for _ in range(rounds):
            for side in walls:
                start = time.perf_counter()
                with encoding.ray_encoding() if side == "on Ray" else contextlib.nullcontext():
                    made[side] = encode_now.encode_windows(texts, spans, tokenizer, max_length)  # type: ignore[arg-type]
                walls[side].append(time.perf_counter() - start)
    finally:
        ray.shutdown()
    assert made["here"][1] == made["on Ray"][1]
    assert all(torch.equal(x, y) for x, y in zip(made["here"][0].stored()[:4], made["on Ray"][0].stored()[:4]))
    here, there = min(walls["here"]), min(walls["on Ray"])
    print(f"\n{len(texts):,} notes, wall s (fastest of {rounds}): here {here:.1f}, on a local Ray of {cpus} CPUs "
          f"(blocks of {encoding.BLOCK_RECORDS:,}, the actors' start included) {there:.1f}: {here / there:.2f}x")


if __name__ == "__main__":
    main()
