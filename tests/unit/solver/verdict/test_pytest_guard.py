"""The pytest guard checks the test machinery by what it does (issue 28 §4): a real pytest
run (this venv's) with the guard on PYTHONPATH, a package that attacks pytest when the
tests import it, and the guard's report read as the host reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from solver.verdict.verdict_run import GUARD_DIR, guard_findings

FLIP = '''
def py''' + '''test_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed:
        report.outcome, report.longrepr = "passed", None
py''' + '''test_runtest_makereport.py''' + '''test_impl = {"wrapper": False, "hookwrapper": True,
    "optionalhook": False, "tryfirst": False, "trylast": False, "specname": None}
'''
ATTACKS = {
    "code swapped in place": '''
        import sys
        junit = sys.modules["_pytest.junitxml"]
        space = {}
        exec(compile("def nothing(self, report):\\n    pass\\n", junit.__file__, "exec"), space)
        junit._NodeReporter.append_failure.__code__ = space["nothing"].__code__
    ''',
    "a property planted on Session": '''
        import sys
        sys.modules["_pytest.main"].Session.testsfailed = property(
            lambda self: 0, lambda self, value: None)
    ''',
    "the session's class swapped": '''
        import gc, sys
        Session = sys.modules["_pytest.main"].Session
        class Quiet(Session):
            testsfailed = property(lambda self: 0, lambda self, value: None)
        for thing in gc.get_objects():
            if type(thing) is Session:
                thing.__class__ = Quiet
    ''',
    "a plugin from a temp folder": f'''
        import gc, importlib, os, sys, tempfile
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "report_helpers.py"), "w") as handle:
            handle.write({FLIP!r})
        sys.path.insert(0, folder)
        plugin = importlib.import_module("report_helpers")
        for thing in gc.get_objects():
            if type(thing).__name__ == "PytestPluginManager":
                thing.register(plugin, "report_helpers")
    ''',
}
EXPECTED = {
    "code swapped in place": ("replaced",
                              "_pytest.junitxml._NodeReporter.append_failure "
                              "(code replaced in place)"),
    "a property planted on Session": ("replaced", "_pytest.main.Session.testsfailed (added)"),
    "the session's class swapped": ("replaced", "the session's class (Quiet)"),
    "a plugin from a temp folder": ("foreign_plugins", "module report_helpers (hooks from /"),
}


def _guarded_run(tmp_path: Path, attack: str) -> dict[str, list[str]]:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text(textwrap.dedent(attack))
    (project / "test_it.py").write_text("import pkg\n\n\ndef test_fails():\n    assert 1 == 2\n")
    report = tmp_path / "guard.json"
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR), "PYTHONDONTWRITEBYTECODE": "1",
           "FROGNANO_GUARD_REPORT": str(report)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                   cwd=project, env=env, capture_output=True, timeout=120, check=False)
    found = guard_findings([report.read_bytes()], False)
    assert found is not None
    return found


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_guard_names_what_the_attack_did_to_the_machinery(tmp_path: Path,
                                                               attack: str) -> None:
    clean = _guarded_run(tmp_path / "clean", "")
    found = _guarded_run(tmp_path / "attacked", ATTACKS[attack])
    key, expected = EXPECTED[attack]
    news = [item for item in found.get(key, []) if item not in clean.get(key, [])]
    assert any(expected in item for item in news), (news, found)


def _selected_run(tmp_path: Path, select: list[str] | None) -> tuple[str, dict[str, list[str]]]:
    """A project of two test folders (each with a conftest.py) run with the guard, asked
    (or not) for a fast round's files (solver/verdict/huge_suite.py)."""
    project, channel = tmp_path / "project", tmp_path / "channel"
    for folder in ("tests/a", "tests/b"):
        (project / folder).mkdir(parents=True)
        (project / folder / "conftest.py").write_text(
            "import pytest\n\n\n@pytest.fixture\ndef answer():\n    return 42\n")
    (project / "tests/a/test_one.py").write_text("def test_one(answer):\n    assert answer\n")
    (project / "tests/a/test_two.py").write_text("def test_two():\n    assert 1 == 2\n")
    (project / "tests/b/test_three.py").write_text("import pytest\n\n\n"
                                                   "@pytest.mark.parametrize('n', range(2001))"
                                                   "\ndef test_three(n, answer):\n"
                                                   "    assert answer\n")
    channel.mkdir()
    if select is not None:
        (channel / "frognano-select.json").write_text(json.dumps(select))
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR), "PYTHONDONTWRITEBYTECODE": "1",
           "FROGNANO_GUARD_REPORT": str(channel / "guard.json")}
    ran = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    found = guard_findings([(channel / "guard.json").read_bytes()], False)
    assert found is not None
    return ran.stdout, found


def test_a_fast_round_collects_only_the_files_the_host_selected(tmp_path: Path) -> None:
    output, found = _selected_run(tmp_path, ["tests/a/test_one.py", "tests/a/test_two.py"])
    assert found["test_modules"] == ["tests/a/test_one.py", "tests/a/test_two.py"]
    assert "1 failed, 1 passed" in output  # tests/a's conftest.py fixture still loaded
    assert "test_three" not in output


def test_without_a_selection_every_file_runs_and_a_huge_passes_section_is_left_out(
        tmp_path: Path) -> None:
    output, found = _selected_run(tmp_path, None)
    assert len(found["test_modules"]) == 3
    assert "1 failed, 2002 passed" in output
    assert "the PASSES section of 2002 passing tests is left out" in output
    assert "PASSED tests/b/test_three.py::test_three[2000]" in output  # -rA's short lines
