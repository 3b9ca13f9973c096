"""Each kind of run (workers/run_kinds.py) as data: which trigger makes it, where its
workspace comes from and whose commits it distrusts, how many candidates, its extra stop,
what it records of a CI round, and where it says why nothing was published. The fakes sit
at the process edges only: the fake GitHub (real HTTP), a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.github_api import RepoRef
from bot.github_client import GitHubAppClient
from bot.messages import RunReport
from bot.triggers import Trigger
from solver.agent.result import SolveResult
from solver.agent.run_events import BaselineDone
from solver.defaults import RunDefaults
from solver.models.base import Usage
from solver.policy import bot_identity
from solver.run import Decision
from solver.verdict.repo_tests import TestVerdict
from tests.conftest import make_repo
from tests.support.fake_github.server import FakeGitHub
from tests.support.redis_server import RedisServer
from workers.ci_repair import CiRounds
from workers.context import RunContext
from workers.coordination import IssueCoordinator
from workers.repo_cache import RepoCache
from workers.run_kinds import CiRepairRun, FirstRun, ReviewRun, run_kind
from workers.run_recording import RunRecorder
from workers.runtime import Runtime
from workers.status import RunStatus

OWNER, REPO = "octo", "calc"


def trigger(kind: str, pull_number: int | None = None) -> Trigger:
    return Trigger(delivery_id=f"d-{kind}", installation_id=4242, owner=OWNER, repo=REPO,
                   issue_number=1, kind=kind,  # type: ignore[arg-type]
                   actor="maintainer", pull_number=pull_number, head_sha="a" * 40)


@pytest.mark.parametrize(("kind", "made"), [("label", FirstRun), ("retry", FirstRun),
                                            ("review", ReviewRun), ("ci", CiRepairRun)])
def test_the_trigger_names_the_kind_once(kind: str, made: type) -> None:
    assert type(run_kind(trigger(kind))) is made


@dataclass
class Edges:
    fake: FakeGitHub
    rt: Runtime
    tmp: Path

    def ctx(self, kind: str, pull_number: int | None = None) -> RunContext:
        ran = trigger(kind, pull_number)
        coordinator = IssueCoordinator(self.rt.redis, ran.issue_key)
        return RunContext(self.rt, ran, 1, coordinator, RunStatus.of(self.rt.github, ran, 1),
                          RunRecorder.start(None))


@pytest.fixture
def edges(tmp_path: Path, redis_server: RedisServer) -> Iterator[Edges]:
    with FakeGitHub(tmp_path / "github") as fake:
        fake.add_repo(OWNER, REPO, make_repo(tmp_path / "src", template="calc_repo"))
        fake.add_issue(OWNER, REPO, 1, "add() subtracts")
        github = GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url)
        rt = Runtime(github=github, redis=redis_server.client(),
                     defaults=RunDefaults(model_for=lambda _: None),  # type: ignore[arg-type,return-value]
                     repo_cache=RepoCache(tmp_path / "cache"), work_dir=tmp_path / "work",
                     transcripts_dir=tmp_path / "transcripts", enqueue_run=lambda _: None)
        yield Edges(fake, rt, tmp_path)
    assert not fake.violations, "\n".join(fake.violations)


def test_each_kind_says_where_its_workspace_comes_from_and_whose_commits_it_distrusts(
        edges: Edges) -> None:
    mirror, run_dir = edges.tmp / "mirror", edges.tmp / "run"
    first = FirstRun().workspace(edges.rt, trigger("label"), "main", mirror, run_dir)
    assert (first.source, first.branch, first.own_commits) == (mirror, "main", None)
    bot_email = bot_identity(edges.fake.bot_login)[1]
    for kind in (ReviewRun(), CiRepairRun()):
        space = kind.workspace(edges.rt, trigger("review"), "main", mirror, run_dir)
        assert space.branch == "frognano/issue-1" == kind.branch(trigger("review"), "main")
        assert space.own_commits is not None
        assert (space.own_commits.upstream, space.own_commits.email) == (
            "refs/heads/main", bot_email), "the bot's commits since the default branch"


def test_candidates_stop_and_round_per_kind() -> None:
    assert [k.candidates for k in (FirstRun(), ReviewRun(), CiRepairRun())] == [None, 1, 1]
    assert [k.this_round() for k in (FirstRun(), ReviewRun(), CiRepairRun())] == [
        False, False, True]
    assert FirstRun().stops() is None and ReviewRun().stops() is None
    watch = CiRepairRun().stops()
    assert watch is not None and not watch.passed
    failing = TestVerdict(command="pytest", exit_code=1, timed_out=False, seconds=1.0,
                          output="1 failed")
    watch.emit(BaselineDone(tests=failing))
    assert not watch.passed, "a failure that reproduces: the round goes on"
    watch.emit(BaselineDone(tests=TestVerdict(command="pytest", exit_code=0,
                                              timed_out=False, seconds=1.0, output="")))
    assert watch.passed, "the head's tests pass at baseline: the round stops"


def test_a_person_restarts_the_ci_count_and_a_round_records_its_outcome(
        edges: Edges) -> None:
    rounds = CiRounds(edges.rt.redis, f"{OWNER}/{REPO}#1")
    rounds.start(1, "a" * 40, ["tests"])
    CiRepairRun().finish(edges.rt, trigger("ci"), 1, "pushed")
    assert [(line.number, line.outcome) for line in rounds.lines()] == [(1, "pushed")]
    assert FirstRun().before_run(edges.ctx("label"), edges.tmp / "mirror") is None
    assert rounds.count() == 0, "a label or a review restarts the count"
    FirstRun().finish(edges.rt, trigger("label"), 2, "failed")
    assert [(line.number, line.outcome) for line in rounds.lines()] == [(1, "pushed")]


def failed_run() -> tuple[SolveResult, RunReport, Decision]:
    result = SolveResult(exit_reason="max_rounds", tests_passed=False, diff="",
                         test_command="pytest", baseline=None, final=None, rounds=1, steps=3,
                         usage=Usage(), seconds=1.0)
    report = RunReport(issue_number=1, exit_reason="max_rounds", test_command="pytest",
                       baseline_summary="FAIL", final_summary="FAIL", final_output="1 failed",
                       steps=3, rounds=1, tokens=0, seconds=1.0, model="scripted",
                       transcript_url=None)
    return result, report, Decision("fail", "failed", "`max_rounds`")


def test_a_first_run_says_why_on_the_issue_a_review_on_its_pull(edges: Edges) -> None:
    repo = RepoRef(OWNER, REPO, edges.fake.installation_id)
    pull = edges.rt.github.open_draft_pull(repo, title="t", body="Fixes #1", head="main",
                                           base="main")
    assert FirstRun().not_published(edges.ctx("label"), *failed_run()) == "failed"
    assert ReviewRun().not_published(edges.ctx("review", pull.number), *failed_run()) \
        == "failed"
    on_issue = [c.body for c in edges.fake.comments(OWNER, REPO, 1)
                if "frognano:status" not in c.body]
    on_pull = [c.body for c in edges.fake.comments(OWNER, REPO, pull.number)]
    said = "did not open a pull request: the model had its last round"
    assert len(on_issue) == 1 and said in on_issue[0], "the failure comment, on the issue"
    assert len(on_pull) == 1 and said in on_pull[0], "the same comment, on the review's PR"
