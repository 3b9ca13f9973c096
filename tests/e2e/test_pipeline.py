"""From label to draft PR, end to end: signed webhooks into the real receiver, a real
redis-server, real Celery workers in their own processes, real bubblewrap, real git
pushes into the local fake GitHub (OpenAPI-checked), and the scripted model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore.store import RunStore
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git
from tests.reliability.stack import (
    MAINTAINER,
    OWNER,
    READER,
    Stack,
    StackOptions,
    issue_json,
    repo_json,
    running_stack,
    user_json,
    wait_for,
)
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

# One script for every run; what it does depends on the repository it finds, so one
# resident worker model serves all scenarios.
SCRIPT = [
    think_and_call("Look around, including what the sandbox exposes.", "Bash",
                   command="env; cat .git/config; ls -la /frognano; cat /proc/1/environ | "
                           "tr '\\0' '\\n'; git remote -v"),
    # A repository with SLOW keeps the run in this call long enough to cancel it mid-run.
    think_and_call("Wait for the slow service.", "Bash",
                   command="if [ -f SLOW ]; then touch SLEEPING; sleep 12; fi; true"),
    # On a PR branch that is already fixed (a review run), the change the review asks for.
    think_and_call("Note the sum, as the review asks.", "Bash",
                   command="grep -q 'return a + b' calc.py && printf '# add returns the "
                           "sum\\n' >> calc.py; true"),
    think_and_call("add uses minus.", "Edit", file_path="calc.py",
                   old_string="return a - b", new_string="return a + b"),
    # A branch with BREAK (a human put it there) makes the review run's change fail.
    think_and_call("Rewrite add.", "Bash",
                   command="if [ -f BREAK ]; then sed -i 's/return a + b/return a * b/' "
                           "calc.py; fi; true"),
    think_and_call("Some repos want CI tweaks.", "Bash",
                   command="if [ -f EVIL ]; then mkdir -p .github/workflows && "
                           "printf 'on: push\\n' > .github/workflows/evil.yml; fi; true"),
    final_answer("Fixed `add` to return the sum."),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), StackOptions(SCRIPT)) as stack:
        stack.add_calc_repo("calc")
        stack.add_calc_repo("calc-evil", {"EVIL": "x"})
        stack.add_calc_repo("calc-reader")
        stack.add_calc_repo("calc-ci-run", {".github/frognano.yml": "ci: run\n"})
        stack.add_calc_repo("calc-busy")
        stack.add_calc_repo("calc-free")
        stack.add_calc_repo("calc-cancel", {"SLOW": "x"})
        stack.add_calc_repo("calc-close", {"SLOW": "x"})
        stack.add_calc_repo("calc-review")
        stack.add_calc_repo("calc-moved")
        stack.add_calc_repo("calc-review-fails")
        stack.add_calc_repo("calc-close-pr")
        stack.add_calc_repo("calc-preexisting", {"tests/test_zone.py": (
            "def test_newest_zone():\n    assert False, 'this host lacks the zone'\n")})
        yield stack


def test_label_opens_a_draft_pr_whose_branch_passes_the_tests(stack: Stack,
                                                              tmp_path: Path) -> None:
    assert stack.label("calc", 1).status_code == 202
    pulls = wait_for(lambda: stack.fake.pulls(OWNER, "calc"), message="a draft PR")
    assert len(pulls) == 1
    pull = pulls[0]
    assert pull.draft and pull.head == "frognano/issue-1" and pull.base == "main"
    assert pull.title == "[FrogNano] add() subtracts"
    assert pull.body.startswith("Fixes #1: ") and "Needs human review" in pull.body
    assert "- `tests/test_calc.py::test_add`: failed → passed" in pull.body
    # The evidence comes first: the repository's test that fails on main passes here.
    assert pull.body.splitlines()[2].startswith(
        "✅ `tests/test_calc.py::test_add` fails on `main` and passes with this change"), \
        pull.body
    assert "https://frognano.example/runs/octo/calc/1/1" in pull.body
    wait_for(lambda: pull.requested_reviewers == [MAINTAINER], message="a review request")
    wait_for(lambda: "needs-human-review" in stack.fake.issue_labels(OWNER, "calc", pull.number),
             message="the review label")
    assert "needs-human-review" in stack.fake.labels(OWNER, "calc")
    assert "frognano:unverified" not in stack.fake.issue_labels(OWNER, "calc", pull.number)
    eyes = [r for r in stack.fake.reactions if r.content == "eyes" and r.subject == "issue"]
    assert eyes, "a 👀 reaction on the trigger"
    wait_for(lambda: "opened a draft pull request" in stack.status("calc", 1),
             message="the status comment to say so")

    # The branch really passes the repository's tests.
    clone = tmp_path / "check"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1",
        str(stack.fake.repo(OWNER, "calc").bare_path), str(clone))
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=clone, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout
    author = git(clone, "log", "-1", "--format=%an").strip()
    assert author == stack.fake.bot_login
    # CI does not run model-written code with secrets by default (ci: skip).
    assert git(clone, "log", "-1", "--format=%s").strip() == "add() subtracts [skip ci]"
    assert "**CI and secrets:**" in pull.body
    assert "> Fixed `add` to return the sum." in pull.body  # quoted, its name as code
    reads_in_the_reviewers_order(pull.body)
    reproduce_as_printed(pull.body, stack.fake.repo(OWNER, "calc").bare_path, tmp_path)

    # The token appears nowhere: not in the sandbox's view, the transcript, the PR,
    # the comments or the pushed commit.
    tokens = [t.token for t in stack.fake.issued_tokens]
    assert tokens, "tokens were minted"
    transcript = stack.transcripts("calc")[0].read_text()
    assert "cat .git/config" in transcript and "PATH=" in transcript, "the probe ran"
    assert "GITHUB_PRIVATE_KEY" not in transcript and "FROGNANO_REDIS_URL" not in transcript
    pushed = git(clone, "log", "-p", "--all")
    texts = [transcript, pull.body, pushed, *[c.body for c in stack.fake.comments(
        OWNER, "calc", 1)], (clone / ".git" / "config").read_text()]
    for token in tokens:
        for text in texts:
            assert token not in text
    assert stack.fake.private_key_pem.splitlines()[1] not in transcript


def reads_in_the_reviewers_order(body: str) -> None:
    """Issue 22 §4: what changed and why, the verdict, how to reproduce, the cautions,
    the run; `Fixes #1` first, with the issue's title."""
    first = body.splitlines()[0]
    assert first.startswith("Fixes #1: ") and "subtracts" in first, first
    sections = [line for line in body.splitlines() if line.startswith("## ")]
    assert sections == ["## What changed", "## Tests", "## Reproduce", "## Cautions",
                        "## Run", "## Review checklist"], sections
    changed = body.split("## What changed")[1].split("## Tests")[0]
    assert "**1 file, +1 −1**" in changed and "- `calc.py` (+1 −1)" in changed, changed


def reproduce_as_printed(body: str, bare: Path, tmp_path: Path) -> None:
    """The body's reproduce commands, run as printed in a clone of the default branch
    (its remote `origin` the fake GitHub's git): the tests fail there, and after the
    printed fetch and checkout the printed test command passes on the pushed branch."""
    markdown_it = pytest.importorskip("markdown_it")
    [commands] = [t.content for t in markdown_it.MarkdownIt("commonmark").parse(
        body.split("## Reproduce")[1]) if t.type == "fence" and t.info == "sh"][:1]
    *checkout, test_command = commands.strip().splitlines()
    assert checkout == ["git fetch origin frognano/issue-1", "git checkout --detach FETCH_HEAD"]
    clone = tmp_path / "reproduce"
    git(tmp_path, "clone", "-q", str(bare), str(clone))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def sh(line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=120)
    assert sh(test_command).returncode != 0, "the default branch fails the test command"
    for line in checkout:
        done = sh(line)
        assert done.returncode == 0, (line, done.stderr)
    ran = sh(test_command)
    assert ran.returncode == 0, ran.stdout[-2000:]
    assert "PASSED tests/test_calc.py::test_add" in ran.stdout, ran.stdout[-2000:]


def test_a_failure_before_and_after_is_listed_not_blamed(stack: Stack) -> None:
    """Issue 20 §4 through the worker: a test failing at baseline for a reason of its own
    does not block the honest fix; the PR says it failed before and after, and does not
    list it as the change's."""
    assert stack.label("calc-preexisting", 1).status_code == 202
    [pull] = wait_for(lambda: stack.fake.pulls(OWNER, "calc-preexisting"), message="a draft PR")
    headline = pull.body.split("\n## ", 1)[0]  # before the first section
    assert "1 test(s) failing before and after, not caused by this change" in headline, \
        pull.body
    assert "`tests/test_zone.py::test_newest_zone`" in pull.body
    assert "- `tests/test_calc.py::test_add`: failed → passed" in pull.body
    assert "Still failing" not in pull.body


def test_retry_from_a_writer_updates_the_same_pr(stack: Stack) -> None:
    wait_for(lambda: stack.fake.pulls(OWNER, "calc"), message="the first PR")
    first_sha = stack.fake.branch_sha(OWNER, "calc", "frognano/issue-1")
    assert stack.retry("calc", 1, MAINTAINER, "keep it short").status_code == 202
    wait_for(lambda: len(stack.transcripts("calc")) == 2 and "(run 2)" in stack.status(
        "calc", 1) and "opened a draft" in stack.status("calc", 1), message="the second run")
    assert len(stack.fake.pulls(OWNER, "calc")) == 1, "never a second PR"
    assert stack.fake.branch_sha(OWNER, "calc", "frognano/issue-1") != first_sha, \
        "force-pushed"
    second = stack.transcripts("calc")[1].read_text()
    assert "keep it short" in second, "the retry text reaches the model as guidance"


def test_retry_from_a_reader_starts_no_run(stack: Stack) -> None:
    assert stack.retry("calc-reader", 1, READER).status_code == 202
    wait_for(lambda: any("only people with write" in c.body for c in stack.fake.comments(
        OWNER, "calc-reader", 1)), message="the refusal")
    time.sleep(1.0)
    assert stack.transcripts("calc-reader") == []
    assert stack.status("calc-reader", 1) == ""
    assert stack.fake.branch_sha(OWNER, "calc-reader", "frognano/issue-1") is None


def test_duplicate_delivery_starts_one_run(stack: Stack) -> None:
    delivery = str(uuid.uuid4())
    first = stack.label("calc-reader", 1, delivery=delivery)
    second = stack.label("calc-reader", 1, delivery=delivery)
    assert first.status_code == 202 and second.json()["duplicate"] is True
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-reader"), message="the PR")
    time.sleep(1.0)
    assert len(stack.transcripts("calc-reader")) == 1


def test_bad_signature_is_rejected_and_nothing_is_enqueued(stack: Stack) -> None:
    before = stack.redis.client().llen("frognano-control")
    response = stack.label("calc", 1, signature="sha256=" + "0" * 64)
    assert response.status_code == 401
    assert stack.redis.client().llen("frognano-control") == before


def test_a_diff_touching_workflows_is_not_pushed(stack: Stack) -> None:
    assert stack.label("calc-evil", 1).status_code == 202
    status = wait_for(lambda: "never push" in stack.status("calc-evil", 1) and stack.status(
        "calc-evil", 1), message="the refusal in the status comment")
    assert ".github/workflows/evil.yml" in status
    assert stack.fake.branch_sha(OWNER, "calc-evil", "frognano/issue-1") is None
    assert stack.fake.pulls(OWNER, "calc-evil") == []


def test_ci_run_leaves_the_commit_without_skip_ci(stack: Stack, tmp_path: Path) -> None:
    assert stack.label("calc-ci-run", 1).status_code == 202
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-ci-run"), message="a draft PR")
    clone = tmp_path / "check"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1",
        str(stack.fake.repo(OWNER, "calc-ci-run").bare_path), str(clone))
    assert git(clone, "log", "-1", "--format=%s").strip() == "add() subtracts"


def test_a_run_whose_issue_is_locked_retries_and_frees_the_worker(stack: Stack) -> None:
    """The one run worker does not sit on a busy issue: the run goes back to the broker
    (Celery's retry with a countdown), another issue's run goes first, and the first one
    runs once the lock is free."""
    lock = f"frognano:lock:{OWNER}/calc-busy#1"
    redis = stack.redis.client()
    redis.set(lock, "0", ex=300)  # an older run still holds the issue
    assert stack.label("calc-busy", 1).status_code == 202
    log = stack.root / "worker0.log"
    wait_for(lambda: "retry: Retry in" in log.read_text(), timeout=60,
             message="the run to go back to the broker")
    assert stack.label("calc-free", 1).status_code == 202
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-free"), timeout=60,
             message="the other issue's PR while the first waits")
    assert stack.fake.pulls(OWNER, "calc-busy") == [] and stack.transcripts("calc-busy") == []
    redis.delete(lock)
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-busy"), message="the retried run's PR")
    assert len(stack.transcripts("calc-busy")) == 1


def command(stack: Stack, repo: str, number: int, actor: str, body: str) -> Any:
    comment = stack.fake.add_comment(OWNER, repo, number, body, actor)
    return stack.deliver("issue_comment", {
        "action": "created", "issue": issue_json(number),
        "comment": {"id": comment.id, "body": comment.body, "user": user_json(actor)},
        "repository": repo_json(repo), "sender": user_json(actor),
        "installation": {"id": stack.fake.installation_id}})


def sleeping(stack: Stack, repo: str, run_number: str = "*") -> list[Path]:
    """The workspace of a run that sits in the script's `sleep` (a SLOW repository)."""
    return list(Path(stack.env["FROGNANO_WORK_DIR"]).glob(
        f"{OWNER}-{repo}-1-{run_number}-*/workspace/SLEEPING"))


def finished_run(stack: Stack, repo: str) -> Any:
    store = RunStore(f"sqlite:///{stack.state / 'frognano.db'}", migrate=False)
    try:
        runs = store.list_runs(repo=f"{OWNER}/{repo}")
        return runs[0] if runs and runs[0].finished else None
    finally:
        store.close()


def test_cancel_during_a_run_pushes_nothing(stack: Stack) -> None:
    assert stack.label("calc-cancel", 1).status_code == 202
    wait_for(lambda: sleeping(stack, "calc-cancel"), message="the run to sit in its sleep")
    # A reader may not cancel: one short reply, the run goes on.
    assert command(stack, "calc-cancel", 1, READER, "/frognano cancel").status_code == 202
    wait_for(lambda: any("can cancel a FrogNano run" in c.body for c in stack.fake.comments(
        OWNER, "calc-cancel", 1)), message="the refusal")
    assert sleeping(stack, "calc-cancel"), "a reader's cancel stopped nothing"
    assert command(stack, "calc-cancel", 1, MAINTAINER, "/frognano cancel").status_code == 202
    wait_for(lambda: f"cancelled by @{MAINTAINER}" in stack.status("calc-cancel", 1),
             message="the status comment to say who cancelled")
    run = wait_for(lambda: finished_run(stack, "calc-cancel"), message="the run to end")
    assert run.outcome == "cancelled"
    # The script's next step (the fix) never ran, nothing reached GitHub's git, no PR.
    transcript = stack.transcripts("calc-cancel")[0].read_text()
    assert "return a + b" not in transcript
    assert stack.fake.branch_sha(OWNER, "calc-cancel", "frognano/issue-1") is None
    assert stack.fake.pulls(OWNER, "calc-cancel") == []
    status = stack.status("calc-cancel", 1)
    assert f"cancelled by @{MAINTAINER}" in status and "Nothing was pushed" in status
    # Once it has stopped, a second cancel finds nothing to cancel.
    assert command(stack, "calc-cancel", 1, MAINTAINER, "/frognano cancel").status_code == 202
    wait_for(lambda: any("nothing to cancel" in c.body for c in stack.fake.comments(
        OWNER, "calc-cancel", 1)), message="the answer to a cancel of nothing")


def test_closing_the_issue_cancels_its_run(stack: Stack) -> None:
    assert stack.label("calc-close", 1).status_code == 202
    wait_for(lambda: sleeping(stack, "calc-close"), message="the run to sit in its sleep")
    closed = {**stack.label_payload("calc-close", 1), "action": "closed"}
    del closed["label"]
    assert stack.deliver("issues", closed).status_code == 202
    run = wait_for(lambda: finished_run(stack, "calc-close"), message="the run to end")
    assert run.outcome == "cancelled"
    assert f"the issue was closed by @{MAINTAINER}" in stack.status("calc-close", 1)
    assert stack.fake.branch_sha(OWNER, "calc-close", "frognano/issue-1") is None
    assert stack.fake.pulls(OWNER, "calc-close") == []


def review_payload(stack: Stack, repo: str, pull: int, reviewer: str, body: str
                   ) -> dict[str, Any]:
    bot = {"login": stack.fake.bot_login, "type": "Bot"}
    return {"action": "submitted",
            "review": {"id": 900 + pull, "body": body, "state": "changes_requested",
                       "user": user_json(reviewer)},
            "pull_request": {"number": pull, "user": bot,
                             "head": {"ref": "frognano/issue-1"}, "merged": False},
            "repository": repo_json(repo), "sender": user_json(reviewer),
            "installation": {"id": stack.fake.installation_id}}


def review_comment_payload(stack: Stack, repo: str, pull: int, author: str, body: str,
                           comment_id: int = 700) -> dict[str, Any]:
    bot = {"login": stack.fake.bot_login, "type": "Bot"}
    return {"action": "created",
            "comment": {"id": comment_id, "body": body, "user": user_json(author),
                        "path": "calc.py", "line": 2, "diff_hunk": "@@ -1,2 +1,2 @@"},
            "pull_request": {"number": pull, "user": bot,
                             "head": {"ref": "frognano/issue-1"}},
            "repository": repo_json(repo), "sender": user_json(author),
            "installation": {"id": stack.fake.installation_id}}


def test_a_review_requesting_changes_adds_a_commit_on_top_of_a_humans(
        stack: Stack, tmp_path: Path) -> None:
    assert stack.label("calc-review", 1).status_code == 202
    pull = wait_for(lambda: stack.fake.pulls(OWNER, "calc-review"), message="a draft PR")[0]
    bot_commit = stack.fake.branch_sha(OWNER, "calc-review", "frognano/issue-1")
    # A maintainer pushes a commit of their own to the bot's branch.
    bare = stack.fake.repo(OWNER, "calc-review").bare_path
    clone = tmp_path / "human"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1", str(bare), str(clone))
    (clone / "NOTES.md").write_text("reviewed by a human\n")
    git(clone, "add", "NOTES.md")
    git(clone, "-c", "user.name=Maintainer", "-c", "user.email=m@example.com", "commit",
        "-q", "-m", "a human's note")
    git(clone, "push", "-q", "origin", "frognano/issue-1")
    human_commit = git(clone, "rev-parse", "HEAD").strip()
    assert human_commit != bot_commit

    # A reader's `/frognano` review comment: one short refusal on the PR, no run.
    assert stack.deliver("pull_request_review_comment", review_comment_payload(
        stack, "calc-review", pull.number, READER, "/frognano rename it")).status_code == 202
    wait_for(lambda: any("only people with write" in c.body for c in stack.fake.comments(
        OWNER, "calc-review", pull.number)), message="the refusal on the PR")

    # The review's line comment reaches the model through the API (the webhook has no
    # comments); a comment the bot itself left in the review is not passed on.
    review_id = 900 + pull.number
    stack.fake.add_review_comment(
        OWNER, "calc-review", pull.number, review_id, MAINTAINER, "Mention the sum here.",
        path="calc.py", line=2, diff_hunk="@@ -1,2 +1,2 @@\n-    return a - b\n+    return a + b")
    stack.fake.add_review_comment(
        OWNER, "calc-review", pull.number, review_id, stack.fake.bot_login, "BOT-NOTE",
        path="calc.py", line=1, diff_hunk="@@")
    assert stack.deliver("pull_request_review", review_payload(
        stack, "calc-review", pull.number, MAINTAINER,
        "Please say in a comment that add returns the sum.")).status_code == 202
    reply = wait_for(lambda: [c.body for c in stack.fake.comments(
        OWNER, "calc-review", pull.number) if "FrogNano** pushed " in c.body],
        message="the reply to the review")[0]
    assert f"@{MAINTAINER}" in reply
    assert len(stack.transcripts("calc-review")) == 2, "the reader's comment ran nothing"
    review_run = stack.transcripts("calc-review")[1].read_text()
    assert "say in a comment that add returns the sum" in review_run, "the review's text"
    assert "calc.py, line 2" in review_run and "Mention the sum here." in review_run
    assert "+    return a + b" in review_run, "the diff hunk the reviewer saw"
    assert "BOT-NOTE" not in review_run

    check = tmp_path / "check"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1", str(bare), str(check))
    head = git(check, "rev-parse", "HEAD").strip()
    assert head[:12] in reply
    assert git(check, "rev-parse", "HEAD^").strip() == human_commit, \
        "one new commit on top of the human's, not a force-push over it"
    assert (check / "NOTES.md").exists()
    assert "# add returns the sum" in (check / "calc.py").read_text()
    assert git(check, "log", "-1", "--format=%an").strip() == stack.fake.bot_login
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=check, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout
    assert len(stack.fake.pulls(OWNER, "calc-review")) == 1
    run = wait_for(lambda: finished_run(stack, "calc-review") if finished_run(
        stack, "calc-review") and finished_run(stack, "calc-review").outcome == "pushed"
        else None, message="the review run's record")
    assert run.trigger == "review"

    # A writer's `/frognano` review comment: a run whose answer is in that comment's thread.
    asked = stack.fake.add_review_comment(
        OWNER, "calc-review", pull.number, 950, MAINTAINER, "/frognano once more",
        path="calc.py", line=2, diff_hunk="@@ -1,2 +1,2 @@")
    assert stack.deliver("pull_request_review_comment", review_comment_payload(
        stack, "calc-review", pull.number, MAINTAINER, asked.body, asked.id)).status_code == 202
    answer = wait_for(lambda: [c for c in stack.fake.pull_review_comments(
        OWNER, "calc-review", pull.number) if c.in_reply_to == asked.id],
        message="the reply in the review comment's thread")[0]
    assert "FrogNano** pushed " in answer.body and answer.user == stack.fake.bot_login


def human_push(bare: Path, work: Path, name: str, text: str) -> str:
    """A maintainer's commit on the bot's branch, pushed straight to GitHub's git."""
    if not work.exists():
        git(work.parent, "clone", "-q", "--branch", "frognano/issue-1", str(bare), str(work))
    git(work, "pull", "-q", "--ff-only", "origin", "frognano/issue-1")
    (work / name).write_text(text)
    git(work, "add", name)
    git(work, "-c", "user.name=Maintainer", "-c", "user.email=m@example.com", "commit", "-q",
        "-m", f"add {name}")
    git(work, "push", "-q", "origin", "HEAD:frognano/issue-1")
    return git(work, "rev-parse", "HEAD").strip()


def test_a_branch_moved_during_a_review_run_gets_the_change_replayed_on_top(
        stack: Stack, tmp_path: Path) -> None:
    assert stack.label("calc-moved", 1).status_code == 202
    pull = wait_for(lambda: stack.fake.pulls(OWNER, "calc-moved"), message="a draft PR")[0]
    bare = stack.fake.repo(OWNER, "calc-moved").bare_path
    human = tmp_path / "human"
    human_push(bare, human, "SLOW", "x")  # the review run will sit in the script's sleep
    assert stack.deliver("pull_request_review", review_payload(
        stack, "calc-moved", pull.number, MAINTAINER, "Name the sum.")).status_code == 202
    wait_for(lambda: sleeping(stack, "calc-moved", "2"), message="the review run's sleep")
    moved = human_push(bare, human, "NOTES.md", "pushed during the run\n")
    reply = wait_for(lambda: [c.body for c in stack.fake.comments(
        OWNER, "calc-moved", pull.number) if "FrogNano** pushed " in c.body],
        message="the reply to the review")[0]
    check = tmp_path / "check"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1", str(bare), str(check))
    assert git(check, "rev-parse", "HEAD^").strip() == moved, \
        "replayed on the commit pushed during the run, which stays"
    assert git(check, "rev-parse", "HEAD").strip()[:12] in reply
    assert f"replayed on {moved[:12]}" in reply and "re-run on the merged result" in reply
    assert (check / "NOTES.md").read_text() == "pushed during the run\n"
    assert "# add returns the sum" in (check / "calc.py").read_text()
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=check, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout


def test_a_failing_review_run_replies_with_the_reason_and_leaves_the_branch(
        stack: Stack, tmp_path: Path) -> None:
    assert stack.label("calc-review-fails", 1).status_code == 202
    pull = wait_for(lambda: stack.fake.pulls(OWNER, "calc-review-fails"), message="a PR")[0]
    bare = stack.fake.repo(OWNER, "calc-review-fails").bare_path
    before = human_push(bare, tmp_path / "human", "BREAK", "x")
    body_before = pull.body
    # This time the feedback is a `/frognano` comment on the PR (an issue comment there).
    comment = stack.fake.add_comment(OWNER, "calc-review-fails", pull.number,
                                     "/frognano rewrite add", MAINTAINER)
    on_pr = {**issue_json(pull.number), "body": pull.body,
             "user": {"login": stack.fake.bot_login, "type": "Bot"},
             "pull_request": {"url": f"https://api.github.com/repos/{OWNER}/x/pulls/1"}}
    assert stack.deliver("issue_comment", {
        "action": "created", "issue": on_pr,
        "comment": {"id": comment.id, "body": comment.body, "user": user_json(MAINTAINER)},
        "repository": repo_json("calc-review-fails"), "sender": user_json(MAINTAINER),
        "installation": {"id": stack.fake.installation_id}}).status_code == 202
    failure = wait_for(lambda: [c.body for c in stack.fake.comments(
        OWNER, "calc-review-fails", pull.number) if "did not" in c.body],
        message="the failure reply on the PR")[0]
    # Issue 22 §4: what happened in words (the exit code kept in brackets), what the model
    # changed, which tests still fail, and the run's page and transcript.
    headline = failure.splitlines()[0]
    assert re.fullmatch(r"🐸 \*\*FrogNano\*\* did not open a pull request: [a-z][^`]+ "
                        r"\(`[a-z_]+`\)\.", headline), headline
    assert "- The model changed 1 file, " in failure and "`calc.py`" in failure, failure
    assert "- Still failing (1): `tests/test_calc.py::test_add`." in failure, failure
    page = "https://frognano.example/runs/octo/calc-review-fails/1/2"
    assert f"[the run's page]({page}) and its [transcript]({page}#events)" in failure
    time.sleep(1.0)
    assert stack.fake.branch_sha(OWNER, "calc-review-fails", "frognano/issue-1") == before
    assert stack.fake.pulls(OWNER, "calc-review-fails")[0].body == body_before


def test_closing_the_bots_pr_unmerged_cancels_the_review_run(stack: Stack,
                                                              tmp_path: Path) -> None:
    assert stack.label("calc-close-pr", 1).status_code == 202
    pull = wait_for(lambda: stack.fake.pulls(OWNER, "calc-close-pr"), message="a PR")[0]
    bare = stack.fake.repo(OWNER, "calc-close-pr").bare_path
    before = human_push(bare, tmp_path / "human", "SLOW", "x")
    assert stack.deliver("pull_request_review", review_payload(
        stack, "calc-close-pr", pull.number, MAINTAINER, "Name it.")).status_code == 202
    wait_for(lambda: sleeping(stack, "calc-close-pr", "2"), message="the review run's sleep")
    closed = review_payload(stack, "calc-close-pr", pull.number, MAINTAINER, "")
    closed = {"action": "closed", "pull_request": closed["pull_request"],
              "repository": closed["repository"], "sender": closed["sender"],
              "installation": closed["installation"]}
    assert stack.deliver("pull_request", closed).status_code == 202
    wait_for(lambda: f"pull request #{pull.number} was closed by @{MAINTAINER}" in stack.status(
        "calc-close-pr", 1), message="the status comment to say so")
    run = wait_for(lambda: (r := finished_run(stack, "calc-close-pr")) and r.run_number == 2
                   and r, message="the review run's record")
    assert run.outcome == "cancelled"
    assert stack.fake.branch_sha(OWNER, "calc-close-pr", "frognano/issue-1") == before
    assert not any("FrogNano** pushed " in c.body for c in stack.fake.comments(
        OWNER, "calc-close-pr", pull.number))
