"""What may be pushed, and what the bot writes on GitHub."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.messages import (
    STATUS_MARKER,
    RunReport,
    failure_comment,
    pr_body,
    status_queued,
    status_running,
)
from solver.hostgit import GitError, HostRepo
from solver.policy import forbidden_paths
from tests.conftest import make_repo
from workers.publish import refuse_unsafe


def test_changed_paths_cover_edits_additions_deletions_and_renames(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "r", {"a.py": "a\n", "b.py": "b\n", "old/name.py": "x\n"})
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    repo = host.work_tree
    (repo / "a.py").write_text("changed\n")
    (repo / "b.py").unlink()
    (repo / "new").mkdir()
    (repo / "old" / "name.py").rename(repo / "new" / "name.py")
    (repo / "c.py").write_text("c\n")
    assert host.snapshot().paths == ["a.py", "b.py", "c.py", "new/name.py", "old/name.py"]


def test_workflows_and_protected_paths_are_never_pushed() -> None:
    paths = [".github/workflows/ci.yml", ".github/frognano.yml", "docs/a/b.md", "LICENSE",
             "src/app.py", "vendor/lib.c"]
    assert forbidden_paths(paths, ()) == [".github/workflows/ci.yml"]
    assert forbidden_paths(paths, ("docs/**", "LICENSE", "vendor/")) == [
        ".github/workflows/ci.yml", "docs/a/b.md", "LICENSE", "vendor/lib.c"]
    # A local action runs inside the repository's workflows, with their secrets.
    assert forbidden_paths([".github/actions/setup/action.yml", ".github/actions.md"], ()) \
        == [".github/actions/setup/action.yml"]


def report(**overrides: object) -> RunReport:
    values: dict = dict(
        issue_number=7, exit_reason="tests_passed", test_command="python3 -m pytest",
        baseline_summary="FAIL (exit 1; 1 failed)", final_summary="PASS (exit 0; 2 passed)",
        final_output="E   assert -1 == 5\n" * 400, steps=5, attempts=1, tokens=321,
        seconds=42.4, model="llama-cpp:FrogNano-4B-2609-Q4_K_M.gguf",
        transcript_url="https://bot.example/runs/o/r/7/1",
        changed_tests=["tests/test_calc.py::test_add: failed → passed"],
        summary="Fixed the sign in add().")
    values.update(overrides)
    return RunReport(**values)


def test_pr_body_has_what_a_reviewer_needs() -> None:
    body = pr_body(report())
    assert body.startswith("Fixes #7\n")
    for needle in ("Needs human review", "> Fixed the sign in add\\(\\)\\.",
                   "`python3 -m pytest`", "**CI and secrets:**", "`[skip ci]`",
                   "before: FAIL (exit 1; 1 failed)", "after: PASS (exit 0; 2 passed)",
                   "tests/test_calc.py::test_add: failed → passed",
                   "5 steps, 1 attempt(s), 321 tokens", "FrogNano-4B-2609-Q4_K_M.gguf",
                   "[transcript](https://bot.example/runs/o/r/7/1)", "- [ ] The tests cover",
                   "adds or edits no test"):
        assert needle in body, needle
    flagged = pr_body(report(warnings=["test is now skipped: t"],
                             test_files_changed=["tests/test_calc.py"]))
    assert "⚠️ test is now skipped\\: t" in flagged
    assert "edits or adds tests: `tests/test_calc.py`" in flagged


def test_failure_comment_carries_the_reason_the_tail_and_how_to_retry() -> None:
    text = failure_comment(report(exit_reason="max_attempts", final_summary="FAIL (exit 1)"))
    assert "`max_attempts`" in text and "/frognano retry" in text
    assert text.count("assert -1 == 5") < 400, "only the tail of the output"
    assert "```\n" in text


def test_status_texts_carry_the_marker() -> None:
    assert status_queued(3, 2).startswith(STATUS_MARKER)
    assert "position 3" in status_queued(3, 2) and "Attempt 2" in status_queued(3, 2)
    assert "step 4 of 100" in status_running(4, 100, 1)


def test_the_last_check_before_a_push_refuses_workflows_and_plumbing(tmp_path: Path) -> None:
    """Whatever a caller decided, push_and_open_pull and push_on_top refuse these."""
    source = make_repo(tmp_path / "r", {"a.py": "a\n"})
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    (host.work_tree / "a.py").write_text("b\n")
    refuse_unsafe(host.snapshot())  # an ordinary change goes through
    (host.work_tree / ".github" / "workflows").mkdir(parents=True)
    (host.work_tree / ".github" / "workflows" / "x.yml").write_text("on: push\n")
    (host.work_tree / ".gitmodules").write_text("[submodule]\n")
    with pytest.raises(GitError, match=r"refusing to push \.github/workflows/x\.yml, "
                                       r"\.gitmodules"):
        refuse_unsafe(host.snapshot())
