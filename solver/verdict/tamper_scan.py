"""What a change adds to non-test code that reaches into the test runner.

The code under test runs inside pytest's process, so it can rewrite pytest's verdict
from there. No text search catches every spelling of that (the pytest guard and the
report FIFO watch the run itself, solver/verdict/verdict_run.py), but the plain ones are
cheap to name: a library fix has no business importing `_pytest`, registering plugins
or reading the harness's report path. Those lines refuse the change; lines that hook
the interpreter's exit or imports are said loudly but do not refuse it on their own.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import PurePosixPath

# Added lines that refuse the change: pytest's own machinery and the harness's channels.
# unittest's result machinery too: Django's runner, the unittest reporter and the run
# outside pytest all hand each test a TestResult through TestCase.run, so library code
# that wraps `TestCase.run` or a result's `addFailure` makes failures successes there.
REFUSED = re.compile(r"\b(?:_pytest|pytest|pluggy)\b|junitxml|junit_|PYTEST_|"
                     r"frognano_verdict_guard|FROGNANO_GUARD|frognano_\w*report|"
                     r"\bTestCase\.(?:run|__call__|debug)\b|\b(?:Text)?TestResult\b|"
                     r"\badd(?:Success|Failure|Error|Skip|SubTest|ExpectedFailure|"
                     r"UnexpectedSuccess)\b|\bget_runner\b|\bTEST_RUNNER\b")
# Added lines that are said loudly: process exit, import and tracing hooks.
FLAGGED = re.compile(r"\bos\._exit\b|\batexit\b|\bsys\.(?:meta_path|path_hooks|settrace|"
                     r"setprofile|excepthook)\b|\bgc\.get_objects\b|\b__code__\b|"
                     r"\bimportlib\.abc\b")
SCANNED_SUFFIXES = (".py", ".pyi", ".pth")
MAX_SHOWN = 3


def added_lines(before: bytes | None, after: bytes | None) -> list[str]:
    old = (before or b"").decode("utf-8", "replace").splitlines()
    new = (after or b"").decode("utf-8", "replace").splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [line for tag, _a, _b, c, d in matcher.get_opcodes() if tag in ("replace", "insert")
            for line in new[c:d]]


def _shown(lines: list[str]) -> str:
    return "; ".join(f"`{line.strip()[:80]}`" for line in lines[:MAX_SHOWN])


def scan(path: str, read_base: Callable[[str], bytes | None],
         read_candidate: Callable[[str], bytes | None]) -> tuple[list[str], list[str]]:
    """(refusals, flags) for one changed non-test file."""
    if PurePosixPath(path).suffix not in SCANNED_SUFFIXES:
        return [], []
    base, candidate = read_base(path), read_candidate(path)
    added = added_lines(base, candidate)
    base_text = (base or b"").decode("utf-8", "replace")
    refused = [line for line in added if REFUSED.search(line)]
    flagged = [line for line in added if FLAGGED.search(line)]
    refusals: list[str] = []
    flags: list[str] = []
    if refused:
        message = (f"{path} (code under test, not a test) imports or names pytest's "
                   f"or unittest's machinery or the harness's report: {_shown(refused)}")
        if REFUSED.search(base_text):
            # The file talked to pytest before the change (a pytest plugin project).
            flags.append(message)
        else:
            refusals.append(message + "; the verdict does not trust code that reaches "
                            "into the test runner: fix the code itself")
    if flagged:
        flags.append(f"{path} adds exit, import or tracing hooks, which can change what "
                     f"the test run reports: {_shown(flagged)}")
    return refusals, flags
