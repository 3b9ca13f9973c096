"""From label to draft PR, end to end: signed webhooks into the real receiver, a real
redis-server, real Celery workers in their own processes, real bubblewrap, real git
pushes into the local fake GitHub (OpenAPI-checked), and the scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from bot.app import create_app
from bot.events import sign
from bot.settings import BotSettings
from tests.conftest import git, make_repo
from tests.fake_github.server import FakeGitHub
from tests.redis_server import RedisServer, start_redis
from tests.sandbox_support import HAVE_BWRAP
from workers.models.scripted import final_answer, think_and_call

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

SECRET = "webhook-secret"
OWNER = "octo"
MAINTAINER, READER = "maintainer", "drive-by"
# One script for every run; what it does depends on the repository it finds, so one
# resident worker model serves all scenarios.
SCRIPT = [
    think_and_call("Look around, including what the sandbox exposes.", "Bash",
                   command="env; cat .git/config; ls -la /frognano; cat /proc/1/environ | "
                           "tr '\\0' '\\n'; git remote -v"),
    think_and_call("add uses minus.", "Edit", file_path="calc.py",
                   old_string="return a - b", new_string="return a + b"),
    think_and_call("Some repos want CI tweaks.", "Bash",
                   command="if [ -f EVIL ]; then mkdir -p .github/workflows && "
                           "printf 'on: push\\n' > .github/workflows/evil.yml; fi; true"),
    final_answer("Fixed `add` to return the sum."),
]


class Stack:
    def __init__(self, fake: FakeGitHub, redis: RedisServer, client: TestClient,
                 state: Path) -> None:
        self.fake, self.redis, self.client, self.state = fake, redis, client, state

    def deliver(self, event: str, payload: dict[str, Any], delivery: str | None = None,
                signature: str | None = None) -> Any:
        body = json.dumps(payload).encode()
        return self.client.post("/webhooks/github", content=body, headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature or sign(SECRET, body),
            "Content-Type": "application/json"})

    def label(self, repo: str, number: int, actor: str = MAINTAINER, **kw: Any) -> Any:
        return self.deliver("issues", {
            "action": "labeled", "label": {"name": "frognano"},
            "issue": issue_json(number), "repository": repo_json(repo),
            "sender": user_json(actor), "installation": {"id": self.fake.installation_id},
        }, **kw)

    def retry(self, repo: str, number: int, actor: str, text: str = "") -> Any:
        comment = self.fake.add_comment(OWNER, repo, number, f"/frognano retry {text}", actor)
        return self.deliver("issue_comment", {
            "action": "created", "issue": issue_json(number),
            "comment": {"id": comment.id, "body": comment.body, "user": user_json(actor)},
            "repository": repo_json(repo), "sender": user_json(actor),
            "installation": {"id": self.fake.installation_id},
        })

    def status(self, repo: str, number: int) -> str:
        mine = [c.body for c in self.fake.comments(OWNER, repo, number)
                if "frognano:status" in c.body]
        assert len(mine) <= 1, "one status comment, edited in place"
        return mine[0] if mine else ""

    def transcripts(self, repo: str) -> list[Path]:
        return sorted((self.state / "transcripts" / OWNER / repo).glob("*.jsonl"))


def user_json(login: str) -> dict[str, Any]:
    return {"login": login, "id": abs(hash(login)) % 10**6, "type": "User"}


def issue_json(number: int) -> dict[str, Any]:
    return {"number": number, "title": "add() subtracts", "body": "", "state": "open",
            "user": user_json("octocat")}


def repo_json(name: str) -> dict[str, Any]:
    return {"name": name, "full_name": f"{OWNER}/{name}", "owner": user_json(OWNER)}


def wait_for(what: Callable[[], Any], timeout: float = 90, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {message or what}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("stack")
    fake = FakeGitHub(root / "github").start()
    redis = start_redis(root / "redis")
    script = root / "script.json"
    script.write_text(json.dumps(SCRIPT))
    work = Path(f"/var/tmp/frognano-e2e-{uuid.uuid4().hex[:8]}")
    env = {**os.environ, "GITHUB_APP_ID": str(fake.app_id),
           "GITHUB_PRIVATE_KEY": fake.private_key_pem, "GITHUB_API_URL": fake.api_url,
           "GITHUB_WEBHOOK_SECRET": SECRET, "FROGNANO_REDIS_URL": redis.url,
           "FROGNANO_MODEL": f"scripted:{script}", "FROGNANO_STATE_DIR": str(root / "state"),
           "FROGNANO_WORK_DIR": str(work), "FROGNANO_BOT_LOGIN": fake.bot_login,
           "FROGNANO_PUBLIC_URL": "https://frognano.example"}
    workers = [subprocess.Popen([sys.executable, "-m", "frognano", "worker", *extra],
                                env=env, stdout=(root / f"worker{i}.log").open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
               for i, extra in enumerate([[], ["--control"]])]
    settings = BotSettings(GITHUB_WEBHOOK_SECRET=SECRET, FROGNANO_REDIS_URL=redis.url,
                           FROGNANO_BOT_LOGIN=fake.bot_login)
    for name in ("calc", "calc-evil", "calc-reader"):
        extra = {"EVIL": "x"} if name == "calc-evil" else {}
        fake.add_repo(OWNER, name, _calc_tree(root / name, extra))
        fake.add_issue(OWNER, name, 1, "add() subtracts", "`add(2, 3)` returns -1.")
        fake.set_permission(OWNER, name, MAINTAINER, "write")
        fake.set_permission(OWNER, name, READER, "read")
    try:
        with TestClient(create_app(settings, bot_login=fake.bot_login)) as client:
            yield Stack(fake, redis, client, root / "state")
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)  # warm shutdown: running tasks finish
        for worker in workers:
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        redis.stop()
        fake.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
        for log in sorted(root.glob("worker*.log")):
            print(f"--- {log.name}\n{log.read_text()[-3000:]}")
    assert not fake.violations, "\n".join(fake.violations)


def _calc_tree(path: Path, extra: dict[str, str]) -> Path:
    return make_repo(path, extra, template="calc_repo")


def test_label_opens_a_draft_pr_whose_branch_passes_the_tests(stack: Stack,
                                                              tmp_path: Path) -> None:
    assert stack.label("calc", 1).status_code == 202
    pulls = wait_for(lambda: stack.fake.pulls(OWNER, "calc"), message="a draft PR")
    assert len(pulls) == 1
    pull = pulls[0]
    assert pull.draft and pull.head == "frognano/issue-1" and pull.base == "main"
    assert pull.title == "[FrogNano] add() subtracts"
    assert pull.body.startswith("Fixes #1\n") and "Needs human review" in pull.body
    assert "tests/test_calc.py::test_add: failed → passed" in pull.body
    assert "https://frognano.example/runs/octo/calc/1/1" in pull.body
    wait_for(lambda: pull.requested_reviewers == [MAINTAINER], message="a review request")
    wait_for(lambda: "needs-human-review" in stack.fake.issue_labels(OWNER, "calc", pull.number),
             message="the review label")
    assert "needs-human-review" in stack.fake.labels(OWNER, "calc")
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


def test_retry_from_a_writer_updates_the_same_pr(stack: Stack) -> None:
    wait_for(lambda: stack.fake.pulls(OWNER, "calc"), message="the first PR")
    first_sha = stack.fake.branch_sha(OWNER, "calc", "frognano/issue-1")
    assert stack.retry("calc", 1, MAINTAINER, "keep it short").status_code == 202
    wait_for(lambda: len(stack.transcripts("calc")) == 2 and "(attempt 2)" in stack.status(
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
