"""The import graph of `sdp_core` has no cycle between modules, and its packages import downwards only, imports
inside functions included (the CLI imports each command's layer inside a function, so that `--help` loads
nothing heavy: those imports still point down). Type-checking imports (`if TYPE_CHECKING:`) are not edges."""

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


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(nodes: list[ast.stmt], functions: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements among `nodes`, outside `if TYPE_CHECKING:`; with `functions`, those inside function
    (and class) bodies as well."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif _is_type_checking(node):
            out += _imports(node.orelse, functions)
        elif functions or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                out += _imports([n for n in getattr(node, field, []) if isinstance(n, ast.AST)], functions)
    return out


def imported_modules(path: Path, functions: bool = False) -> set[str]:
    """The `sdp_core` modules `path` imports: when it is imported (its top-level imports, also under `try` and `if`),
    or, with `functions`, at any time (imports inside functions too)."""
    tree = ast.parse(path.read_text())
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in _imports(tree.body, functions):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import submodule`
    return {m for m in out if m.startswith("sdp_core")}


def graph(functions: bool = False) -> dict[str, set[str]]:
    """Module -> the modules importing it runs (with `functions`: it may import at any time)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {m for m in imported_modules(path, functions) if m in modules and m != name}
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        targets |= {".".join(t.split(".")[:i]) for t in targets for i in range(2, len(t.split(".")))}
        if "." in name.removeprefix("sdp_core"):
            targets.add(name.rsplit(".", 1)[0])
        edges[name] = {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return edges


def test_sdp_core_imports_form_no_cycle():
    """Between modules, what importing one runs (a package's `__init__` may import a submodule inside a function to
    keep an optional dependency out of its import: that is no cycle, and the package test below sees it)."""
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
    """Between the packages there is no circle, imports inside functions included: a layer never imports one that
    imports it back (for example config never imports data, which reads the config, nor the sweep layer)."""
    package = lambda module: module.split(".")[1] if "." in module else module  # noqa: E731
    edges: dict[str, set[str]] = {}
    for source, targets in graph(functions=True).items():
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
    """Validating a config, rendering a report and parsing every command's arguments (`--help`) never import
    torch, transformers, opacus or Ray."""
    code = ("import sys, sdp_core.config, sdp_core.config.loading, sdp_core.report, sdp_core.report.cli, sdp_core.cli;"
            "[sdp_core.cli.build_parser(c) for c in ('audit', 'detect', 'epsilon', 'report')];"
            "print(sorted(m for m in ('torch', 'transformers', 'opacus', 'ray', 'spacy') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "[]"


def test_imports_inside_functions_are_edges(tmp_path, monkeypatch):
    """The graph sees an import inside a function, inside a method and under `try`, and no `if TYPE_CHECKING:` one."""
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from sdp_core import report\n"
                      "try:\n    import sdp_core.errors\nexcept ImportError:\n    pass\n"
                      "def f():\n    from sdp_core.sweep import space\n"
                      "class C:\n    def g(self):\n        import sdp_core.trial\n")
    monkeypatch.setitem(globals(), "module_name", lambda path: "sdp_core.mod")  # a file outside the package
    assert imported_modules(source) == {"sdp_core.errors"}
    assert imported_modules(source, functions=True) == {"sdp_core.errors", "sdp_core.sweep", "sdp_core.sweep.space",
                                                        "sdp_core.trial"}
