"""What both publishings check right before a push (workers/publish/shared.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.hostgit import GitError, HostRepo
from tests.conftest import make_repo
from workers.publish.shared import refuse_unsafe


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
