"""The whole bot on one machine, for end-to-end and reliability tests.

A local fake GitHub (OpenAPI-checked), a real redis-server, real Celery worker
processes (`python -m frognano worker`, N run workers plus one control worker), the
receiver in process through starlette's TestClient, and a `scripted:FILE` model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from starlette.testclient import TestClient

from bot.app import create_app
from bot.settings import BotSettings
from bot.webhook_events import sign
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import make_repo
from tests.support.fake_github.server import FakeGitHub
from tests.support.redis_server import RedisServer, start_redis

SECRET = "webhook-secret-of-at-least-32-characters"
OWNER = "octo"
MAINTAINER, READER = "maintainer", "drive-by"
CALC_ISSUE = ("add() subtracts", "`add(2, 3)` returns -1.")


# The one fix every calc scenario ends with.
FIX_CALC = think_and_call("add uses minus.", "Edit", file_path="calc.py",
                          old_string="return a - b", new_string="return a + b")


def slow_fix_script(command: str, reasoning: str = "Look around first.") -> list[str]:
    """A run that sits in one tool call (where a scenario can catch it mid-run), then fixes
    calc and stops."""
    return [think_and_call(reasoning, "Bash", command=command), FIX_CALC,
            final_answer("Fixed `add`.")]


@dataclass
class StackOptions:
    # Assistant texts, replayed from the start by every conversation (or one such list
    # per seed: frognano/models.py).
    script: list[str] | list[list[str]]
    run_workers: int = 1
    token_ttl: timedelta = timedelta(hours=1)
    env: dict[str, str] = field(default_factory=dict)  # extra worker environment
    # The module started as a worker: `frognano`, or a test wrapper that adjusts timings
    # (tests.reliability.fast_recovery_worker).
    worker_module: str = "frognano"
    # Every scenario checks each request against GitHub's OpenAPI description, except the
    # load scenario: the check costs about 40 % of each fake request, and there the fake
    # must keep up with 1,000 accepts.
    validate_openapi: bool = True


class Stack:
    def __init__(self, fake: FakeGitHub, redis: RedisServer, client: TestClient,
                 root: Path, workers: list[subprocess.Popen[bytes]], env: dict[str, str]
                 ) -> None:
        self.fake, self.redis, self.client = fake, redis, client
        self.root, self.state = root, root / "state"
        self.workers, self.env = workers, env

    @property
    def run_workers(self) -> list[subprocess.Popen[bytes]]:
        return self.workers[:-1]  # the control worker is started last

    # -- setup ----------------------------------------------------------------------------

    def add_calc_repo(self, name: str, extra: dict[str, str] | None = None, *,
                      issue: tuple[str, str] = CALC_ISSUE, issues: int = 1) -> None:
        """The calculator repository (`add` broken), with issues 1..`issues`."""
        self.fake.add_repo(OWNER, name, make_repo(self.root / "repos" / name, extra or {},
                                                  template="calc_repo"))
        for number in range(1, issues + 1):
            self.fake.add_issue(OWNER, name, number, *issue)
        self.fake.set_permission(OWNER, name, MAINTAINER, "write")
        self.fake.set_permission(OWNER, name, READER, "read")

    # -- webhooks -------------------------------------------------------------------------

    def signed(self, event: str, payload: dict[str, Any], delivery: str | None = None,
               signature: str | None = None) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(payload).encode()
        return body, {
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature or sign(SECRET, body),
            "Content-Type": "application/json"}

    def deliver(self, event: str, payload: dict[str, Any], delivery: str | None = None,
                signature: str | None = None) -> Any:
        body, headers = self.signed(event, payload, delivery, signature)
        return self.client.post("/webhooks/github", content=body, headers=headers)

    def label_payload(self, repo: str, number: int, actor: str = MAINTAINER
                      ) -> dict[str, Any]:
        # Each event its own body, as on GitHub: the receiver drops a repeated signed body.
        return {"action": "labeled", "label": {"name": "frognano"},
                "issue": {**issue_json(number), "updated_at": str(time.time_ns())},
                "repository": repo_json(repo),
                "sender": user_json(actor), "installation": {"id": self.fake.installation_id}}

    def label(self, repo: str, number: int, actor: str = MAINTAINER, **kw: Any) -> Any:
        return self.deliver("issues", self.label_payload(repo, number, actor), **kw)

    def retry_payload(self, repo: str, number: int, actor: str, text: str = ""
                      ) -> dict[str, Any]:
        comment = self.fake.add_comment(OWNER, repo, number, f"/frognano retry {text}", actor)
        return {"action": "created", "issue": issue_json(number),
                "comment": {"id": comment.id, "body": comment.body, "user": user_json(actor)},
                "repository": repo_json(repo), "sender": user_json(actor),
                "installation": {"id": self.fake.installation_id}}

    def retry(self, repo: str, number: int, actor: str, text: str = "") -> Any:
        return self.deliver("issue_comment", self.retry_payload(repo, number, actor, text))

    # -- inspection -----------------------------------------------------------------------

    def status(self, repo: str, number: int) -> str:
        mine = self.status_comments(repo, number)
        assert len(mine) <= 1, "one status comment, edited in place"
        return mine[0] if mine else ""

    def status_comments(self, repo: str, number: int) -> list[str]:
        return [c.body for c in self.fake.comments(OWNER, repo, number)
                if "frognano:status" in c.body]

    def transcripts(self, repo: str) -> list[Path]:
        return sorted((self.state / "transcripts" / OWNER / repo).glob("*.jsonl"))

    def tokens(self) -> list[str]:
        return [t.token for t in self.fake.issued_tokens]

    def worker_logs(self) -> str:
        return "".join(f"--- {log.name}\n{log.read_text()[-3000:]}\n"
                       for log in sorted(self.root.glob("worker*.log")))


def user_json(login: str) -> dict[str, Any]:
    return {"login": login, "id": abs(hash(login)) % 10**6, "type": "User"}


def issue_json(number: int) -> dict[str, Any]:
    return {"number": number, "title": CALC_ISSUE[0], "body": "", "state": "open",
            "user": user_json("octocat")}


def repo_json(name: str) -> dict[str, Any]:
    return {"name": name, "full_name": f"{OWNER}/{name}", "owner": user_json(OWNER)}


def wait_for(what: Callable[[], Any], timeout: float = 90, message: str = "",
             interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {message or what}")


def start_worker(root: Path, env: dict[str, str], name: str, extra: list[str],
                 module: str = "frognano") -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", module, "worker", *extra], env=env,
                            stdout=(root / f"{name}.log").open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop_worker(worker: subprocess.Popen[bytes], timeout: float = 15) -> None:
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)  # warm shutdown: running tasks finish
    try:
        worker.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


@contextmanager
def running_stack(root: Path, options: StackOptions) -> Iterator[Stack]:
    """Start everything; on exit stop it, print the worker logs and check that no
    request or response broke GitHub's OpenAPI description."""
    root.mkdir(parents=True, exist_ok=True)
    fake = FakeGitHub(root / "github", token_ttl=options.token_ttl,
                      validate_openapi=options.validate_openapi).start()
    redis = start_redis(root / "redis")
    script = root / "script.json"
    script.write_text(json.dumps(options.script))
    work = Path(f"/var/tmp/frognano-e2e-{uuid.uuid4().hex[:8]}")
    env = {**os.environ, "GITHUB_APP_ID": str(fake.app_id),
           "GITHUB_PRIVATE_KEY": fake.private_key_pem, "GITHUB_API_URL": fake.api_url,
           "GITHUB_WEBHOOK_SECRET": SECRET, "FROGNANO_REDIS_URL": redis.url,
           "FROGNANO_MODEL": f"scripted:{script}", "FROGNANO_STATE_DIR": str(root / "state"),
           "FROGNANO_WORK_DIR": str(work), "FROGNANO_BOT_LOGIN": fake.bot_login,
           "FROGNANO_PUBLIC_URL": "https://frognano.example", **options.env}
    workers = [start_worker(root, env, f"worker{i}", [], options.worker_module)
               for i in range(options.run_workers)]
    workers.append(start_worker(root, env, "worker-control", ["--control"],
                                options.worker_module))
    settings = BotSettings(GITHUB_WEBHOOK_SECRET=SecretStr(SECRET), FROGNANO_REDIS_URL=redis.url,
                           FROGNANO_BOT_LOGIN=fake.bot_login)
    stack: Stack | None = None
    try:
        with TestClient(create_app(settings, bot_login=fake.bot_login)) as client:
            stack = Stack(fake, redis, client, root, workers, env)
            yield stack
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            stop_worker(worker)
        redis.stop()
        fake.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
        print(stack.worker_logs() if stack else "")
    assert not fake.violations, "\n".join(fake.violations)
