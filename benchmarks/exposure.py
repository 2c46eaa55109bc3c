"""Exact canary exposure over 10^6 candidates: trie enumeration vs naive batched scoring, and the skew-normal
estimate's error against the exact value.

    python -m benchmarks.exposure [--steps 300] [--naive-subset 100000] [--full-naive] [--threads 1]

Setup: a byte-level BPE (`train_bpe_tokenizer`, digits one per token, ~3.5k tokens) trained on 5000 CustomerSim
dialogs; `gpt2-tiny` trained on 400 dialogs holding the canaries "My ID is {dddddd}" of a one-run draw of 10 (each
inserted 10 times with probability 1/2), long enough for them to stand out; the held-out ones are the controls.
Every candidate is scored after `<eos>USR: `, where the canary lines were inserted.
Naive scoring of all 10^6 candidates takes minutes on a CPU: by default it is timed on a random subset and
extrapolated linearly (its scores are checked against the trie's on that subset); `--full-naive` runs it all and
compares the ranks.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from sdp_core.attacks.estimate import estimate_exposures
from sdp_core.attacks.exposure import rank_secrets, score_candidates, score_space
from sdp_core.attacks.candidates import chars_index, default_context, random_chars
from sdp_core.config import ModelConfig
from sdp_core.data.canaries import insert_canaries
from sdp_core.data.customersim import generate_customersim
from sdp_core.models import build_model
from sdp_core.text.tokenizer import train_bpe_tokenizer
from sdp_core.tensors import LMData
from sdp_core.train.loop import Phase, make_optimizer, train_phase

FORMAT = "My ID is {dddddd}"
MAX_LENGTH = 128


def lm_data(tokenizer, texts: list[str]) -> LMData:
    rows = [[tokenizer.eos_token_id] + tokenizer(t, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            for t in texts]
    rows = [r[:MAX_LENGTH] for r in rows]
    ids = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_token_id, dtype=torch.long)
    weights = torch.zeros(ids.shape)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        weights[i, 1 : len(r)] = 1.0
    return LMData(ids, weights, torch.zeros(ids.shape, dtype=torch.bool), torch.arange(len(rows)))


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer-records", type=int, default=5000)
    ap.add_argument("--records", type=int, default=400, help="training dialogs (canaries go into 50 of them)")
    ap.add_argument("--steps", type=int, default=300, help="training steps before the attack")
    ap.add_argument("--naive-subset", type=int, default=100_000, help="candidates timed for the naive scorer")
    ap.add_argument("--full-naive", action="store_true", help="score all 10^6 naively and compare ranks")
    ap.add_argument("--sample-size", type=int, default=10_000, help="candidates sampled by the estimate")
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    tokenizer = train_bpe_tokenizer([r.text for r in generate_customersim(args.tokenizer_records, 1)], 4000)
    records, plan = insert_canaries(generate_customersim(args.records, 0), FORMAT, count=10, repeats=10, seed=0)
    model = build_model(ModelConfig(arch="gpt2", preset="gpt2-tiny"), len(tokenizer), MAX_LENGTH)
    phase = Phase("fit", lm_data(tokenizer, [r.text for r in records]), private=False, epochs=1000, batch_size=16,
                  max_steps=args.steps)
    _, train_s = timed(train_phase, model, make_optimizer(model, "adamw", 3e-3, 0.0), phase, None, 0)
    model.eval()
    fmt, context = plan.format, default_context(tokenizer, plan.context)
    members = [s for s, inserted in zip(plan.secrets, plan.inserted) if inserted]
    secrets = members + [s for s, inserted in zip(plan.secrets, plan.inserted) if not inserted]

    trie, trie_s = timed(score_space, model, tokenizer, fmt, context=context, batch_size=args.batch_size)
    exact = rank_secrets(trie, fmt, secrets)
    rows: list[tuple[str, str]] = [("vocabulary / model", f"{len(tokenizer)} BPE tokens / gpt2-tiny, {args.steps} "
                                    f"steps ({train_s:.0f} s), torch threads {args.threads}"),
                                   ("candidates |R|", f"{fmt.space_size:,}"),
                                   ("trie enumeration", f"{trie_s:.1f} s")]
    if args.full_naive:
        naive, naive_s = timed(score_space, model, tokenizer, fmt, enumeration="naive", context=context,
                               batch_size=args.batch_size)
        same = [r["rank"] for r in rank_secrets(naive, fmt, secrets)] == [r["rank"] for r in exact]
        rows += [("naive batched scoring", f"{naive_s:.1f} s (all 10^6)"),
                 ("naive / trie", f"{naive_s / trie_s:.1f}x"),
                 ("same ranks, max |Δscore|", f"{same}, {np.abs(naive - trie).max():.1e}")]
    else:
        chars = random_chars(fmt, args.naive_subset, np.random.default_rng(1))
        subset, sub_s = timed(score_candidates, model, tokenizer, fmt, chars, enumeration="naive", context=context,
                              batch_size=args.batch_size)
        naive_s = sub_s * fmt.space_size / args.naive_subset
        rows += [("naive batched scoring", f"{naive_s:.0f} s (EXTRAPOLATED from {args.naive_subset:,} random "
                                           f"candidates in {sub_s:.1f} s)"),
                 ("naive / trie", f"{naive_s / trie_s:.1f}x"),
                 ("max |Δscore| on the subset", f"{np.abs(subset - trie[chars_index(fmt, chars)]).max():.1e}")]
    (estimated, fit), est_s = timed(estimate_exposures, model, tokenizer, fmt, secrets, context=context,
                                    sample_size=args.sample_size, batch_size=args.batch_size)
    rows.append(("skew-normal estimate", f"{est_s:.1f} s ({args.sample_size:,} samples, a={fit['skewnorm_a']:.2f})"))
    for n, (e, x) in enumerate(zip(estimated, exact)):
        kind = f"canary #{n + 1}" if n < len(members) else f"held out #{n + 1 - len(members)}"
        rows.append((f"{kind}: exact / estimate", f"rank {x['rank']:,}: {x['exposure']:.2f} / {e['exposure']:.2f} bits "
                     f"(error {e['exposure'] - x['exposure']:+.2f})"))
    errors = np.array([e["exposure"] - x["exposure"] for e, x in zip(estimated, exact)])
    rows.append(("estimate error (mean |.|, max |.|)", f"{np.abs(errors).mean():.2f}, {np.abs(errors).max():.2f} bits"))

    table = Table(title=f"canary exposure, {FORMAT}")
    table.add_column("measure")
    table.add_column("value")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
