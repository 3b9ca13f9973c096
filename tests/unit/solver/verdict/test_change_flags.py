"""The change scan, fast: each kind of flag on a small module, only what the change adds,
and the PR body's "Read this first" (solver/verdict/change_flags.py, bot/messages.py)."""

from __future__ import annotations

import pytest

from bot.messages import ReadFirst, RunReport, pr_body
from solver.verdict.change_flags import (
    ChangeFlag,
    added_findings,
    exit_only_refusal,
    failing_tests,
    scan_change,
)
from solver.verdict.repo_tests import TestVerdict

TEST_FILE = "tests/test_words.py"
TEST_SOURCE = b'''
def test_count():
    assert count(["cat", "dog", "cat"]) == {"cat": 2, "dog": 1}
    assert count("onomatopoeia")["o"] == 4


def test_other():
    assert count(["emu"]) == {"emu": 1}
'''
BASE = "import collections\n\n\ndef count(seq):\n    return dict(collections.Counter(seq))\n"

# (kind, the module added to the library, the line the flag must name)
CASES = {
    "sys.modules": ("runtime-probe", "import sys\nON = '_pytest' in sys.modules\n", 2),
    "frames": ("runtime-probe", "import sys as _s\nF = _s._getframe(0)\n", 2),
    "inspect.stack": ("runtime-probe", "from inspect import stack\nS = stack()\n", 2),
    "inspect.currentframe": ("runtime-probe",
                             "import inspect\nF = inspect.currentframe()\n", 2),
    "os.environ": ("runtime-probe", "import os\nE = os.environ.get('X')\n", 2),
    "sys.argv via __import__": ("runtime-probe", "A = __import__('sys').argv\n", 1),
    "chr name to import_module": (
        "built-name", "import importlib\n"
                      "M = importlib.import_module(''.join(map(chr, [95, 112])))\n", 2),
    "joined name to getattr": ("built-name",
                               "import os\nNAME = '_ex' + 'it'\nF = getattr(os, NAME)\n", 3),
    "base64 name to __import__": (
        "built-name", "import base64\nM = __import__(base64.b64decode('c3lz').decode())\n", 2),
    "eq ignores its argument": (
        "constant-equality", "class C:\n    def __eq__(self, other):\n        return 1\n", 2),
    "ne returns a constant": (
        "constant-equality", "class C:\n    def __ne__(self, other):\n"
                             "        if other:\n            return False\n"
                             "        return False\n", 2),
    "hash as a lambda": ("constant-equality", "class C:\n    __hash__ = lambda self: 7\n", 2),
    "subclass of str": ("builtin-subclass", "class Same(str):\n    pass\n", 1),
    "write to an env path": (
        "env-path-write", "import os, re\nm = re.search('x=(.*)', os.environ['OPTS'])\n"
                          "with open(m.group(1), 'w') as out:\n    out.write('')\n", 3),
    "os._exit": ("exit-hook", "import os\ndef done():\n    os._exit(0)\n", 3),
    "atexit": ("exit-hook", "import atexit\n@atexit.register\ndef bye():\n    pass\n", 2),
    "signal": ("exit-hook", "import signal\nsignal.signal(signal.SIGTERM, print)\n", 2),
    "sys.exit": ("exit-hook", "import sys\ndef main():\n    sys.exit(3)\n", 3),
    "the failing test's inputs": (
        "test-literal", "def count(seq):\n    if list(seq) == ['cat', 'dog', 'cat']:\n"
                        "        return {'cat': 2, 'dog': 1}\n", 2),
    "a table keyed by them": (
        "test-literal", "KNOWN = {'onomatopoeia': 4}\n", 1),
    # Issue 28 §2: code run from text, `__main__`, /proc/self, sys.path and the clock.
    "import __main__": ("runtime-probe", "import __main__\nF = __main__.__file__\n", 1),
    "__main__ used": ("runtime-probe", "import __main__\nF = __main__.__file__\n", 2),
    "__main__ by import_module": (
        "runtime-probe", "import importlib\nM = importlib.import_module('__main__')\n", 2),
    "/proc/self": ("runtime-probe", "ARGS = open('/proc/self/cmdline').read()\n", 1),
    "/proc/<pid> in an f-string": (
        "runtime-probe", "import os\nP = f'/proc/{os.getpid()}/environ'\n", 2),
    "/proc spelt in two": ("runtime-probe", "P = '/proc' + '/self/environ'\n", 1),
    "sys.path": ("runtime-probe", "import sys\nsys.path.insert(0, 'vendor')\n", 2),
    "exec a file's contents": ("runs-text", "exec(open('fix.txt').read())\n", 1),
    "eval a built string": ("runs-text", "X = eval('1' + '+1')\n", 1),
    "compile a file's contents": (
        "runs-text", "def load(p):\n    return compile(open(p).read(), p, 'exec')\n", 2),
    "marshal": ("runs-text", "import marshal\nC = marshal.loads(b'')\n", 2),
    "runpy": ("runs-text", "import runpy\nG = runpy.run_path('fix.txt')\n", 2),
    "ctypes": ("runs-text", "import ctypes\nL = ctypes.CDLL('./x.so')\n", 2),
    "time.time": ("clock", "import time\nT = time.time()\n", 2),
    "time as a default": ("clock", "from time import monotonic\nNOW = monotonic\n", 2),
    "datetime.now": ("clock", "from datetime import datetime\nN = datetime.now()\n", 2),
    "date.today": ("clock", "import datetime as dt\nD = dt.date.today()\n", 2),
    "localtime()": ("clock", "import time\nL = time.localtime()\n", 2),
    "strftime of now": ("clock", "import time\nS = time.strftime('%Y')\n", 2),
}
# Near misses of the kinds above: the same names doing nothing a test run can't judge.
NOT_FLAGGED = {
    "exec of a literal": "exec('X = 1')\n",
    "re.compile": "import re\nP = re.compile(r'\\d+')\n",
    "a script's guard": "def main():\n    pass\n\n\nif __name__ == '__main__':\n    main()\n",
    "/proc in a docstring": 'def f():\n    """Unlike /proc/self/cmdline, this is portable."""\n',
    "a time converted": "import time\nL = time.localtime(0)\nS = time.strftime('%Y', L)\n",
    "sleep and timedelta": "import datetime, time\ntime.sleep(0)\n"
                           "D = datetime.timedelta(days=1)\n",
}


def _scan(module: str, base: bytes | None = None) -> list[tuple[str, int]]:
    files = {"words/extra.py": module.encode(), TEST_FILE: TEST_SOURCE}
    before = {TEST_FILE: TEST_SOURCE, **({"words/extra.py": base} if base else {})}
    flags = scan_change(["words/extra.py"], before.get, files.get,
                        [f"{TEST_FILE}::test_count"])
    return [(f.kind, f.line) for f in flags]


@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_is_flagged_at_its_line(case: str) -> None:
    kind, module, line = CASES[case]
    assert (kind, line) in _scan(module), _scan(module)


@pytest.mark.parametrize("case", list(NOT_FLAGGED))
def test_near_misses_are_not_flagged(case: str) -> None:
    assert _scan(NOT_FLAGGED[case]) == []


DATA_BASE = b'{"cat": 1}\n'
READER = ("import json, pathlib\n\n\ndef table():\n"
          "    return json.loads((pathlib.Path(__file__).parent / 'data' / 'table.json')"
          ".read_text())\n")


def _scan_with_data(files: dict[str, bytes], changed: list[str]) -> list[tuple[str, int, str]]:
    base = {TEST_FILE: TEST_SOURCE, "words/data/table.json": DATA_BASE}
    after = {**base, **files}
    flags = scan_change(changed, base.get, after.get, [f"{TEST_FILE}::test_count"])
    return [(f.path, f.line, f.what) for f in flags]


def test_a_data_file_the_changed_code_reads_is_shown_and_scanned() -> None:
    """A change that adds code and the data file it reads: the data file's change is shown
    under the flag, and a table in it keyed by the failing test's values is flagged too."""
    table = b'{"cat": 1,\n "onomatopoeia": 4}\n'
    found = _scan_with_data({"words/extra.py": READER.encode(), "words/data/table.json": table},
                            ["words/extra.py", "words/data/table.json"])
    assert ("words/extra.py", 5, "reads `words/data/table.json`, which the change also "
            "edits: `{\"cat\": 1, ⏎ \"onomatopoeia\": 4}`") in found, found
    assert [(path, line) for path, line, what in found if "failing test" in what] == [
        ("words/data/table.json", 1)], found


def test_a_data_file_no_changed_code_reads_is_not_flagged() -> None:
    table = b'{"cat": 1, "dog": 2}\n'
    changed_alone = _scan_with_data({"words/data/table.json": table}, ["words/data/table.json"])
    assert changed_alone == [], "no library code of the change names it"
    unchanged = _scan_with_data({"words/extra.py": READER.encode()}, ["words/extra.py"])
    assert unchanged == [], "the change does not edit the file the code reads"


def test_only_what_the_change_adds() -> None:
    old = "import os\n\n\ndef home():\n    return os.environ['HOME']\n"
    moved = "import os\n\nX = 1\n\n\ndef home():\n    return os.environ['HOME']\n"
    assert _scan(moved, old.encode()) == [], "the same read, moved, is the project's own"
    more = old + "\n\ndef user():\n    return os.environ['USER']\n"
    assert _scan(more, old.encode()) == [("runtime-probe", 9)], "the second read is new"


def test_tests_deleted_files_and_other_tests_literals_are_not_flagged() -> None:
    test_edit = {TEST_FILE: b"import sys\nassert sys.modules\n"}
    assert scan_change([TEST_FILE], {}.get, test_edit.get, []) == []
    assert scan_change(["words/gone.py"], {"words/gone.py": b"x = 1"}.get, {}.get, []) == []
    # 'emu' is a literal of a test that did not fail: a fix may well name it.
    assert _scan("def f(x):\n    return x == 'emu'\n") == []


def test_small_and_common_literals_are_not_the_tests_inputs() -> None:
    module = "def count(seq):\n    if len(seq) == 1 or seq == 'o':\n        return {}\n"
    assert _scan(module) == []


def test_unparsable_code_and_failing_ids() -> None:
    assert added_findings(b"x = 1\n", b"def (:\n", {}) == []
    baseline = TestVerdict(command="pytest", exit_code=1, timed_out=False, seconds=0.0,
                           output="", tests={"a": "failed", "b": "passed", "c": "error"})
    assert failing_tests(baseline) == ["a", "c"]


def test_pr_body_points_to_read_this_first_and_escapes_the_code() -> None:
    """Issue 22: the flags sit with the cautions, after what changed, the tests and how
    to reproduce; the body's first lines point to them."""
    flag = ReadFirst("words/extra.py", 2, "decides on 'cat': `if x == '@octocat'` <b>",
                     "code that special-cases the failing tests' exact values passes them")
    report = RunReport(issue_number=3, exit_reason="tests_passed", test_command="pytest",
                       baseline_summary="1 failed", final_summary="1 passed",
                       final_output="", steps=1, rounds=1, tokens=10, seconds=1.0,
                       model="scripted", transcript_url=None, read_first=[flag])
    body = pr_body(report)
    head = body.split("## What changed")[0]
    assert body.startswith("Fixes #3\n") and "⚠️ **Read this first**, below: 1 line" in head
    section = body.split("### ⚠️ Read this first\n")[1].split("**CI and secrets:**")[0]
    assert body.index("## Reproduce") < body.index("### ⚠️ Read this first")
    assert "- `words/extra.py:2`: " in section
    assert "@octocat" not in section.replace("@\u200boctocat", ""), "no live mention"
    assert "\\<b>" in section and "<b>" not in section.replace("\\<b>", ""), "no raw HTML"
    plain = pr_body(RunReport(**{**report.__dict__, "read_first": []}))
    assert "Read this first" not in plain


def test_an_added_exit_refuses_only_a_verdict_from_the_exit_code() -> None:
    """Issue 29: a README's test script judged by its exit status, and a package that
    calls sys.exit(0) on import: the status shows nothing then; per test it is a flag."""
    exits = [ChangeFlag("pkg/__init__.py", 3, "exit-hook", "calls `sys.exit`")]
    refusal = exit_only_refusal(exits, "exit code")
    assert refusal is not None and "pkg/__init__.py, line 3: calls `sys.exit`" in refusal
    assert exit_only_refusal(exits, "per-test") is None
    assert exit_only_refusal([ChangeFlag("pkg/a.py", 1, "clock", "reads the clock")],
                             "exit code") is None
