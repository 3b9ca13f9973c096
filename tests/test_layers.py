"""The import graph matches docs/ARCHITECTURE.md: every import in the project's packages,
read with `ast` (function-level and TYPE_CHECKING imports count too), goes one way."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Which of the project's packages each package may import (its own is always allowed).
# frognano/ is the composition root: it alone may import everything, and nothing imports it.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "sandbox": frozenset(),  # stdlib only, checked below: runner.py runs inside the sandbox
    "runstore": frozenset(),
    # The solver (agent, setup, verdict, models, host git, policy) knows no GitHub, Celery
    # or store: `solve` and the worker both drive it through the same run request.
    "solver": frozenset({"sandbox"}),
    # The GitHub side renders what the solver reports; never workers/: the receiver
    # enqueues by task name.
    "bot": frozenset({"runstore", "solver"}),
    "workers": frozenset({"bot", "solver", "sandbox", "runstore"}),
    "frognano": frozenset({"bot", "workers", "solver", "sandbox", "runstore"}),
}
PACKAGES = frozenset(MAY_IMPORT)


def imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import statement in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, package if node.level else node.module or ""))
    return found


def all_imports() -> list[tuple[str, str, int, str]]:
    """(importing package, file, line, imported module) over the whole project."""
    edges = []
    for package in sorted(PACKAGES):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, module in imports(path, package):
                edges.append((package, str(path.relative_to(ROOT)), line, module))
    return edges


def violations(edges: list[tuple[str, str, int, str]]) -> list[str]:
    wrong = []
    for package, where, line, module in edges:
        top = module.split(".")[0]
        if top in PACKAGES and top != package and top not in MAY_IMPORT[package]:
            wrong.append(f"{where}:{line} imports {module} ({package}/ may import "
                         f"{', '.join(sorted(MAY_IMPORT[package])) or 'none of the others'})")
        if package == "sandbox" and top not in PACKAGES and top not in sys.stdlib_module_names:
            wrong.append(f"{where}:{line} imports {module}, not the standard library")
    return wrong


def test_every_package_is_in_the_table() -> None:
    on_disk = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert on_disk == PACKAGES, "a new package needs its row in MAY_IMPORT and the docs"


def test_the_import_graph_is_one_way() -> None:
    edges = all_imports()
    assert len(edges) > 100, "the walk found the project's imports"
    assert violations(edges) == []


@pytest.mark.parametrize(("package", "module", "complaint"), [
    ("bot", "workers.run_store", "bot/ may import runstore"),
    ("sandbox", "pydantic", "not the standard library"),
    ("sandbox", "bot.settings", "none of the others"),
    ("workers", "frognano.models", "workers/ may import"),
    ("runstore", "solver.agent", "none of the others"),
    ("solver", "bot.messages", "solver/ may import sandbox"),
    ("solver", "workers.publish", "solver/ may import sandbox"),
])
def test_the_check_catches_a_wrong_edge(package: str, module: str, complaint: str) -> None:
    (message,) = violations([(package, f"{package}/x.py", 1, module)])
    assert complaint in message


def test_relative_and_lazy_imports_are_seen(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from . import base\n"
                      "def f():\n    from workers.tasks import enqueue_run\n"
                      "if True:\n    import bot.settings as s\n")
    assert imports(source, "sandbox") == [(1, "sandbox"), (3, "workers.tasks"),
                                          (5, "bot.settings")]
