"""A first run's publishing (`publish_pull`) against a cancel, with the real pieces: the
fake GitHub (git over smart HTTP, OpenAPI-checked), a real redis-server, real git, and
the cancel taken by the real accept step (`accept_trigger`) as the control worker does.

The moment is the fake GitHub's own: `on_next` runs the cancel when the bot's push (its
ref write through the Git Data API: `POST …/git/refs` for a first run, `PATCH
…/git/refs/heads/…` on top of a PR branch) reaches GitHub, before GitHub serves it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.github_api import RepoRef
from bot.github_client import GitHubAppClient
from bot.triggers import Trigger
from solver.defaults import RunDefaults
from solver.hostgit import HostRepo
from solver.policy import branch_for
from solver.replay import JudgeReplay
from solver.verdict.verdict_run import Judgement
from tests.conftest import git, make_repo
from tests.support.fake_github.server import FakeGitHub
from tests.support.redis_server import start_redis
from workers.accept import accept_trigger
from workers.context import RunContext
from workers.coordination import IssueCoordinator
from workers.publish.pull import DraftPull, publish_pull
from workers.publish.review import BranchTaken, Pushed, push_on_top
from workers.repo_cache import RepoCache
from workers.run_recording import RunRecorder
from workers.runtime import Runtime
from workers.status import RunStatus

OWNER, REPO, MAINTAINER = "octo", "calc", "maintainer"
READ_REF = rf"^/repos/{OWNER}/{REPO}/git/ref/heads/"  # the head read before a push
CREATE_REF = rf"^/repos/{OWNER}/{REPO}/git/refs$"  # a first run's push: a new branch
MOVE_REF = rf"^/repos/{OWNER}/{REPO}/git/refs/heads/"  # a push on top: a fast-forward


@dataclass
class World:
    fake: FakeGitHub
    rt: Runtime
    host: HostRepo
    coordinator: IssueCoordinator
    generation: int  # the run's, assigned as the accept step does
    tmp: Path

    def cancel(self) -> None:
        """`/frognano cancel` by a maintainer, through the accept step."""
        comment = self.fake.add_comment(OWNER, REPO, 1, "/frognano cancel", MAINTAINER)
        assert accept_trigger(self.rt, trigger("cancel", comment.id)) == "cancelled"

    def publish(self) -> str:
        label = trigger("label")
        ctx = RunContext(self.rt, label, self.generation, self.coordinator,
                         RunStatus.of(self.rt.github, label, self.generation),
                         RunRecorder.start(None))
        return publish_pull(ctx, self.host, self.host.snapshot(), DraftPull(
            title="[FrogNano] add", body="Fixes #1", base="main", message="fix add"))

    def status(self) -> str:
        bodies = [c.body for c in self.fake.comments(OWNER, REPO, 1)
                  if "frognano:status" in c.body]
        assert len(bodies) == 1, "one status comment, edited in place"
        return bodies[0]

    def pushes(self) -> list[int]:
        """The statuses of the bot's ref writes (0: the answer was lost), and never a
        git push: the bot's commits are made through the API, signed by GitHub."""
        assert not [r for r in self.fake.requests if r.path.endswith("/git-receive-pack")]
        return [r.status for r in self.fake.requests if r.method in ("POST", "PATCH")
                and "/git/refs" in r.path]


def trigger(kind: str, comment_id: int | None = None) -> Trigger:
    return Trigger(delivery_id=f"{kind}-{comment_id}", installation_id=4242, owner=OWNER,
                   repo=REPO, issue_number=1, kind=kind,  # type: ignore[arg-type]
                   actor=MAINTAINER, comment_id=comment_id)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with FakeGitHub(tmp_path / "github") as fake:
        redis = start_redis(tmp_path / "redis")
        try:
            fake.add_repo(OWNER, REPO, make_repo(tmp_path / "src", template="calc_repo"))
            fake.add_issue(OWNER, REPO, 1, "add() subtracts")
            fake.set_permission(OWNER, REPO, MAINTAINER, "write")
            github = GitHubAppClient(fake.app_id, fake.private_key_pem, fake.api_url)
            rt = Runtime(github=github, redis=redis.client(),
                         defaults=RunDefaults(model_for=lambda _: None),  # type: ignore[arg-type,return-value]
                         repo_cache=RepoCache(tmp_path / "cache"), work_dir=tmp_path / "work",
                         transcripts_dir=tmp_path / "transcripts",
                         enqueue_run=lambda _: None)
            repo = RepoRef(OWNER, REPO, fake.installation_id)
            mirror = rt.repo_cache.refresh(github.clone_url(repo),
                                           github.installation_token(repo))
            host = HostRepo.create(mirror, "main", tmp_path / "run" / "git",
                                   tmp_path / "run" / "workspace")
            calc = host.work_tree / "calc.py"
            calc.write_text(calc.read_text().replace("return a - b", "return a + b"))
            # The run, accepted as the accept step does: its generation, its status.
            assert accept_trigger(rt, trigger("label")) == "queued"
            coordinator = IssueCoordinator(rt.redis, f"{OWNER}/{REPO}#1")
            yield World(fake, rt, host, coordinator, coordinator.current_generation(),
                        tmp_path)
        finally:
            redis.stop()
    assert not fake.violations, "\n".join(fake.violations)


def test_a_cancel_before_the_push_pushes_nothing_and_opens_no_pr(world: World) -> None:
    world.cancel()  # after the run's last step, before its publishing
    assert world.publish() == "cancelled"
    assert world.pushes() == []
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) is None
    assert world.fake.pulls(OWNER, REPO) == []
    assert f"cancelled by @{MAINTAINER}" in world.status()
    assert "Nothing was pushed" in world.status()


def test_a_cancel_during_a_failed_push_try_stops_the_retries(world: World) -> None:
    world.fake.on_next("POST", CREATE_REF, world.cancel)
    world.fake.fail_next("POST", CREATE_REF, 500)
    assert world.publish() == "cancelled"
    assert world.pushes() == [500], "no try after the cancel"
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) is None
    assert world.fake.pulls(OWNER, REPO) == []
    assert "Nothing was pushed" in world.status()


def test_a_cancel_once_github_accepted_the_push_finishes_the_pr(world: World) -> None:
    world.fake.on_next("POST", CREATE_REF, world.cancel)
    assert world.publish() == "pr_opened"
    assert world.pushes() == [201]
    pulls = world.fake.pulls(OWNER, REPO)
    assert len(pulls) == 1 and pulls[0].head == branch_for(1)
    assert pulls[0].requested_reviewers == [MAINTAINER], "every PR step ran"
    assert "needs-human-review" in world.fake.issue_labels(OWNER, REPO, pulls[0].number)
    status = world.status()
    assert "arrived after GitHub had accepted the push" in status
    assert f"cancelled by @{MAINTAINER}" in status and f"/pull/{pulls[0].number}" in status
    assert "Nothing was pushed" not in status


def no_replay(at_head: HostRepo, tree: str) -> Judgement:
    raise AssertionError("the branch did not move: nothing to replay or re-test")


def push_review_change(world: World, meanwhile: Callable[[], None], *,
                       judge: JudgeReplay = no_replay, replay: bool = True) -> Pushed:
    """A review's change on the PR branch (made here by a first publish), pushed on top;
    `meanwhile` runs between the two. `replay` False: a CI repair round's push."""
    assert world.publish() == "pr_opened"
    meanwhile()
    github, repo = world.rt.github, RepoRef(OWNER, REPO, world.fake.installation_id)
    mirror = world.rt.repo_cache.refresh(github.clone_url(repo),
                                         github.installation_token(repo))
    host = HostRepo.create(mirror, branch_for(1), world.tmp / "review" / "git",
                           world.tmp / "review" / "workspace")
    (host.work_tree / "NOTES.md").write_text("the review's change\n")
    return push_on_top(github=github, cache=world.rt.repo_cache, repo=repo, host=host,
                       snapshot=host.snapshot(), branch=branch_for(1), message="note",
                       judge_replay=judge, replay=replay)


def test_a_failed_push_on_an_unmoved_branch_is_retried_not_replayed(world: World) -> None:
    pushed = push_review_change(world, lambda: world.fake.fail_next(
        "PATCH", MOVE_REF, 500))
    assert world.pushes() == [201, 500, 200]  # the first publish, the review's, its retry
    assert pushed.replayed_on is None and pushed.judgement is None
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) == pushed.commit


def test_a_push_whose_answer_was_lost_is_not_pushed_again(world: World) -> None:
    """GitHub took the push but the connection dropped before its answer: the branch
    already is the commit, so it is not replayed (`no_replay` would raise)."""
    pushed = push_review_change(world, lambda: world.fake.drop_next(
        "PATCH", MOVE_REF, after_processing=True))
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) == pushed.commit
    assert pushed.replayed_on is None
    assert "dropped" in [r.kind for r in world.fake.requests]
    assert world.pushes() == [201, 0], "the lost write was looked up, not sent again"


def test_a_cancel_during_a_push_that_landed_unanswered_still_finishes_the_pr(
        world: World) -> None:
    """The push took effect but its answer was lost, and the cancel came meanwhile: the
    branch is pushed, so the PR steps finish rather than leave it without a PR."""
    world.fake.on_next("POST", CREATE_REF, world.cancel)
    world.fake.drop_next("POST", CREATE_REF, after_processing=True)
    assert world.publish() == "pr_opened"
    pulls = world.fake.pulls(OWNER, REPO)
    assert len(pulls) == 1 and pulls[0].requested_reviewers == [MAINTAINER]
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) is not None
    assert "arrived after GitHub had accepted the push" in world.status()


def test_the_host_knows_the_commit_github_made_and_it_is_verified(world: World) -> None:
    """No git push: GitHub made the commit (signed), and the run's git directory fetched
    it, so its branch is GitHub's commit, whose tree is the snapshot's."""
    snapshot = world.host.snapshot()
    assert world.publish() == "pr_opened"
    head = world.fake.branch_sha(OWNER, REPO, branch_for(1))
    assert head is not None
    assert git(world.host.git_dir, "rev-parse", f"refs/heads/{branch_for(1)}").strip() == head
    assert git(world.host.git_dir, "rev-parse", f"{head}^{{tree}}").strip() == snapshot.tree
    bare = world.fake.repo(OWNER, REPO).bare_path
    assert head in (bare / "fake-verified-commits").read_text().split()
    assert world.pushes() == [201]


def test_a_review_change_on_a_deleted_branch_makes_it_again(world: World) -> None:
    """A person deleted the PR branch during the review run: the ref update finds no
    branch (422 "Reference does not exist"), and the change is pushed as a new one, as a
    git push would have made it."""
    bare = world.fake.repo(OWNER, REPO).bare_path
    first: list[str] = []

    def delete() -> None:
        first.append(world.fake.branch_sha(OWNER, REPO, branch_for(1)) or "")
        git(bare, "update-ref", "-d", f"refs/heads/{branch_for(1)}")

    pushed = push_review_change(world, lambda: world.fake.on_next("PATCH", MOVE_REF,
                                                                  delete))
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) == pushed.commit
    assert git(bare, "rev-parse", f"{pushed.commit}^").strip() == first[0]
    assert world.pushes() == [201, 422, 201]


def person_commit(world: World) -> Callable[[], str]:
    """A maintainer's push on the PR branch, straight to GitHub's git: its sha."""
    def push() -> str:
        work = world.tmp / "person"
        bare = world.fake.repo(OWNER, REPO).bare_path
        git(world.tmp, "clone", "-q", "--branch", branch_for(1), str(bare), str(work))
        (work / "PERSON.md").write_text("a maintainer's commit\n")
        git(work, "add", "PERSON.md")
        git(work, "-c", "user.name=M", "-c", "user.email=m@example.com", "commit", "-qm", "m")
        git(work, "push", "-q", "origin", f"HEAD:{branch_for(1)}")
        return git(work, "rev-parse", "HEAD").strip()
    return push


def rewind(world: World, into: list[str]) -> Callable[[], None]:
    """A person resets the PR branch to the parent of its head (drops the bot's commit,
    as after a leak) and force-pushes; the commit it now points at goes to `into`."""
    def reset() -> None:
        bare = world.fake.repo(OWNER, REPO).bare_path
        parent = git(bare, "rev-parse", f"{branch_for(1)}^").strip()
        git(bare, "update-ref", f"refs/heads/{branch_for(1)}", parent)
        into.append(parent)
    return reset


def test_a_ci_rounds_push_on_a_persons_push_pushes_nothing(world: World) -> None:
    """Issue 30 §3: a maintainer pushes while the round's push is in flight (GitHub
    refuses the fast-forward): no replay onto the person's commit, nothing pushed."""
    person: list[str] = []
    with pytest.raises(BranchTaken) as taken:
        push_review_change(world, lambda: world.fake.on_next(
            "PATCH", MOVE_REF, lambda: person.append(person_commit(world)())), replay=False)
    assert taken.value.head == person[0]
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) == person[0]
    assert world.pushes() == [201, 422], "the refused fast-forward, and no replay's push"


def test_a_ci_rounds_push_on_a_rewound_branch_pushes_nothing(world: World) -> None:
    """The person dropped the bot's commit: a fast-forward from there would succeed and
    bring it back. The head read before the write sees it; nothing is written."""
    rewound: list[str] = []
    with pytest.raises(BranchTaken) as taken:
        push_review_change(world, lambda: world.fake.on_next("GET", READ_REF,
                                                             rewind(world, rewound)),
                           replay=False)
    assert taken.value.head == rewound[0]
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) == rewound[0]
    assert world.pushes() == [201], "no ref write at all"


def test_a_ci_rounds_push_on_a_deleted_branch_pushes_nothing(world: World) -> None:
    """Issue 30 §3: a person deleted `frognano/issue-N` while a CI repair round ran. The
    head read before the write finds no branch: the round stops, and does not make the
    branch again as a review's push would (no person asked for the round)."""
    bare = world.fake.repo(OWNER, REPO).bare_path
    with pytest.raises(BranchTaken) as taken:
        push_review_change(world, lambda: world.fake.on_next("GET", READ_REF, lambda: git(
            bare, "update-ref", "-d", f"refs/heads/{branch_for(1)}")), replay=False)
    assert taken.value.head is None
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) is None, "made again"
    assert world.pushes() == [201], "no ref write at all"


def test_a_ci_rounds_write_on_a_branch_deleted_under_it_makes_no_branch(world: World) -> None:
    """The deletion lands between the head read and the ref write: GitHub answers the
    fast-forward 404, and a CI repair round stops there instead of making the branch
    again (a review's push would: a person asked for it)."""
    bare = world.fake.repo(OWNER, REPO).bare_path
    with pytest.raises(BranchTaken) as taken:
        push_review_change(world, lambda: world.fake.on_next("PATCH", MOVE_REF, lambda: git(
            bare, "update-ref", "-d", f"refs/heads/{branch_for(1)}")), replay=False)
    assert taken.value.head is None
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) is None, "made again"


class Judged(Exception):
    """The replay's verdict was asked for: the head it was asked on."""


def judged(at_head: HostRepo, tree: str) -> Judgement:
    raise Judged(at_head.base)


def test_a_review_on_a_rewound_branch_is_replayed_not_fast_forwarded(world: World) -> None:
    """A review's change on a branch a person rewound is replayed on what they left (and
    judged there), never fast-forwarded over it with the dropped commit."""
    rewound: list[str] = []
    with pytest.raises(Judged) as asked:
        push_review_change(world, lambda: world.fake.on_next("GET", READ_REF,
                                                             rewind(world, rewound)),
                           judge=judged)
    assert asked.value.args == (rewound[0],)
    assert world.fake.branch_sha(OWNER, REPO, branch_for(1)) == rewound[0]
    assert world.pushes() == [201]
