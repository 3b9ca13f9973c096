"""CI repair rounds per PR, counted in a real redis-server: numbered from the last run a
person started, each round once however often its run is delivered, all of them listed;
and the accept step against the fake GitHub: which red checks start a round."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.github_api import RepoRef
from bot.github_client import GitHubAppClient
from bot.messages import NEEDS_HUMAN_LABEL, CiRoundLine
from bot.triggers import Trigger
from solver.defaults import RunDefaults
from tests.conftest import git, make_repo
from tests.support.fake_github.server import FakeGitHub
from tests.support.redis_server import RedisServer
from workers.ci_repair import ROUNDS_TTL, CiRounds, accept_ci
from workers.repo_cache import RepoCache
from workers.runtime import Runtime


def test_rounds_are_counted_once_each_and_listed_with_their_checks(
        redis_server: RedisServer) -> None:
    client = redis_server.client()
    rounds = CiRounds(client, "o/r#1")
    assert rounds.count() == 0 and rounds.lines() == []
    assert rounds.start(3, "a" * 40, ["tests (3.11)"]) == 1
    assert rounds.start(3, "a" * 40, ["tests (3.11)"]) == 1, "a redelivered run: one round"
    assert rounds.start(5, "b" * 40, ["tests (3.11)", "lint"]) == 2
    assert rounds.count() == 2
    rounds.finish(3, "pushed")
    assert rounds.lines() == [CiRoundLine(1, "a" * 40, ("tests (3.11)",), "pushed"),
                              CiRoundLine(2, "b" * 40, ("tests (3.11)", "lint"), "running")]
    assert rounds.current(5) == CiRoundLine(2, "b" * 40, ("tests (3.11)", "lint"))
    assert 0 < client.ttl("frognano:ci-rounds:o/r#1") <= ROUNDS_TTL
    assert CiRounds(client, "o/r#2").count() == 0, "rounds are per issue"


def test_a_run_a_person_started_restarts_the_count_and_keeps_the_list(
        redis_server: RedisServer) -> None:
    rounds = CiRounds(redis_server.client(), "o/r#1")
    rounds.reset()
    assert rounds.lines() == [], "nothing to restart: no marker"
    rounds.start(2, "a" * 40, ["tests"])
    rounds.start(3, "b" * 40, ["tests"])
    rounds.reset()
    assert rounds.count() == 0
    assert rounds.start(5, "c" * 40, ["tests"]) == 1
    assert [(line.number, line.head[0]) for line in rounds.lines()] == [
        (1, "a"), (2, "b"), (1, "c")]
    assert rounds.current(3) == CiRoundLine(2, "b" * 40, ("tests",))


# --- the accept step on a real fake GitHub: which red checks start a round --------------

OWNER, BOT_EMAIL = "octo", "frognano[bot]@users.noreply.github.com"


@dataclass
class Accepting:
    fake: FakeGitHub
    rt: Runtime
    queued: list[dict[str, Any]]

    def red(self, repo: str, delivery: str, head: str | None = None) -> str:
        sha = head or self.fake.branch_sha(OWNER, repo, "frognano/issue-1")
        return accept_ci(self.rt, Trigger(
            delivery_id=delivery, installation_id=self.fake.installation_id, owner=OWNER,
            repo=repo, issue_number=1, kind="ci", actor="github-actions", head_sha=sha))


def bot_branch_repo(path: Path, config: str) -> Path:
    source = make_repo(path, {".github/frognano.yml": config}, template="calc_repo")
    git(source, "checkout", "-q", "-b", "frognano/issue-1")
    (source / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(source, "-c", "user.name=frognano[bot]", "-c", f"user.email={BOT_EMAIL}", "commit",
        "-qam", "fix add")
    git(source, "checkout", "-q", "main")
    return source


@pytest.fixture
def accepting(tmp_path: Path, redis_server: RedisServer) -> Iterator[Accepting]:
    with FakeGitHub(tmp_path / "github") as fake:
        github = GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url)
        for name, config in (("run", "ci: run\n"), ("skip", "ci: skip\n"),
                             ("off", "ci: run\nci_fix_attempts: 0\n")):
            fake.add_repo(OWNER, name, bot_branch_repo(tmp_path / name, config))
            fake.add_issue(OWNER, name, 1, "add() subtracts")
            github.open_draft_pull(RepoRef(OWNER, name, fake.installation_id), title="t",
                                   body="Fixes #1", head="frognano/issue-1", base="main")
        queued: list[dict[str, Any]] = []
        rt = Runtime(github=github, redis=redis_server.client(),
                     defaults=RunDefaults(model_for=lambda _: None),  # type: ignore[arg-type,return-value]
                     repo_cache=RepoCache(tmp_path / "cache"), work_dir=tmp_path / "work",
                     transcripts_dir=tmp_path / "transcripts", enqueue_run=queued.append)
        yield Accepting(fake, rt, queued)
    assert not fake.violations, "\n".join(fake.violations)


def test_a_red_bot_head_is_queued_once_with_its_pull(accepting: Accepting) -> None:
    assert accepting.red("run", "d1") == "queued"
    [run] = accepting.queued
    assert run["kind"] == "ci" and run["pull_number"] == 2 and run["head_sha"]
    assert accepting.red("run", "d2") == "duplicate", "the suite's run, or another suite"


def test_ci_skip_a_zero_budget_and_a_moved_branch_start_nothing(accepting: Accepting) -> None:
    assert accepting.red("skip", "d1") == "ignored"
    assert accepting.red("off", "d2") == "ignored", "ci_fix_attempts: 0, the alias, read"
    assert accepting.red("run", "d3", head="f" * 40) == "ignored"
    assert accepting.queued == []


def test_at_the_round_limit_the_bot_says_so_once_and_labels_the_pr(
        accepting: Accepting) -> None:
    rounds = CiRounds(accepting.rt.redis, f"{OWNER}/run#1")
    rounds.start(1, "a" * 40, ["tests"])
    rounds.start(2, "b" * 40, ["tests"])
    assert accepting.red("run", "d1") == "gave_up"
    assert accepting.queued == []
    [said] = [c.body for c in accepting.fake.comments(OWNER, "run", 2)]
    assert "stopped repairing" in said and "after 2 CI repair round(s)" in said
    assert NEEDS_HUMAN_LABEL in accepting.fake.issue_labels(OWNER, "run", 2)
    assert accepting.red("run", "d2") == "duplicate", "said once for this head"


def test_a_persons_review_during_the_loop_stops_it(accepting: Accepting) -> None:
    head = accepting.fake.branch_sha(OWNER, "run", "frognano/issue-1")
    assert head is not None
    checks = accepting.fake.checks
    checks.add_review(accepting.fake, OWNER, "run", 2, accepting.fake.bot_login, head,
                      "COMMENTED")
    checks.add_review(accepting.fake, OWNER, "run", 2, "maintainer", "0" * 40)
    assert accepting.red("run", "d1") == "queued", "the bot's own, and one from before"
    accepting.rt.redis.flushall()
    checks.add_review(accepting.fake, OWNER, "run", 2, "maintainer", head, "APPROVED")
    assert accepting.red("run", "d2") == "ignored"
    assert len(accepting.queued) == 1
