"""The API package's modules import each other one way: no cycle (``spec.py`` imports ``rules.py``, which
never imports ``spec.py`` back, directly or through another module). A cycle works only as long as the
import order happens to suit it, and makes a module impossible to read on its own."""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "rljob" / "api"


def _imports() -> dict[str, set[str]]:
    """module name -> the rljob.api modules it imports (``from rljob.api import tpu`` counts as ``tpu``)."""
    modules = {p.stem for p in API.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        deps: set[str] = set()
        for node in ast.walk(ast.parse((API / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "rljob.api":
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rljob.api."):
                deps.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names if a.name.startswith("rljob.api.")}
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for dep in sorted(graph.get(name, ())):
            if found := visit(dep, [*path, name]):
                return found
        done.add(name)
        return None

    for name in sorted(graph):
        if found := visit(name, []):
            return found
    return None


def test_api_modules_import_each_other_one_way() -> None:
    graph = _imports()
    assert "rules" in graph["spec"] and "spec" not in graph["rules"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"spec": {"rules"}, "rules": {"tpu_rules"}, "tpu_rules": {"spec"}}) == [
        "rules",
        "tpu_rules",
        "spec",
        "rules",
    ]
