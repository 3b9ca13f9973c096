"""`frognano solve` end to end: real git, real bubblewrap, the scripted model through the
real Qwen3-Coder parser, the real CLI process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git
from tests.sandbox_support import HAVE_BWRAP, reachable_dir
from workers.agent.transcript import read_transcript
from workers.models.scripted import final_answer, think_and_call

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

ISSUE = "add() subtracts instead of adding\n\n`calc.add(2, 3)` returns -1; it should return 5."

FIXING_SCRIPT = [
    think_and_call("Let me look at the calculator.", "Read", file_path="calc.py"),
    think_and_call("add uses minus; fix it.", "Edit", file_path="calc.py",
                   old_string="return a - b", new_string="return a + b"),
    think_and_call("Run the tests.", "Bash", command="python3 -m pytest -q",
                   description="run tests"),
    final_answer("Fixed `add` to return the sum."),
]


def solve(repo: Path, script: list[str], tmp: Path, *extra: str) -> tuple[int, str, Path]:
    script_file = tmp / "script.json"
    script_file.write_text(json.dumps(script))
    transcript = tmp / "transcript.jsonl"
    with reachable_dir() as work:
        env = {**os.environ, "FROGNANO_STATE_DIR": str(tmp / "state"),
               "FROGNANO_WORK_DIR": str(work / "work"), "COLUMNS": "200"}
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(repo), "--issue", ISSUE,
             "--model", f"scripted:{script_file}", "--transcript", str(transcript), *extra],
            env=env, capture_output=True, text=True, timeout=300,
        )
        leftovers = list((work / "work").iterdir()) if (work / "work").exists() else []
    assert leftovers == [], "the private workspace must be cleaned up"
    return proc.returncode, proc.stdout + proc.stderr, transcript


def test_solve_fixes_the_bug_and_commits_on_a_new_branch(calc_repo: Path, tmp_path: Path
                                                         ) -> None:
    head = git(calc_repo, "rev-parse", "HEAD").strip()
    code, output, transcript = solve(calc_repo, FIXING_SCRIPT, tmp_path)
    assert code == 0, output
    assert "tests_passed" in output

    branch = "frognano/add-subtracts-instead-of-adding"
    assert git(calc_repo, "branch", "--list", "frognano/*").split() == [branch]
    assert git(calc_repo, "rev-parse", "HEAD").strip() == head, "current branch untouched"
    assert "return a - b" in (calc_repo / "calc.py").read_text(), "working tree untouched"
    assert "return a + b" in git(calc_repo, "show", f"{branch}:calc.py")
    assert git(calc_repo, "diff", "--name-only", head, branch).split() == ["calc.py"]

    records = read_transcript(transcript)
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "run" and kinds[1] == "baseline" and kinds[-1] == "result"
    assert kinds.count("turn") == 4
    baseline = records[1]
    assert baseline["passed"] is False
    assert baseline["tests"] == {"tests/test_calc.py::test_add": "failed",
                                 "tests/test_calc.py::test_mul": "passed"}
    turns = [r for r in records if r["kind"] == "turn"]
    assert [c["name"] for t in turns for c in t["tool_calls"]] == ["Read", "Edit", "Bash"]
    assert turns[0]["observations"][0]["output"].startswith("calc.py\n1. ")
    assert turns[1]["observations"][0]["output"] == "Edited calc.py (1 replacement)."
    assert turns[2]["observations"][0]["output"].startswith("Exit code: 0\nSTDOUT:\n")
    assert turns[0]["assistant"]["reasoning"] == "Let me look at the calculator."
    assert all(t["usage"]["completion_tokens"] > 0 for t in turns)
    result = records[-1]
    assert result["exit_reason"] == "tests_passed" and result["tests_passed"] is True
    assert result["verdict"]["accepted"] is True and result["verdict"]["mode"] == "per-test"
    assert result["changes"] == [{"test": "tests/test_calc.py::test_add",
                                  "before": "failed", "after": "passed"}]
    assert "-    return a - b\n+    return a + b" in result["diff"]
    assert result["totals"]["steps"] == 4 and result["totals"]["attempts"] == 1
    assert result["totals"]["tool_calls"] == {"Read": 1, "Edit": 1, "Bash": 1}


def test_solve_that_never_passes_ends_with_a_reason_and_no_commit(calc_repo: Path,
                                                                  tmp_path: Path) -> None:
    wrong = [
        think_and_call("Maybe multiplication?", "Edit", file_path="calc.py",
                       old_string="return a - b", new_string="return a * b"),
        final_answer("Changed add."),
    ]
    code, output, transcript = solve(calc_repo, wrong, tmp_path, "--max-attempts", "2")
    assert code == 1, output
    assert "max_attempts" in output
    assert git(calc_repo, "branch", "--list", "frognano/*").strip() == ""
    records = read_transcript(transcript)
    feedback = [r for r in records if r["kind"] == "feedback"]
    assert len(feedback) == 1
    assert "- test still fails: tests/test_calc.py::test_add" in feedback[0]["content"]
    assert "assert 6 == 5" in feedback[0]["content"], "the failing output reaches the model"
    result = records[-1]
    assert result["exit_reason"] == "max_attempts" and result["tests_passed"] is False
    assert result["final"]["tests"]["tests/test_calc.py::test_add"] == "failed"
    assert result["totals"]["attempts"] == 2


def test_markup_like_paths_and_test_ids_are_printed_as_data(tmp_path: Path) -> None:
    """`[/x]` in a repository path and `[/tmp]` in a test id used to crash the report
    (MarkupError), the second after the tests had passed; piped, nothing wraps."""
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "src" / "a[/x]b", template="calc_repo")
    (repo / "tests" / "test_abs.py").write_text(
        "import pytest\nimport calc\n\n@pytest.mark.parametrize('p', ['/tmp'])\n"
        "def test_abs(p):\n    assert calc.add(len(p), 1) == 5\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "abs")
    code, output, _ = solve(repo, FIXING_SCRIPT, tmp_path)
    assert code == 0, output
    assert "MarkupError" not in output
    assert "a[/x]b" in output
    assert "tests/test_abs.py::test_abs[/tmp]: failed → passed" in output
    assert "committed" in output
    transcript_line = next(line for line in output.splitlines() if line.startswith("transcript:"))
    assert transcript_line.endswith(".jsonl"), "the transcript path is one unbroken line"
