"""The import graph of `sdp_core` has no cycle, between modules or between packages: layers import downwards only (function-level imports, which the
CLI uses to load only the running command's layer, and type-checking imports are not edges)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "sdp_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """Modules imported when `path` is imported: its top-level imports, outside `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import submodule`
    return {m for m in out if m.startswith("sdp_core")}


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {m for m in top_level_imports(path) if m in modules and m != name}
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        targets |= {".".join(t.split(".")[:i]) for t in targets for i in range(2, len(t.split(".")))}
        if "." in name.removeprefix("sdp_core"):
            targets.add(name.rsplit(".", 1)[0])
        edges[name] = {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return edges


def test_sdp_core_imports_form_no_cycle():
    edges, state, path = graph(), {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert len(edges) > 60  # the whole package was read


def test_packages_import_downwards_only():
    """Between the packages too there is no circle: a layer never imports one that imports it back (for example
    config never imports data, which reads the config)."""
    package = lambda module: module.split(".")[1] if "." in module else module  # noqa: E731
    edges: dict[str, set[str]] = {}
    for source, targets in graph().items():
        edges.setdefault(package(source), set()).update(package(t) for t in targets if package(t) != package(source))

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    circles = sorted(f"{a} -> {b}" for a in edges for b in edges[a] if a in reaches(b))
    assert not circles, f"imports that run back up: {circles}"


def test_config_and_report_load_no_training_stack():
    """Validating a config and rendering a report never import torch, transformers, opacus or Ray."""
    code = ("import sys, sdp_core.config, sdp_core.config.loading, sdp_core.report, sdp_core.report.cli;"
            "print(sorted(m for m in ('torch', 'transformers', 'opacus', 'ray', 'spacy') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "[]"
