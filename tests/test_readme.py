"""The README holds for a newcomer: its commands run in a new shell after `make quickstart`, its numbers are the
shipped files', and its Layout table names every top-level module of the package."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)```", README, re.S)


def commands(block: str) -> list[str]:
    """A bash block's command lines, comments dropped."""
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_puts_sdp_sweep_on_the_path_before_its_first_use():
    first_use = next(i for i, b in enumerate(BLOCKS) if any(c.startswith("sdp-sweep") for c in commands(b)))
    assert "source .venv/bin/activate" in commands(BLOCKS[first_use])[0]


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "sdp-sweep").exists(), reason="no .venv: `make` not run here")
def test_the_readme_commands_run_in_a_new_shell(tmp_path):
    """A new shell (no variables of this one, the system PATH) runs the README's setup block, which lists every
    command the README's blocks name, and the first check of its first run, on the shipped sweep."""
    setup = next(b for b in BLOCKS if "source .venv/bin/activate" in b)
    script = "\n".join(["set -e", *commands(setup), "sdp-sweep validate sweeps/quickstart.yaml"])
    r = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-2] == "sweeps/quickstart.yaml: ok (sweep)"
    assert r.stdout.strip().splitlines()[-1].startswith("sweeps/quickstart.yaml: budget: 4 trials per mechanism")
    listed = set(re.search(r"\{([\w,]+)\}", r.stdout).group(1).split(","))  # usage: sdp-sweep ... {run,resume,...}
    named = {c.split()[1] for b in BLOCKS for c in commands(b) if c.startswith("sdp-sweep ")} - {"--help"}
    assert {"run", "resume", "trial", "validate", "detect", "epsilon", "audit", "report"} <= named <= listed


def test_the_canary_arithmetic_the_readme_quotes_is_the_quickstarts():
    canaries = yaml.safe_load((REPO / "sweeps" / "quickstart.yaml").read_text())["base"]["data"]["canaries"]
    count, repeats, need = re.search(r"the quickstart's two families of ([\d,]+) × (\d+) need ([\d,]+)",
                                     " ".join(README.split())).groups()
    assert (int(count.replace(",", "")), int(repeats)) == (canaries["count"], canaries["repeats"])
    assert canaries["missed_format"] and int(need.replace(",", "")) == 2 * canaries["count"] * canaries["repeats"]


def test_the_layout_table_names_every_top_level_module():
    layout = README.split("## Layout", 1)[1]
    named = set(re.findall(r"`sdp_core/(\w+)(?:\.py)?`", layout))
    package = REPO / "sdp_core"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert modules - named == set(), "not in the README's Layout table"
    assert named - modules == set(), "in the README's Layout table but not in sdp_core"


def test_the_help_names_the_data_formats_and_how_to_pick_a_trials_mechanism():
    from sdp_core.config.mechanism import MECHANISM_SETTINGS
    from tests.conftest import run_main

    trial, run = (" ".join(run_main(command, "--help").stdout.split()) for command in ("trial", "run"))
    for text in (trial, run):
        assert "JSONL, a CSV / TSV / Parquet table or plain text" in text
    assert f"--set mechanism.name=NAME, one of {', '.join(MECHANISM_SETTINGS)} (default dpsgd)" in trial
    assert "--overwrite" in run and "--set base.data.text_fields=[NAME]" in run
