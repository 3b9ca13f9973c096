"""The import graph matches docs/ARCHITECTURE.md (tests/support/layers.py): every import
in the project's packages goes one way."""

from __future__ import annotations

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
