"""No import circle among the project's modules, counting every import statement (issue 30).

The graph has an edge ``a → b`` when module ``a`` imports module ``b`` anywhere in its source: at
module level, inside a function, or under ``if TYPE_CHECKING:``. A circle through any of these is
refused: a lazy import only hides one from the loader, and a ``TYPE_CHECKING`` one from the
interpreter, while the modules still cannot be understood (or split, or moved) one without the
other. ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``;
an import of something outside the graph is an edge to its nearest enclosing module in it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("anonml", "peer", "aggregator", "witness", "importers", "featurizers", "instancers")


def _modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root`` (database migrations, run by Alembic, aside)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "migrations" in parts:
                continue
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names one import statement of module ``name`` (at ``path``) loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the package holding the module (the package itself for __init__)
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module → the modules of the graph it imports anywhere in its source (``ast.walk``)."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            targets = _targets(name, path, node)
            if isinstance(node, ast.ImportFrom):  # `from pkg import sub`: the submodule when it is one
                names = targets[:-1]
                targets = [t if t in modules else targets[-1] for t in names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_project_imports_no_circle():
    graph = import_graph(ROOT, PACKAGES)
    # the walk sees module-level, function-level and TYPE_CHECKING imports, relative ones resolved
    assert {"peer.round_packets", "peer.roster_checks", "peer.participation"} <= graph["peer.participant"]
    assert "peer.host_watch" in graph["peer.worker"]
    assert "peer.participant" in graph["peer.narration"]  # under TYPE_CHECKING only
    assert "anonml.learn.settings" in graph["peer.roster_checks"]  # inside a function only
    assert circles(graph) == []


def test_a_circle_through_a_function_or_type_checking_import_is_found(tmp_path: Path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from . import c\n")
    (tmp_path / "pkg" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from .a import A\n")
    (tmp_path / "pkg" / "sub" / "c.py").write_text("from ..sub import d\n")
    (tmp_path / "pkg" / "sub" / "d.py").write_text("import pkg.sub.c.thing\n")
    (tmp_path / "pkg" / "e.py").write_text("from pkg import a\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.c"] == {"pkg.sub.d"} and graph["pkg.sub.d"] == {"pkg.sub.c"}
    assert graph["pkg.e"] == {"pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]
    assert circles({"x": {"y"}, "y": {"z"}, "z": set()}) == []
