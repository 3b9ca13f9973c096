"""The pytest guard checks the test machinery by what it does (issue 28 §4): a real pytest
run (this venv's) with the guard on PYTHONPATH, a package that attacks pytest when the
tests import it, and the guard's report read as the host reads it."""

from __future__ import annotations

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
