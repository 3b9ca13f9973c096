"""A person's push stops a CI repair round (issue 30 §3), red team: a maintainer pushes to
`frognano/issue-N` while a round runs (its model waits in a tool call until the test has
pushed), or between the round's accept and its start. A round that replayed the model's
commit onto the person's and pushed it would put an unreviewed commit on the branch,
which under `ci: run` then runs in CI with the repository's secrets, and the loop would
go on.

The real path: the receiver, redis-server, Celery workers, bubblewrap, git, the scripted
model and the fake GitHub (OpenAPI-checked); the person pushes with git to the fake's
repository, as a maintainer's `git push` reaches GitHub.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from solver.models.scripted import think_and_call
from tests.conftest import git
from tests.e2e.test_ci_repair import (
    SCRIPT,
    TESTS,
    bot_replies,
    extra_py,
    opened_pull,
    red_ci,
    settled,
)
from tests.e2e.test_pipeline import finished_run, human_push
from tests.reliability.conftest import Recorder
from tests.reliability.stack import OWNER, Stack, StackOptions, running_stack, wait_for
from tests.reliability.test_hostile_ci import hostile_live
from tests.support.fake_github.checks import check_run_payload, check_suite_payload
from tests.support.sandbox_support import HAVE_BWRAP
from workers.coordination import IssueCoordinator

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

BRANCH = "frognano/issue-1"
# On a CI round only (`add` already fixed): the model's first turn waits until the test
# says GO, so the person's push lands while the round runs.
WAIT = think_and_call("Read the CI logs first.", "Bash", command=(
    "if grep -q 'return a + b' calc.py; then touch WAITING; for i in $(seq 600); do "
    "[ -f GO ] && break; sleep 0.2; done; rm -f WAITING GO; fi; true"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), StackOptions([WAIT, *SCRIPT])
                       ) as stack:
        for name in ("ci-push-during", "ci-push-before"):
            stack.add_calc_repo(name, {".github/frognano.yml": "ci: run\n",
                                       "extra.py": extra_py(("mul",)),
                                       "tests/test_extra.py": TESTS})
        yield stack


def push_as_the_bot(stack: Stack, repo: str, work: Path) -> str:
    """A person's commit on the bot's branch, authored and committed as the bot's email
    (nothing stops a person setting any address): its sha."""
    email = f"{stack.fake.bot_login}@users.noreply.github.com"
    git(work.parent, "clone", "-q", "--branch", BRANCH,
        str(stack.fake.repo(OWNER, repo).bare_path), str(work))
    (work / "NOTES.md").write_text("a note pushed as the bot, before the round\n")
    git(work, "add", "NOTES.md")
    git(work, "-c", f"user.name={stack.fake.bot_login}", "-c", f"user.email={email}",
        "commit", "-qm", "looks like the bot's")
    git(work, "push", "-q", "origin", f"HEAD:{BRANCH}")
    return git(work, "rev-parse", "HEAD").strip()


def waiting(stack: Stack, repo: str) -> list[Path]:
    """The CI round's workspace while its model waits (run 2: the round)."""
    return list(Path(stack.env["FROGNANO_WORK_DIR"]).glob(
        f"{OWNER}-{repo}-1-2-*/workspace/WAITING"))


def stopped_round(stack: Stack, repo: str, number: int, person: str) -> dict[str, object]:
    """After the round: what the bot said and pushed; then a red check on the person's
    head, delivered as GitHub would, starts no round."""
    wait_for(lambda: (r := finished_run(stack, repo)) and r.run_number == 2, timeout=180,
             message="the round to end")
    outcome = finished_run(stack, repo).outcome
    notes = bot_replies(stack, repo, number, "did not push its CI")
    settled(stack, repo)
    branch = stack.fake.branch_sha(OWNER, repo, BRANCH)
    stack.fake.checks.set_runs(stack.fake, OWNER, repo, person, [  # it fails CI too
        {"name": "tests (3.11)", "conclusion": "failure", "log": "FAILED test_mul\n",
         "title": "1 failed", "summary": "tests/test_extra.py::test_mul failed"}])
    [run] = [r for r in stack.fake.checks.of(OWNER, repo, person)
             if r.conclusion == "failure"]
    codes = [stack.deliver("check_suite", check_suite_payload(
        stack.fake, OWNER, repo, BRANCH, person)).status_code,
        stack.deliver("check_run", check_run_payload(
            stack.fake, OWNER, repo, BRANCH, run)).status_code]
    time.sleep(3.0)
    # A round on that head would wait in the script for a GO that never comes (120 s).
    issue = IssueCoordinator(stack.redis.client(), f"{OWNER}/{repo}#1")
    wait_for(lambda: not issue.is_active(), timeout=300, message="the issue's runs to end")
    return {"outcome": outcome, "notes": notes, "deliveries on the person's head": codes,
            "branch": branch,
            "runs": len(stack.transcripts(repo)),
            "pushed replies": bot_replies(stack, repo, number, "repair its CI"),
            "said": [c.body for c in stack.fake.comments(OWNER, repo, number)
                     if c.user == stack.fake.bot_login]}


def assert_stopped(seen: dict[str, object], person: str, runs: int) -> None:
    assert seen["branch"] == person, "the round pushed on top of the person's commit"
    assert seen["pushed replies"] == [], seen["pushed replies"]
    assert seen["outcome"] == "branch_moved", seen
    notes = seen["notes"]
    assert isinstance(notes, list) and len(notes) == 1, notes
    note = notes[0]
    assert f"`{BRANCH}` moved to `{person[:12]}`" in note, note
    assert "nothing was pushed" in note and "stops the CI repair loop" in note, note
    assert seen["runs"] == runs, "a round ran on the person's head"
    said = seen["said"]
    assert isinstance(said, list)
    assert [hostile_live(text) for text in said] == [[]] * len(said), said


def test_a_persons_push_during_a_ci_round_stops_it(
        stack: Stack, tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6zj-hostile-ci-person-push-during",
                       "Hostile CI: a maintainer pushes to the bot's branch while a CI "
                       "repair round's model runs (`ci: run`)",
                       "the round pushes nothing (no replay onto the person's commit), "
                       "says so on the PR in inert text, and a red check on the person's "
                       "head starts no round")
    repo = "ci-push-during"
    pull = opened_pull(stack, repo)
    head = red_ci(stack, repo)
    assert stack.deliver("check_suite", check_suite_payload(
        stack.fake, OWNER, repo, BRANCH, head)).status_code == 202
    [marker] = wait_for(lambda: waiting(stack, repo), timeout=180,
                        message="the round's model to wait")
    person = human_push(stack.fake.repo(OWNER, repo).bare_path, tmp_path / "person",
                        "NOTES.md", "a maintainer's note, pushed during the round\n")
    (marker.parent / "GO").write_text("")
    seen = stopped_round(stack, repo, pull.number, person)
    record.observed = {k: v for k, v in seen.items() if k != "said"}
    assert_stopped(seen, person, runs=2)  # the first run and the stopped round


def test_a_persons_push_before_a_ci_round_starts_stops_it(
        stack: Stack, tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6zj-hostile-ci-person-push-before",
                       "Hostile CI: a person pushes to the bot's branch after the red check "
                       "was accepted, before its CI repair round starts, a commit authored "
                       "and committed as the bot's email; then its checks fail",
                       "the round stops before its model runs and pushes nothing; said on "
                       "the PR; no round on the person's head, though it passes for the "
                       "bot's (its claim was taken)")
    repo = "ci-push-before"
    pull = opened_pull(stack, repo)
    head = red_ci(stack, repo)
    person: list[str] = []
    # The accept task reads the PR's reviews last: the person pushes at that moment, after
    # it saw the bot's head.
    stack.fake.on_next("GET", rf"^/repos/{OWNER}/{repo}/pulls/{pull.number}/reviews",
                       lambda: person.append(push_as_the_bot(stack, repo,
                                                             tmp_path / "person")))
    assert stack.deliver("check_suite", check_suite_payload(
        stack.fake, OWNER, repo, BRANCH, head)).status_code == 202
    seen = stopped_round(stack, repo, pull.number, wait_for(lambda: person)[0])
    record.observed = {k: v for k, v in seen.items() if k != "said"}
    assert_stopped(seen, person[0], runs=1)  # the round ended before its transcript
    assert not waiting(stack, repo)
