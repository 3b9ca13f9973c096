"""Hostile issue, red team: a review's replay on a branch a person rewrote meanwhile.

When the bot's push is refused because the PR branch moved, the change is replayed on
the new head by a three-way merge. With `git merge-tree head commit` git finds the merge
base itself, which is the commit the run started on only while the new head descends
from it. A person who *rewrites* the branch (here: drops a commit that leaked a
credential, then force-pushes) gave a head whose merge base with the bot's commit is
older, so the merge brought the dropped commit back and the bot pushed it on top of the
person's rewrite without force. The replay must be the model's change alone: on top of
the rewrite, without the leak. End to end: real receiver, redis-server, Celery worker,
bubblewrap, git pushes into the fake GitHub; the rewrite lands while the bot's push is in
flight (`on_next`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, make_repo
from tests.e2e.test_pipeline import SCRIPT, human_push
from tests.e2e.test_review_races import BRANCH, bot_pr, review, review_run, when_the_bot_pushes
from tests.reliability.conftest import Recorder
from tests.reliability.stack import OWNER, Stack, StackOptions, running_stack
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

REPO = "calc-rewritten"
LEAK = "AKIA-leaked-credential-91f3\n"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), StackOptions(SCRIPT)) as stack:
        stack.add_calc_repo(REPO)
        yield stack


def test_a_commit_a_person_dropped_from_the_branch_is_not_pushed_back(
        stack: Stack, tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6za-hostile-replay-rewrite",
                       "Hostile issue: while the bot pushes a review's change, a person "
                       "force-pushes the PR branch without a commit that leaked a "
                       "credential",
                       "the replay is the model's change alone, pushed on top of the "
                       "person's rewrite: the dropped commit does not come back")
    pull = bot_pr(stack, REPO)
    bare = stack.fake.repo(OWNER, REPO).bare_path
    work = tmp_path / "human"
    human_push(bare, work, "secret.txt", LEAK)  # the review starts from this head
    rewritten: list[str] = []

    def rewrite() -> None:  # drop the leak, add a note, force-push
        git(work, "reset", "-q", "--hard", "HEAD~1")
        (work / "NOTES.md").write_text("credential removed from history\n")
        git(work, "add", "NOTES.md")
        git(work, "-c", "user.name=Maintainer", "-c", "user.email=m@example.com", "commit",
            "-q", "-m", "drop the leaked credential")
        git(work, "push", "-q", "--force", "origin", f"HEAD:{BRANCH}")
        rewritten.append(git(work, "rev-parse", "HEAD").strip())

    when_the_bot_pushes(stack, REPO, rewrite)
    review(stack, REPO, pull)
    run = review_run(stack, REPO)
    head = stack.fake.branch_sha(OWNER, REPO, BRANCH)
    assert head is not None, "the branch is gone"
    files = git(tmp_path, f"--git-dir={bare}", "ls-tree", "-r", "--name-only", head)
    parent = git(tmp_path, f"--git-dir={bare}", "rev-parse", f"{head}^").strip()
    calc = git(tmp_path, f"--git-dir={bare}", "show", f"{head}:calc.py")
    record.observed = {"outcome": run.outcome, "pushed on the person's head":
                       parent == rewritten[0],
                       "leak back on the branch": "secret.txt" in files.split()}
    assert rewritten, "the rewrite ran when the bot pushed"
    assert "secret.txt" not in files.split(), "the dropped commit was merged back"
    assert run.outcome == "pushed" and parent == rewritten[0]
    assert "NOTES.md" in files.split() and "# add returns the sum" in calc, \
        "the person's rewrite and the model's change are both there"


def test_a_rewrite_that_changes_the_models_lines_is_a_conflict(tmp_path: Path) -> None:
    """The replay's own merge (base: the commit the run started on), in the host's git
    directory: a rewritten head that edits the line the change edits is BranchMoved,
    never a merge the verdict is asked about."""
    from solver.hostgit import HostRepo
    from solver.policy import bot_identity
    from workers.publish.review import BranchMoved, _replay

    source = make_repo(tmp_path / "src", template="calc_repo")
    git(source, "checkout", "-q", "-b", BRANCH)
    host = HostRepo.create(source, BRANCH, tmp_path / "run" / "git", tmp_path / "run" / "ws")
    (host.work_tree / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    commit = host.commit(host.snapshot().tree, BRANCH, "fix", identity=bot_identity("b"))
    (source / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    git(source, "-c", "user.name=M", "-c", "user.email=m@e", "commit", "-qam", "rewrite",
        "--amend")  # a rewrite of the commit the run started on
    git(tmp_path, f"--git-dir={host.git_dir}", "fetch", "-q", str(source),
        f"+{BRANCH}:refs/frognano/remote-head")
    head = git(tmp_path, f"--git-dir={host.git_dir}", "rev-parse",
               "refs/frognano/remote-head").strip()

    def never(*_: object) -> Any:
        raise AssertionError("a conflict was judged")

    with pytest.raises(BranchMoved, match="conflicts"):
        _replay(host, head, commit, BRANCH, "fix", bot_identity("b"), never)
