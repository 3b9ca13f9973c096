"""The import graph matches docs/ARCHITECTURE.md (tests/support/layers.py): every import
in the project's packages goes one way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.layers import PACKAGES, ROOT, all_imports, imports, violations


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


def test_the_graph_printer_shows_the_arrows_and_exits_clean() -> None:
    shown = subprocess.run([sys.executable, "-m", "tests.support.layers"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "solver    -> sandbox\n" in shown.stdout
    assert "every one points down the layers" in shown.stdout


# What opens a sandbox or judges a tree in one (issue 31): the solver's alone. workers/ and
# bot/ drive runs through solver.run (a replay through RunOutcome.replay) and never build
# a sandbox, a verdict runner or a harness themselves.
OPENS_A_SANDBOX = frozenset({"open_sandbox", "SandboxConfig", "SandboxRecipe", "Sandbox",
                             "BubblewrapSandbox", "VerdictRunner", "Harness", "execute"})


def sandbox_openers(path: Path) -> list[str]:
    """Each name imported from the project that opens a sandbox, as `line: module.name`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in PACKAGES:
            found += [f"{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                      if alias.name in OPENS_A_SANDBOX or alias.name == "*"]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: {alias.name}" for alias in node.names
                      if alias.name.split(".")[0] == "sandbox"]
    return found


def test_workers_and_bot_never_open_a_sandbox() -> None:
    opened = {str(path.relative_to(ROOT)): hits for package in ("workers", "bot")
              for path in sorted((ROOT / package).rglob("*.py"))
              if (hits := sandbox_openers(path))}
    assert opened == {}


def test_the_sandbox_rule_catches_the_old_replay(tmp_path: Path) -> None:
    """The replay's verdict as workers/publish/review.py built it before issue 31."""
    old = tmp_path / "review.py"
    old.write_text("from sandbox import SandboxConfig, open_sandbox\n"
                   "from solver.verdict.verdict_run import Judgement, VerdictRunner\n"
                   "from sandbox.trees import remove_tree\n")
    assert sandbox_openers(old) == ["1: sandbox.SandboxConfig", "1: sandbox.open_sandbox",
                                    "2: solver.verdict.verdict_run.VerdictRunner"]
