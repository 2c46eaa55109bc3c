"""Time per trial and per private step of every mechanism, as ratios to No-DP, in one run.

Every mechanism trains through `run_trial` on the same embedded data (CustomerSim, gpt2-tiny; the LSTM for
Selective-DPSGD, against an LSTM No-DP), with the same ε target, batch size and step cap per phase; attacks are
off so the trial time is data + detection + tokenizer + training + evaluation. A "private step" is one
optimizer step of a DP phase (for Selective-DPSGD one private-segment update, several per batch); No-DP's
"step" is its public step, the reference. Detection is cached, and a
warm-up trial runs first, so no mechanism pays the one-time spaCy and import costs.
Usage: python -m benchmarks.mechanisms [--n-train 500] [--steps 20]
"""

from __future__ import annotations

import argparse

ROWS = [("No-DP", "gpt2", "nodp"), ("Redacted", "gpt2", "redacted"), ("DP-SGD", "gpt2", "dpsgd"),
        ("JFT", "gpt2", "jft"), ("CRT", "gpt2", "crt"), ("ATDP", "gpt2", "atdp"),
        ("No-DP (LSTM)", "lstm", "nodp"), ("DP-SGD (LSTM)", "lstm", "dpsgd"), ("Selective-DPSGD (LSTM)", "lstm", "sdpsgd")]


def trial_config(arch: str, mechanism: str, n_train: int, steps: int):
    from sdp_core.config.trial import TrialConfig

    return TrialConfig.model_validate({
        "data": {"n_train": n_train, "n_validation": 100, "n_test": 100, "max_length": 128},
        "model": {"arch": arch}, "mechanism": {"name": mechanism},
        "training": {"batch_size": 32, "epochs": 1, "max_steps": steps},
        "evaluation": {"exposure": False, "mia": False},
    })


def measure(arch: str, mechanism: str, n_train: int, steps: int) -> dict:
    from sdp_core.trial import run_trial

    r = run_trial(trial_config(arch, mechanism, n_train, steps))
    m, phases = r.metrics, r.phases
    public = [p for p in phases if not p["private"]]
    step_s = (m["private_seconds"] / m["private_steps"] if m["private_steps"]
              else sum(p["seconds"] for p in public) / max(1, sum(p["steps"] for p in public)))
    return {"trial_s": r.timings["total"], "train_s": r.timings["train"], "private_steps": m["private_steps"],
            "public_steps": sum(p["steps"] for p in public), "step_s": step_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=500)
    parser.add_argument("--steps", type=int, default=20, help="step cap per phase")
    args = parser.parse_args()

    import torch
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    torch.set_num_threads(1)  # as in a sweep trial (one CPU each)
    measure("gpt2", "nodp", args.n_train, 2)  # warm-up: imports, spaCy, the detection cache
    results = {name: measure(arch, mech, args.n_train, args.steps)
               for name, arch, mech in track(ROWS, description="trials")}

    table = Table(title=f"Mechanisms on CustomerSim ({args.n_train} dialogs), ≤ {args.steps} steps per phase, "
                        "batch 32 × 128 tokens, ε = 3, 1 CPU thread")
    for col in ("mechanism", "trial (s)", "trial vs No-DP", "train (s)", "public steps", "private steps",
                "s / private step", "private step vs No-DP step"):
        table.add_column(col, justify="right")
    for name, arch, _ in ROWS:
        r, ref = results[name], results["No-DP (LSTM)" if arch == "lstm" else "No-DP"]
        private = r["private_steps"] > 0
        table.add_row(name, f"{r['trial_s']:.1f}", f"{r['trial_s'] / ref['trial_s']:.2f}x", f"{r['train_s']:.1f}",
                      str(r["public_steps"]), str(r["private_steps"]), f"{r['step_s']:.3f}" if private else "-",
                      f"{r['step_s'] / ref['step_s']:.2f}x" if private else "-")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
