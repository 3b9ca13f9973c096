"""The pipeline end to end (real receiver, redis-server, Celery workers, bubblewrap, git)
where GitHub is less than kind: a `.github/frognano.yml` that exists (on the default
branch, honoured; on the PR branch, not), one that is a directory, a spent rate limit,
a permission the App was not granted. The fake GitHub serves each as GitHub does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, make_repo
from tests.e2e.test_pipeline import human_push, review_payload
from tests.reliability.stack import (
    FIX_CALC,
    MAINTAINER,
    OWNER,
    Stack,
    StackOptions,
    running_stack,
    wait_for,
)
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

# Two looks, then the fix: a `max_steps: 2` stops a run before it. On a PR branch that is
# already fixed (a review run), the second look leaves a note in calc.py.
SCRIPT = [
    think_and_call("Look around.", "Bash", command="ls -a .github || true"),
    think_and_call("Note the sum if add is fixed.", "Bash",
                   command="grep -q 'return a + b' calc.py && printf '# add returns the "
                           "sum\\n' >> calc.py; true"),
    FIX_CALC,
    final_answer("Fixed `add` to return the sum."),
]
TEST_COMMAND = "python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py"
CONTENTS = r"/repos/octo/{}/contents/\.github/frognano\.yml$"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), StackOptions(SCRIPT)) as stack:
        stack.add_calc_repo("calc-config", {".github/frognano.yml": (
            f"test: {TEST_COMMAND}\nmax_steps: 2\nmax_rounds: 1\n")})
        stack.add_calc_repo("calc-pr-config")
        stack.add_calc_repo("calc-config-dir", {".github/frognano.yml/test": "pytest\n"})
        stack.add_calc_repo("calc-rate-limited")
        stack.add_calc_repo("calc-rate-soon")
        stack.add_calc_repo("calc-no-permission")
        stack.add_calc_repo("calc-quota")
        for name, files in NO_TESTS_REPOS.items():
            add_plain_repo(stack, name, files)
        yield stack


# Issue 29 §1: an sdist that ships no tests, and a project whose tests no runner finds.
NO_TESTS_REPOS = {
    "lib-no-tests": {"README.md": "a library\n", "pyproject.toml": "[project]\nname = 'lib'\n",
                     "lib/__init__.py": "def f():\n    return 1\n"},
    "lib-no-command": {"README.md": "a library\n", "lib/__init__.py": "",
                       "lib/tests.py": "def test_f():\n    pass\n"}}


def add_plain_repo(stack: Stack, name: str, files: dict[str, str]) -> None:
    stack.fake.add_repo(OWNER, name, make_repo(stack.root / "repos" / name, files))
    stack.fake.add_issue(OWNER, name, 1, "f is wrong", "It returns 1.")
    stack.fake.set_permission(OWNER, name, MAINTAINER, "write")


def comments(stack: Stack, repo: str, number: int = 1) -> list[str]:
    return [c.body for c in stack.fake.comments(OWNER, repo, number)]


def test_the_default_branchs_config_is_honoured(stack: Stack) -> None:
    assert stack.label("calc-config", 1).status_code == 202
    failure = wait_for(lambda: [c for c in comments(stack, "calc-config")
                                if "did not open a pull request" in c],
                       message="the failure comment")[0]
    assert f"`{TEST_COMMAND}`" in failure, "its test command ran"
    assert "2 steps, 1 round(s)" in failure, "its max_steps and max_rounds held"
    transcript = stack.transcripts("calc-config")[0].read_text()
    assert '"name": "Edit"' not in transcript, "the run stopped before the fix"
    assert stack.fake.pulls(OWNER, "calc-config") == []
    read = [r for r in stack.fake.api_requests() if r.path.endswith(
        "calc-config/contents/.github/frognano.yml")]
    assert read and all(r.query.get("ref") == "main" and r.status == 200 for r in read)


def test_a_config_on_the_pr_branch_is_not_used(stack: Stack, tmp_path: Path) -> None:
    assert stack.label("calc-pr-config", 1).status_code == 202
    pull = wait_for(lambda: stack.fake.pulls(OWNER, "calc-pr-config"), message="a PR")[0]
    bare = stack.fake.repo(OWNER, "calc-pr-config").bare_path
    # Someone with push access to the PR branch (or a model's earlier change) puts a
    # config there that would refuse any change to calc.py and fail every test run.
    human = tmp_path / "human"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1", str(bare), str(human))
    (human / ".github").mkdir()
    human_push(bare, human, ".github/frognano.yml",
               "protected_paths: [calc.py]\ntest: \"false\"\n")
    assert stack.deliver("pull_request_review", review_payload(
        stack, "calc-pr-config", pull.number, MAINTAINER, "Name the sum.")).status_code == 202
    reply = wait_for(lambda: [c for c in comments(stack, "calc-pr-config", pull.number)
                              if "FrogNano** pushed " in c or "did not" in c],
                     message="the review run's answer")[0]
    assert "FrogNano** pushed " in reply, reply
    review_run = stack.transcripts("calc-pr-config")[1].read_text()
    assert "frognano.yml" in review_run, "the review run's tree had the PR's config"
    assert all(r.query.get("ref") == "main" for r in stack.fake.api_requests()
               if r.path.endswith("calc-pr-config/contents/.github/frognano.yml"))


def test_a_config_that_is_a_directory_gets_a_clear_note(stack: Stack) -> None:
    assert stack.label("calc-config-dir", 1).status_code == 202
    note = wait_for(lambda: [c for c in comments(stack, "calc-config-dir")
                             if "configuration on the default branch is invalid" in c],
                    message="the invalid-config note")[0]
    assert "`.github/frognano.yml` on `main` is a directory, not a file" in note
    assert "/frognano retry" in note
    wait_for(lambda: "invalid `.github/frognano.yml`" in stack.status("calc-config-dir", 1),
             message="the status to say so")
    assert stack.transcripts("calc-config-dir") == [], "no run on the defaults"
    assert stack.fake.pulls(OWNER, "calc-config-dir") == []


def test_a_spent_rate_limit_says_when_to_retry(stack: Stack) -> None:
    reset = stack.fake.rate_limit_next("GET", CONTENTS.format("calc-rate-limited"),
                                       reset_in_s=3600)
    assert stack.label("calc-rate-limited", 1).status_code == 202
    until = datetime.fromtimestamp(reset, UTC).strftime("%H:%M UTC")
    status = wait_for(lambda: "rate limit" in stack.status("calc-rate-limited", 1)
                      and stack.status("calc-rate-limited", 1), message="the status")
    assert f"spent until {until}" in status and f"`/frognano retry` after {until}" in status
    assert stack.transcripts("calc-rate-limited") == []


def test_a_rate_limit_that_resets_soon_is_waited_out(stack: Stack) -> None:
    reset = stack.fake.rate_limit_next("GET", CONTENTS.format("calc-rate-soon"),
                                       reset_in_s=3, status=429)
    assert stack.label("calc-rate-soon", 1).status_code == 202
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-rate-soon"), message="the PR")
    reads = [r for r in stack.fake.api_requests()
             if r.path.endswith("calc-rate-soon/contents/.github/frognano.yml")]
    assert [r.status for r in reads] == [429, 404]
    # Served 2-3 s before the reset (whole seconds); the retry came after it.
    assert reads[1].at - reads[0].at >= 1.5, "it waited for the reset, not hammering"
    assert time.time() >= reset


def test_a_missing_app_permission_is_named_with_the_readmes_list(stack: Stack) -> None:
    # The App was installed with pull requests read-only: all goes well up to the PR.
    stack.fake.installation_permissions["pull_requests"] = "read"
    try:
        assert stack.label("calc-no-permission", 1).status_code == 202
        status = wait_for(lambda: "Resource not accessible" in stack.status(
            "calc-no-permission", 1) and stack.status("calc-no-permission", 1),
            message="the status")
    finally:
        stack.fake.installation_permissions["pull_requests"] = "write"
    assert stack.fake.branch_sha(OWNER, "calc-no-permission", "frognano/issue-1"), "pushed"
    assert "lacks the **pull requests: write** permission" in status
    assert "The GitHub App → Creating the App" in status and "/frognano retry" in status
    assert stack.fake.pulls(OWNER, "calc-no-permission") == []


def test_the_whole_hours_quota_spent_for_seconds_is_waited_out(stack: Stack) -> None:
    """Every REST call of the installation (the receiver's and the worker's) meets the
    spent window until it resets; both wait for the reset, and the run opens its PR."""
    reset = stack.fake.spend_rate_limit(remaining=0, reset_in_s=3)
    assert stack.label("calc-quota", 1).status_code == 202
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-quota"), message="the PR")
    assert time.time() >= reset
    refused = [r for r in stack.fake.api_requests() if r.status == 403 and "calc-quota" in r.path]
    assert refused, "the spent window was met"
    wait_for(lambda: "opened a draft pull request" in stack.status("calc-quota", 1),
             message="the status to say so")


def test_no_tests_at_all_is_said_apart_from_no_test_command(stack: Stack) -> None:
    """A repository with no test file at all is told so (red before: 'no test command
    found'); one whose tests no runner finds still hears that no command was found."""
    for name in NO_TESTS_REPOS:
        assert stack.label(name, 1).status_code == 202
    said = {name: wait_for(lambda name=name: [c for c in comments(stack, name)
                                              if "could not finish" in c],
                           message=f"{name}'s failure comment")[0]
            for name in NO_TESTS_REPOS}
    assert "the repository has no tests (no test file at all), so there is nothing to " \
           "judge a fix by; add tests, or set `test:` in" in said["lib-no-tests"]
    assert "no test command found" not in said["lib-no-tests"]
    assert "no test command found; set `test:` in" in said["lib-no-command"]
    assert "has no tests" not in said["lib-no-command"]
    assert stack.fake.pulls(OWNER, "lib-no-tests") == []
