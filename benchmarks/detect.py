"""Detection throughput on CustomerSim: records/s per policy, cold and warm cache, and spaCy's share.

    python -m benchmarks.detect [--n 10000] [--cold-n 1000] [--cache-dir DIR]

Cold passes run on the first `--cold-n` dialogs (a cold spaCy pass over 10,000 takes minutes on 2 cores) and are
extrapolated linearly to `--n`. The warm cache (best of 3) is measured on the first `--cold-n` for every policy, and on
all `--n` dialogs for the default CustomerSim policy (its full cold pass runs once and stays in `--cache-dir`).
spaCy's share is the time spent inside `nlp.pipe` over the whole cold detection time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sdp_core.data.customersim import generate_customersim
from sdp_core.detectors import default_cache_dir, detect_records, get_policy
from sdp_core.detectors import spacy_tiers
from sdp_core.detectors.cache import cache_path, fingerprint

POLICIES = ["phone,email,order_number,tracking_number,address", "low_entity", "high_entity", "low_contextual",
            "high_contextual", "customersim", "conservative"]
DEFAULT = "customersim"


class TimedPipeline:
    """Delegates to a spaCy pipeline and adds up the time spent producing docs."""

    def __init__(self, nlp) -> None:
        self.nlp, self.seconds = nlp, 0.0

    def __getattr__(self, name):
        return getattr(self.nlp, name)

    def pipe(self, *args, **kwargs) -> Iterator:
        docs = self.nlp.pipe(*args, **kwargs)
        while True:
            start = time.perf_counter()
            try:
                doc = next(docs)
            except StopIteration:
                self.seconds += time.perf_counter() - start
                return
            self.seconds += time.perf_counter() - start
            yield doc


@contextmanager
def timed_spacy() -> Iterator[list[TimedPipeline]]:
    real, timed = spacy_tiers.load_spacy, []

    def load(name: str):
        timed.append(TimedPipeline(real(name)))
        return timed[-1]

    spacy_tiers.load_spacy = load
    try:
        yield timed
    finally:
        spacy_tiers.load_spacy = real


def seconds(fn, repeat: int = 1) -> float:
    """Best of `repeat` wall-clock timings (the machine is shared: the minimum is the least disturbed run)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--cold-n", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=None, help="persistent cache for the full default run")
    parser.add_argument("--policies", default=";".join(POLICIES), help="policies separated by ';'")
    args = parser.parse_args()

    records = generate_customersim(args.n, args.seed)
    subset = records[: args.cold_n]
    spacy_tiers.load_spacy("en_core_web_sm")  # model load is a one-off cost, kept out of the rates
    print(f"CustomerSim: {args.n} dialogs (seed {args.seed}), cold passes on {len(subset)}; "
          f"{sum(len(r.text) for r in records) / len(records):.0f} chars per dialog")
    header = (f"| {'policy':<48} | cold rec/s | spaCy share | est. cold {args.n} | warm rec/s ({len(subset)}) |")
    print(header)
    print("|" + "---|" * 5)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.policies.split(";"):
            policy = get_policy(name)
            with timed_spacy() as timed:
                cold = seconds(lambda: detect_records(subset, policy, tmp))
            spacy_seconds = sum(t.seconds for t in timed)
            warm = seconds(lambda: detect_records(subset, policy, tmp), repeat=3)
            print(f"| {name:<48} | {len(subset) / cold:10.0f} | {spacy_seconds / cold:11.0%} | "
                  f"{cold * args.n / len(subset):>10.0f} s | {len(subset) / warm:>15.0f} |")

    policy = get_policy(DEFAULT)
    cache_dir = args.cache_dir or default_cache_dir()
    entry = cache_path(cache_dir, fingerprint([r.text for r in records]), policy)
    if not entry.is_file():
        print(f"filling the cache for {DEFAULT} on all {args.n} dialogs (one-off cold pass) ...")
        print(f"  cold {args.n}: {seconds(lambda: detect_records(records, policy, cache_dir, progress=True)):.1f} s")
    warm = seconds(lambda: detect_records(records, policy, cache_dir), repeat=3)
    print(f"warm cache, {DEFAULT}, all {args.n} dialogs: {warm:.2f} s ({args.n / warm:,.0f} records/s; "
          f"entry {entry.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
