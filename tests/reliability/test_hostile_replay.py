"""Hostile issue, red team: a review's replay on a branch a person rewrote meanwhile.

When the bot's push is refused because the PR branch moved, the change is replayed on
the new head with `git merge-tree head commit`, whose merge base git finds itself. That
is the change alone only while the new head descends from the commit the run started
on. A person who *rewrites* the branch (here: drops a commit that leaked a credential,
then force-pushes) gives a head whose merge base with the bot's commit is older, so the
three-way merge brought the dropped commit back, and the bot pushed it on top of the
person's rewrite without force. End to end: real receiver, redis-server, Celery worker,
bubblewrap, git pushes into the fake GitHub; the rewrite lands while the bot's push is in
flight (`on_next`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git
from tests.reliability.conftest import Recorder
from tests.reliability.stack import OWNER, Stack, StackOptions, running_stack, wait_for
from tests.sandbox_support import HAVE_BWRAP
from tests.test_pipeline_e2e import SCRIPT, human_push
from tests.test_review_races_e2e import BRANCH, bot_pr, review, review_run, when_the_bot_pushes

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
                       "the bot does not merge the dropped commit back: nothing is pushed "
                       "(`conflict`), the branch stays as the person left it")
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
    record.observed = {"outcome": run.outcome, "branch is the person's": head == rewritten[0],
                       "leak back on the branch": "secret.txt" in files.split()}
    assert rewritten, "the rewrite ran when the bot pushed"
    assert "secret.txt" not in files.split(), "the dropped commit was merged back"
    assert run.outcome == "conflict" and head == rewritten[0]
    comment = wait_for(lambda: [c.body for c in stack.fake.comments(OWNER, REPO, pull.number)
                                if "did not push" in c.body or "rewritten" in c.body],
                       message="the note on the PR")[0]
    assert "rewritten" in comment
