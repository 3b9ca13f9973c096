"""The change scan, fast: each kind of flag on a small module, only what the change adds,
and the PR body's "Read this first" (solver/verdict/change_flags.py, bot/messages.py)."""

from __future__ import annotations

import pytest

from bot.messages import ReadFirst, RunReport, pr_body
from solver.verdict.change_flags import added_findings, failing_tests, scan_change
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
