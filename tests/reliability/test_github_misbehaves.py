"""Scenario 3: GitHub misbehaves. The fake GitHub answers 5xx, 403 secondary rate limits
with Retry-After, 422 on draft PR creation, and drops connections (before and after it
acted on the request). The bot retries with backoff or reports clearly, and never posts
a second comment or PR.

Each case has its own repository, so its faults hit only its own run; the runs go at
once on two run workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from solver.models.scripted import final_answer, think_and_call
from tests.reliability.conftest import Recorder
from tests.reliability.stack import OWNER, Stack, StackOptions, running_stack, wait_for
from tests.support.fake_github.server import FakeGitHub
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

SCRIPT = [think_and_call("add uses minus.", "Edit", file_path="calc.py",
                         old_string="return a - b", new_string="return a + b"),
          final_answer("Fixed `add`.")]
RETRY_AFTER_S = 2
DRAFT_REFUSED = "Draft pull requests are not supported in this repository."
INJECTED_STATUSES = (0, 403, 422)  # 0: a dropped connection, as the fake records it


@dataclass
class Case:
    repo: str
    title: str
    inject: Callable[[FakeGitHub, str], None]  # (fake, "/repos/octo/<repo>")
    opens_pr: bool  # False: the run must end with a clear failure report instead


def _server_errors(fake: FakeGitHub, base: str) -> None:
    fake.fail_next("POST", f"^{base}/issues/1/comments$", 502, times=2)  # queued status
    fake.fail_next("GET", f"^{base}$", 503)
    fake.fail_next("POST", f"^{base}/pulls$", 500)
    fake.fail_next("GET", f"^{base}/pulls$", 504)


def _rate_limited(fake: FakeGitHub, base: str) -> None:
    for method, path in (("POST", "/issues/1/reactions"), ("POST", "/pulls"),
                         ("PATCH", r"/issues/comments/\d+")):
        fake.fail_next(method, f"^{base}{path}$", 403, {"Retry-After": str(RETRY_AFTER_S)},
                       message="You have exceeded a secondary rate limit. Please wait a "
                               "few minutes before you try again.")


def _draft_refused(fake: FakeGitHub, base: str) -> None:
    fake.fail_next("POST", f"^{base}/pulls$", 422, message=DRAFT_REFUSED)


def _dropped_before(fake: FakeGitHub, base: str) -> None:
    for method, path in (("POST", "/issues/1/comments"), ("GET", ""), ("POST", "/pulls"),
                         ("POST", "/issues/1/reactions")):
        fake.drop_next(method, f"^{base}{path}$")


def _dropped_after(fake: FakeGitHub, base: str) -> None:
    # GitHub did the work, the answer was lost: a blind retry would duplicate it.
    for method, path in (("POST", "/issues/1/comments"), ("POST", "/pulls"),
                         ("POST", r"/issues/\d+/labels")):
        fake.drop_next(method, f"^{base}{path}$", after_processing=True)


def _push_dropped(fake: FakeGitHub, base: str) -> None:
    # The push is a ref write through the Git Data API (the commit GitHub signs): it loses
    # its connection twice before GitHub acts; each write is one try, the push's own
    # retries (PUSH_RETRY, 3 tries) carry it through.
    fake.drop_next("POST", f"^{base}/git/refs$", times=2)


CASES = [
    Case("calc-5xx", "5xx errors (502, 503, 500, 504)", _server_errors, True),
    Case("calc-403", "403 secondary rate limit with Retry-After", _rate_limited, True),
    Case("calc-422", "422 on draft PR creation", _draft_refused, False),
    Case("calc-drop", "dropped connections, before GitHub acted", _dropped_before, True),
    Case("calc-drop-after", "dropped connections, after GitHub acted", _dropped_after, True),
    Case("calc-drop-push", "dropped connection during the push", _push_dropped, True),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    options = StackOptions(SCRIPT, run_workers=2)
    with running_stack(tmp_path_factory.mktemp("misbehaves"), options) as stack:
        for case in CASES:
            stack.add_calc_repo(case.repo)
        yield stack


def _final(stack: Stack, repo: str) -> str:
    status = stack.status(repo, 1)
    return status if ("opened a draft" in status or "could not finish" in status) else ""


def _requests_for(stack: Stack, repo: str) -> list[tuple[str, str, int, float]]:
    base = f"/repos/{OWNER}/{repo}"
    return [(r.method, r.path, r.status, r.at) for r in stack.fake.requests
            if r.path == base or r.path.startswith(base + "/")]


def _retry_gaps_after_rate_limit(requests: list[tuple[str, str, int, float]]) -> list[float]:
    """Seconds between each 403 and the next request to the same route."""
    gaps = []
    for index, (method, path, status, at) in enumerate(requests):
        if status == 403:
            later = next((r for r in requests[index + 1:] if (r[0], r[1]) == (method, path)),
                         None)
            if later is not None:
                gaps.append(later[3] - at)
    return gaps


def test_github_misbehaves(stack: Stack, scorecard: Recorder) -> None:
    records = {case.repo: scorecard(
        f"3-github-{case.repo.removeprefix('calc-')}", f"GitHub misbehaves: {case.title}",
        "retries with backoff (honouring Retry-After) or a clear failure report on the "
        "issue; never a duplicate comment or PR") for case in CASES}
    for case in CASES:
        case.inject(stack.fake, f"/repos/{OWNER}/{case.repo}")
    started = time.monotonic()
    for case in CASES:
        assert stack.label(case.repo, 1).status_code == 202
    finished: dict[str, float] = {}

    def all_final() -> bool:
        for case in CASES:
            if case.repo not in finished and _final(stack, case.repo):
                finished[case.repo] = time.monotonic() - started
        return len(finished) == len(CASES)

    wait_for(all_final, timeout=150, message="every case's final status")
    time.sleep(2)  # a late duplicate would show up now
    problems = []
    for case in CASES:
        requests = _requests_for(stack, case.repo)
        status = stack.status_comments(case.repo, 1)
        pulls = stack.fake.pulls(OWNER, case.repo)
        other_comments = [c for c in stack.fake.comments(OWNER, case.repo, 1)
                          if "frognano:status" not in c.body]
        injected = [r for r in stack.fake.requests if r.path.startswith(
            (f"/repos/{OWNER}/{case.repo}", f"/{OWNER}/{case.repo}.git"))
            and (r.status in INJECTED_STATUSES or r.status >= 500)]
        gaps = _retry_gaps_after_rate_limit(requests)
        records[case.repo].observed = {
            "faults served": len(injected), "status comments": len(status),
            "other comments": len(other_comments), "PRs": len(pulls),
            "seconds to final status": finished[case.repo],
            **({"shortest wait after a 403 (s)": min(gaps)} if gaps else {}),
            "final status": status[0].split("**FrogNano** ", 1)[-1][:280] if status
            else "none"}
        if len(status) != 1:
            problems.append(f"{case.repo}: {len(status)} status comments")
        if case.opens_pr:
            if len(pulls) != 1 or not pulls[0].draft or "opened a draft" not in status[0]:
                problems.append(f"{case.repo}: expected one draft PR, got {len(pulls)}; "
                                f"status {status}")
            if other_comments:
                problems.append(f"{case.repo}: unexpected comments {other_comments}")
        else:
            if pulls or DRAFT_REFUSED not in status[0] or "422" not in status[0]:
                problems.append(f"{case.repo}: expected a clear report and no PR; "
                                f"PRs {len(pulls)}, status {status}")
        if gaps and min(gaps) < RETRY_AFTER_S - 0.05:
            problems.append(f"{case.repo}: retried {min(gaps):.2f} s after a 403 with "
                            f"Retry-After: {RETRY_AFTER_S}")
        if case.repo == "calc-403" and len(gaps) < 3:
            problems.append(f"{case.repo}: every rate-limited request is retried: {gaps}")
    assert not problems, "\n".join(problems)
