"""The trainer's rooms import each other downwards only, and the trainer never imports the operator or the CLI.

The order, bottom to top: ``workload`` (sources, data, rewards), ``packing``, ``models``, ``telemetry``, the
bridge (``tunix_bridge``, ``memory``, ``rollout``: the modules that know Tunix's RL classes), ``run`` (the
lifecycle, and ``__main__``). A room imports itself and the rooms below it. So telemetry and the workload
never import the lifecycle or the bridge: a metrics or reward module that did would pull JAX start-up, the
checkpoint manager or Tunix's cluster into every test and tool that only wants to count or score. The
operator and the CLI sit above the trainer (the CLI imports it); an import the other way makes the trainer
image depend on kopf and would put the operator into every trainer process.

Every import counts, lazy ones inside functions too (``ast.walk``); a new module at the package's top level
fails until it is given a room here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[2] / "trainer" / "rljob_trainer"
ORDER = ["workload", "packing", "models", "telemetry", "bridge", "run"]
TOP_LEVEL = {
    "tunix_bridge": "bridge",
    "instrument": "bridge",
    "memory": "bridge",
    "decode": "bridge",
    "decode_attention": "bridge",
    "rollout": "bridge",
    "__main__": "run",
}
FOREIGN = re.compile(r"^rljob_(operator|cli)(\.|$)")


def room(dotted: str) -> str | None:
    """The room of a module inside rljob_trainer (``rljob_trainer.models.rope`` -> ``models``); None for the
    package itself and for a top-level module no room claims."""
    parts = dotted.split(".")
    if parts[0] != "rljob_trainer" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in ORDER else TOP_LEVEL.get(parts[1])


def imports(path: Path, package: str) -> list[str]:
    """Every module ``path`` imports, as dotted names (``from rljob_trainer import models`` counts as
    ``rljob_trainer.models``; relative imports resolved against ``package``); string constants naming the
    operator or the CLI count too (``importlib.import_module("rljob_operator")``)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            out += [f"{base}.{a.name}" for a in node.names] if base == "rljob_trainer" else [base]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and FOREIGN.match(node.value):
            out.append(node.value)
    return out


def violations(files: dict[str, Path]) -> list[str]:
    """One line per import that breaks the rules, for ``files`` (dotted module name -> source path)."""
    problems: list[str] = []
    for name, path in sorted(files.items()):
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rsplit(".", 1)[0]
        own = room(name)
        if own is None and not is_package:
            problems.append(
                f"{name}: in no room (add it to ORDER's rooms or TOP_LEVEL in {Path(__file__).name})"
            )
            continue
        for dep in imports(path, package):
            if FOREIGN.match(dep):
                problems.append(f"{name} imports {dep}: the trainer never imports the operator or the CLI")
            elif own is not None and (dep_room := room(dep)) and ORDER.index(dep_room) > ORDER.index(own):
                problems.append(
                    f"{name} ({own}) imports {dep} ({dep_room}): a room imports only rooms below it"
                )
    return problems


def trainer_files() -> dict[str, Path]:
    out = {}
    for path in TRAINER.rglob("*.py"):
        parts = path.relative_to(TRAINER.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def test_trainer_rooms_import_downwards_only() -> None:
    files = trainer_files()
    assert {"rljob_trainer.run.main", "rljob_trainer.telemetry.metrics", "rljob_trainer.tunix_bridge"} <= set(
        files
    )
    assert violations(files) == []


def test_checker_finds_each_kind_of_violation(tmp_path: Path) -> None:
    sources = {
        "rljob_trainer.telemetry.metrics": "from rljob_trainer.run import checkpoint\n",
        "rljob_trainer.workload.data": "def f():\n    from rljob_trainer import tunix_bridge\n",
        "rljob_trainer.models.rope": "from ..telemetry import flops\n",
        "rljob_trainer.run.main": "import importlib\nimportlib.import_module('rljob_operator.metrics')\n",
        "rljob_trainer.stray": "",
        "rljob_trainer.run.startup": "from rljob_trainer.workload import sources\nfrom rljob_trainer import models\n",
    }
    files = {}
    for name, text in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        files[name] = path
    assert violations(files) == [
        "rljob_trainer.models.rope (models) imports rljob_trainer.telemetry (telemetry): a room imports only rooms below it",
        "rljob_trainer.run.main imports rljob_operator.metrics: the trainer never imports the operator or the CLI",
        f"rljob_trainer.stray: in no room (add it to ORDER's rooms or TOP_LEVEL in {Path(__file__).name})",
        "rljob_trainer.telemetry.metrics (telemetry) imports rljob_trainer.run (run): a room imports only rooms below it",
        "rljob_trainer.workload.data (workload) imports rljob_trainer.tunix_bridge (bridge): a room imports only rooms below it",
    ]
