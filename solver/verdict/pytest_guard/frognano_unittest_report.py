"""`python3 -m unittest …` with a junit report, for the harness's own test runs (frognano-bot).

The harness runs a project's unittest suite as `python3 -m frognano_unittest_report
--junitxml=PATH <unittest's own arguments>` (solver/verdict/repo_tests.unittest_with_report),
with this folder on PYTHONPATH, so the verdict stays per test as it is with pytest. The
output is unittest's own; the report is written once, at the end, to PATH (a FIFO the host
reads). Test ids are pytest's shape (`tests/test_x.py::Class::test`), built from the file
each test class comes from. Standard library only: it runs inside the sandbox.
"""

from __future__ import annotations

import os
import sys
import traceback
import unittest
import xml.etree.ElementTree as ET
from typing import Any

_RANK = ("passed", "skipped", "xfailed", "error", "failed")


def _file_of(test: unittest.TestCase) -> str:
    """The test's file relative to the working directory, or "" when it has none."""
    if type(test).__name__ == "_FailedTest":  # an import that failed (unittest.loader)
        parts = test._testMethodName.split(".")
        for candidate in (os.path.join(*parts) + ".py",
                          os.path.join(*parts, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
        return ""
    module = sys.modules.get(type(test).__module__)
    path = getattr(module, "__file__", None) or ""
    if not path:
        return ""
    path = os.path.relpath(os.path.realpath(path), os.path.realpath(os.getcwd()))
    return "" if path.startswith("..") else path.replace(os.sep, "/")


class JUnitResult(unittest.TextTestResult):
    """unittest's text result, keeping each test's outcome for the report."""

    outcomes: dict[str, tuple[str, str, str, str]]  # id → (file, classname, name, status)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def _note(self, test: Any, status: str) -> None:
        if not isinstance(test, unittest.TestCase):  # a class or module fixture's error
            name = getattr(test, "description", str(test))
            self.outcomes[name] = ("", "", name, "error")
            return
        file = _file_of(test)
        # A module unittest could not import: its loader stands in a _FailedTest.
        if type(test).__name__ == "_FailedTest":
            key = test.id()
            self.outcomes[key] = (file, "", test._testMethodName, "error")
            return
        if type(test).__module__ == "doctest":  # one case per docstring: its own id
            self.outcomes[test.id()] = ("", "", test.id(), status)
            return
        module = file[:-3].replace("/", ".") if file.endswith(".py") else type(test).__module__
        classname = f"{module}.{type(test).__qualname__}"
        name = getattr(test, "_testMethodName", str(test))
        key = f"{classname}.{name}"
        known = self.outcomes.get(key)
        if known is None or _RANK.index(status) > _RANK.index(known[3]):
            self.outcomes[key] = (file, classname, name, status)

    def addSuccess(self, test: Any) -> None:
        super().addSuccess(test)
        self._note(test, "passed")

    def addFailure(self, test: Any, err: Any) -> None:
        super().addFailure(test, err)
        self._note(test, "failed")

    def addError(self, test: Any, err: Any) -> None:
        super().addError(test, err)
        self._note(test, "error")

    def addSkip(self, test: Any, reason: str) -> None:
        super().addSkip(test, reason)
        self._note(test, "skipped")

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._note(test, "xfailed")

    def addUnexpectedSuccess(self, test: Any) -> None:
        super().addUnexpectedSuccess(test)
        self._note(test, "failed")

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._note(test, "failed" if failed else "error")


class JUnitRunner(unittest.TextTestRunner):
    resultclass = JUnitResult


# What hands each test its result and notes its outcome. Code under test runs in this
# process: wrapping `TestCase.run` or a result's `addFailure` turns a failure into a
# success (issue 29). Kept by reference before any repository code runs, compared once
# the suite ran; a result whose own attributes shadow its methods is the same move.
_RESULT_METHODS = ("addSuccess", "addFailure", "addError", "addSkip", "addSubTest",
                   "addExpectedFailure", "addUnexpectedSuccess", "startTest", "stopTest")
_KEPT = {(owner, name): owner.__dict__.get(name)
         for owner, names in ((unittest.TestCase, ("run", "__call__", "debug",
                                                   "_callTestMethod")),
                              (unittest.TestResult, _RESULT_METHODS),
                              (unittest.TextTestResult, _RESULT_METHODS),
                              (JUnitResult, (*_RESULT_METHODS, "_note")))
         for name in names}


def replaced(result: Any) -> list[str]:
    """What was replaced of unittest's result machinery since this module loaded."""
    found = [f"{owner.__name__}.{name}" for (owner, name), kept in _KEPT.items()
             if owner.__dict__.get(name) is not kept]
    own = getattr(result, "__dict__", {})
    return found + [f"result.{name}" for name in (*_RESULT_METHODS, "_note") if name in own]


def guarded(outcomes: dict[str, tuple[str, str, str, str]], result: Any
            ) -> dict[str, tuple[str, str, str, str]]:
    """`outcomes`, every one an error when the machinery that noted them was replaced."""
    found = replaced(result)
    if not found:
        return outcomes
    print(f"frognano: unittest's result machinery was replaced during the run "
          f"({', '.join(found[:5])}): every test is reported as an error", file=sys.stderr)
    return {key: (file, classname, name, "error")
            for key, (file, classname, name, _status) in outcomes.items()}


def junit_xml(outcomes: dict[str, tuple[str, str, str, str]]) -> bytes:
    """xunit1 junit, as pytest writes it: the host rebuilds node ids from `file`."""
    suite = ET.Element("testsuite", name="unittest", tests=str(len(outcomes)))
    for file, classname, name, status in outcomes.values():
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        if file:
            case.set("file", file)
        if status == "failed":
            ET.SubElement(case, "failure", message="failed")
        elif status == "error":
            ET.SubElement(case, "error", message="error")
        elif status in ("skipped", "xfailed"):
            skipped = ET.SubElement(case, "skipped", message=status)
            if status == "xfailed":
                skipped.set("type", "pytest.xfail")
    return ('<?xml version="1.0" encoding="utf-8"?>'
            + ET.tostring(suite, encoding="unicode")).encode("utf-8")


def main(argv: list[str]) -> int:
    report = ""
    if argv and argv[0].startswith("--junitxml="):
        report, argv = argv[0].split("=", 1)[1], argv[1:]
    sys.argv = ["python -m unittest", *argv]
    program = unittest.main(module=None, testRunner=JUnitRunner, exit=False)
    result = program.result
    outcomes = guarded(getattr(result, "outcomes", {}), result)
    if report:
        try:
            with open(report, "wb") as handle:
                handle.write(junit_xml(outcomes))
        except OSError:
            traceback.print_exc()
    if result.testsRun == 0 and not result.errors:
        return 5  # as pytest: nothing ran (Python 3.11's unittest exits 0 then)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
