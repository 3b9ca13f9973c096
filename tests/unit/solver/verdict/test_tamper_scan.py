"""The text scan of code under test (solver/verdict/tamper_scan.py): unittest's result
machinery and Django's runner choice are refused by name like pytest's (issue 29)."""

from __future__ import annotations

import pytest

from solver.verdict.tamper_scan import scan

BASE = b"def words(text):\n    return len(text.split(' '))\n"


def _scan(added: str, base: bytes = BASE) -> tuple[list[str], list[str]]:
    after = base + added.encode()
    return scan("pkg/core.py", lambda _p: base, lambda _p: after)


@pytest.mark.parametrize("line", [
    "unittest.TestCase.run = _quiet\n",
    "result.addFailure = lambda test, err: result.addSuccess(test)\n",
    "unittest.TextTestResult.addError = _ignore\n",
    'TEST_RUNNER = "pkg.runner.Lenient"\n',
    "from django.test.utils import get_runner\n",
    "import frognano_django_report\n",
])
def test_added_lines_that_reach_unittest_results_refuse_the_change(line: str) -> None:
    refusals, _flags = _scan(line)
    assert refusals and "unittest's machinery" in refusals[0], refusals


def test_a_library_that_uses_unittest_mock_is_not_refused() -> None:
    assert _scan("from unittest import mock\nSENTINEL = mock.sentinel.value\n") == ([], [])


def test_a_file_that_named_them_before_is_flagged_not_refused() -> None:
    base = BASE + b"from unittest import TestResult\n"
    refusals, flags = _scan("class R(TestResult):\n    pass\n", base)
    assert refusals == [] and flags and "unittest's machinery" in flags[0]
