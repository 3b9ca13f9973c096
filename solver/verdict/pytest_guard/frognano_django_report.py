"""A Django project's own test runner with a junit report, for the harness's test runs
(frognano-bot).

The harness runs `python3 runtests.py …`, `python3 manage.py test …` or `python3 -m
django test …` as `python3 -m frognano_django_report --junitxml=PATH <the same words>`
(solver/verdict/django_tests.django_with_report), with this folder on PYTHONPATH. The
script or module runs as `python3` would run it; only `django.test.utils.get_runner`,
through which runtests.py scripts and the `test` command both find their runner, gives
a subclass of the runner they chose whose results also note each test's outcome. The
report is written once, after the suite ran, as frognano_unittest_report writes it: the
same test ids (`tests/test_x.py::Class::test`), so a Django suite is judged per test as
a unittest one is. A runner that takes no result class (not Django's DiscoverRunner)
leaves no report: the harness then says it found none. Standard library only.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import Any

from frognano_unittest_report import JUnitResult, guarded, junit_xml


def _reporting_runner(runner: type, report: str) -> type:
    """`runner` whose result class notes outcomes and whose suite run writes them."""
    if not hasattr(runner, "get_resultclass") or not hasattr(runner, "run_suite"):
        return runner

    class Reporting(runner):  # type: ignore[valid-type,misc]
        def get_resultclass(self) -> type:
            chosen = super().get_resultclass()
            if chosen is None or chosen is JUnitResult:
                return JUnitResult
            # The project's own result class (--debug-sql, --pdb) keeps its behaviour.
            return type(f"Reporting{chosen.__name__}", (JUnitResult, chosen), {})

        def run_suite(self, suite: Any, **kwargs: Any) -> Any:
            result = super().run_suite(suite, **kwargs)
            outcomes = getattr(result, "outcomes", None)
            if isinstance(outcomes, dict):
                _write(report, junit_xml(guarded(outcomes, result)))
            return result

    Reporting.__name__ = Reporting.__qualname__ = runner.__name__
    return Reporting


def _write(report: str, data: bytes) -> None:
    try:
        with open(report, "wb") as handle:
            handle.write(data)
    except OSError:
        traceback.print_exc()


def _hook(report: str) -> None:
    """Every `get_runner` the project's code imports after this is the reporting one:
    Django's `test` command and runtests.py scripts import it by name when they run."""
    try:
        import django.test.utils as utils
    except Exception:  # no Django in the venv: the script runs, and reports nothing
        return
    original = utils.get_runner

    def get_runner(settings: Any, test_runner_class: str | None = None) -> type:
        return _reporting_runner(original(settings, test_runner_class), report)

    utils.get_runner = get_runner


def main(argv: list[str]) -> int:
    report = ""
    if argv and argv[0].startswith("--junitxml="):
        report, argv = argv[0].split("=", 1)[1], argv[1:]
    if not argv:
        print("usage: python3 -m frognano_django_report --junitxml=PATH SCRIPT|-m MODULE …",
              file=sys.stderr)
        return 2
    if report:
        _hook(report)
    if argv[0] == "-m" and len(argv) > 1:
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()  # as `python3 -m`: the working directory first
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python3 SCRIPT`
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
