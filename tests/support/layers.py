"""The project's layers: which package may import which, and the import graph as it is,
read with `ast` (function-level and TYPE_CHECKING imports count too).

`python -m tests.support.layers` prints the graph (every arrow points down the table) and
exits 1 with each wrong edge when one points back up; tests/test_layers.py checks the same."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def graph(edges: list[tuple[str, str, int, str]]) -> dict[str, set[str]]:
    """Package → the project's packages it imports (its own left out)."""
    arrows: dict[str, set[str]] = {package: set() for package in sorted(PACKAGES)}
    for package, _, _, module in edges:
        top = module.split(".")[0]
        if top in PACKAGES and top != package:
            arrows[package].add(top)
    return arrows


def main() -> int:
    edges = all_imports()
    for package, targets in graph(edges).items():
        print(f"{package:9} -> {', '.join(sorted(targets)) or '(nothing of the project)'}")
    wrong = violations(edges)
    for line in wrong:
        print(f"wrong: {line}")
    print(f"{len(edges)} imports read; " + (f"{len(wrong)} point the wrong way" if wrong
                                           else "every one points down the layers"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
