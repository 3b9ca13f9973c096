"""`frognano up` as a real process tree: a private redis-server, the receiver, Celery
workers, the local fake GitHub and the scripted model; stopped with real signals."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from bot.webhook_events import sign
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import make_repo
from tests.support.fake_github.server import FakeGitHub
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import REDIS_BINARY
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = pytest.mark.skipif(not Path(REDIS_BINARY).exists(),
                                reason="redis-server is not installed")


SECRET = "up-webhook-secret-of-at-least-32-characters"
OWNER, REPO, MAINTAINER = "octo", "calc", "maintainer"
SCRIPT = [
    think_and_call("add uses minus.", "Edit", file_path="calc.py",
                   old_string="return a - b", new_string="return a + b"),
    final_answer("Fixed `add` to return the sum."),
]
# The test drives run_up itself, so it does not depend on how the CLI spells `up`.
UP_PROGRAM = """
import sys
from pathlib import Path
from bot.settings import BotSettings
from frognano.up_command import run_up
settings = BotSettings()
sys.exit(run_up(settings, host="127.0.0.1", port=int(sys.argv[1]),
                workers_per_gpu=settings.run_workers_per_gpu, state_dir=Path(sys.argv[2])))
"""
# Settings the developer's shell may hold that would change what `up` does.
_SCRUBBED = ("FROGNANO_REDIS_URL", "GITHUB_APP_ID", "GITHUB_PRIVATE_KEY",
             "GITHUB_PRIVATE_KEY_PATH", "GITHUB_WEBHOOK_SECRET", "FROGNANO_MODEL",
             "FROGNANO_STATE_DIR", "FROGNANO_WORK_DIR", "FROGNANO_RUN_WORKERS_PER_GPU",
             "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def wait_for(what: Callable[[], Any], timeout: float = 30, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {message or what}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- /proc --------------------------------------------------------------------------------


def _proc_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:  # gone, or not ours
        return b""


def processes_marked(marker: str) -> list[str]:
    """Live processes whose environment or command line mentions `marker` (every child of
    `up` inherits FROGNANO_STATE_DIR, so a leftover cannot hide)."""
    needle = marker.encode()
    found = []
    for pid in _proc_pids():
        if pid == os.getpid():
            continue
        stat = _read(f"/proc/{pid}/stat")
        if not stat or stat.rsplit(b")", 1)[-1].split()[0] == b"Z":
            continue
        cmdline = _read(f"/proc/{pid}/cmdline")
        if needle in _read(f"/proc/{pid}/environ") or needle in cmdline:
            found.append(f"{pid}: " + cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def children_of(pid: int) -> list[str]:
    names = []
    for candidate in _proc_pids():
        status = _read(f"/proc/{candidate}/status").decode(errors="replace")
        if re.search(rf"^PPid:\s+{pid}$", status, re.MULTILINE):
            # A zombie or an exiting process has an empty cmdline: it is no live child.
            words = _read(f"/proc/{candidate}/cmdline").replace(b"\0", b" ").split()
            if words:
                # redis-server rewrites its title ("redis-server 127.0.0.1:port"); keep the program.
                names.append(words[0].decode(errors="replace"))
    return names


# --- one `frognano up` --------------------------------------------------------------------


class Up:
    def __init__(self, state_dir: Path, log: Path, env: dict[str, str]) -> None:
        self.state_dir, self.log, self.port = state_dir, log, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with log.open("w") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-c", UP_PROGRAM, str(self.port), str(state_dir)],
                env=env, cwd=log.parent, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_for(lambda: "frognano is up" in self.output() or self.process.poll() is not None,
                 message="the banner")
        assert self.process.poll() is None, self.output()

    def output(self) -> str:
        return self.log.read_text()

    def pids(self, name: str) -> list[int]:
        return [int(pid) for pid in re.findall(rf"started {name} \(pid (\d+)\)", self.output())]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise AssertionError(f"`up` did not stop on SIGTERM:\n{self.output()}") from None

    def redis_url(self) -> str:
        found = re.search(r"private, (redis://\S+),", self.output())
        assert found, self.output()
        return found.group(1)


def http(method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None
         ) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body if method == "POST" else None,
                                     method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def base_env(state_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                       env.get("PYTHONPATH")]))
    env["FROGNANO_STATE_DIR"] = str(state_dir)
    return env


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    yield state
    leftovers = processes_marked(str(state))
    for line in leftovers:  # never leave a stray server behind, even when a test failed
        with suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert not leftovers, "processes left behind:\n" + "\n".join(leftovers)


# --- tests --------------------------------------------------------------------------------


def test_without_credentials_it_serves_setup_and_stops_cleanly(state_dir: Path,
                                                               tmp_path: Path) -> None:
    up = Up(state_dir, tmp_path / "up.log", base_env(state_dir))
    try:
        status, body = http("GET", up.url + "/healthz")
        assert status == 200, body
        assert json.loads(body)["checks"]["redis"]["ok"] is True
        status, body = http("POST", up.url + "/webhooks/github", b"{}",
                            {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "1"})
        assert status == 503, body
        assert "workers not started" in up.output()
        # `up` starts with `frognano doctor`'s lines: what is missing, each with its fix.
        assert re.search(r"doctor\s+\| FAIL  app id\s+GITHUB_APP_ID is not set", up.output())
        assert re.search(r"doctor\s+\| ok    bubblewrap", up.output())
        assert "open http://127.0.0.1:" in up.output()
        # Every address printed follows --port: doctor's dashboard and public-URL lines
        # name this receiver's port, never the default 8000 (issue 33 §3).
        doctor_lines = "\n".join(line for line in up.output().splitlines()
                                 if line.startswith("doctor"))
        assert f"http://127.0.0.1:{up.port}/runs refuses everyone" in doctor_lines
        assert f"cloudflared tunnel --url http://127.0.0.1:{up.port}`" in doctor_lines
        addresses = re.findall(r"http://(?:127\.0\.0\.1|localhost):(\d+)", up.output())
        assert addresses and set(addresses) <= {str(up.port)}, addresses
        # The banner names the dashboard, and how to get in (issue 22 §3).
        assert re.search(r"dashboard http://127\.0\.0\.1:\d+/runs refuses everyone: no "
                         r"FROGNANO_DASHBOARD_TOKEN", up.output())
        assert 'export FROGNANO_DASHBOARD_TOKEN="$(openssl rand -hex 16)"' in up.output()
        # Setup is the operator's: the banner's one-time link opens it, nothing else does.
        links = set(re.findall(r"http://127\.0\.0\.1:\d+/\?token=[\w-]{32,}",
                               up.output()))
        assert len(links) == 1, f"the banner and the receiver's log show one link: {links}"
        assert http("GET", up.url + "/setup")[0] == 403
        assert http("GET", up.url + "/setup?token=guess")[0] == 403
        with httpx.Client(timeout=10) as operator:
            assert operator.get(links.pop(), follow_redirects=True).status_code == 200
            assert "manifest" in operator.get(up.url + "/setup").text
        assert sorted(children_of(up.process.pid)) == sorted(
            [REDIS_BINARY, sys.executable]), "redis-server and the receiver, no workers"
        assert not up.pids("control") and not up.pids("worker-1")
        redis_dir = state_dir / "redis"
        assert (redis_dir / "appendonlydir").is_dir(), "append-only persistence is on"
    finally:
        code = up.stop()
    assert code == 0, up.output()
    assert processes_marked(str(state_dir)) == []
    assert "saving and stopping redis-server" in up.output()


@pytest.fixture
def fake_github(tmp_path: Path) -> Iterator[FakeGitHub]:
    fake = FakeGitHub(tmp_path / "github").start()
    fake.add_repo(OWNER, REPO, make_repo(tmp_path / "calc", template="calc_repo"))
    fake.add_issue(OWNER, REPO, 1, "add() subtracts", "`add(2, 3)` returns -1.")
    fake.set_permission(OWNER, REPO, MAINTAINER, "write")
    try:
        yield fake
    finally:
        fake.stop()
    assert not fake.violations, "\n".join(fake.violations)


def labeled_delivery(fake: FakeGitHub) -> tuple[bytes, dict[str, str]]:
    def user(login: str) -> dict[str, Any]:
        return {"login": login, "id": abs(hash(login)) % 10**6, "type": "User"}

    body = json.dumps({
        "action": "labeled", "label": {"name": "frognano"},
        "issue": {"number": 1, "title": "add() subtracts", "body": "", "state": "open",
                  "user": user("octocat")},
        "repository": {"name": REPO, "full_name": f"{OWNER}/{REPO}", "owner": user(OWNER)},
        "sender": user(MAINTAINER), "installation": {"id": fake.installation_id},
    }).encode()
    return body, {"X-GitHub-Event": "issues", "X-GitHub-Delivery": str(uuid.uuid4()),
                  "X-Hub-Signature-256": sign(SECRET, body),
                  "Content-Type": "application/json"}


def test_queued_work_survives_a_restart_and_dead_workers_come_back(
        state_dir: Path, tmp_path: Path, fake_github: FakeGitHub) -> None:
    # 1. The App's webhook secret is set, but no workers: a delivery is queued, then `up`
    #    stops with the task still waiting in the private Redis.
    env = {**base_env(state_dir), "GITHUB_WEBHOOK_SECRET": SECRET,
           "FROGNANO_BOT_LOGIN": fake_github.bot_login}
    first = Up(state_dir, tmp_path / "up1.log", env)
    try:
        body, headers = labeled_delivery(fake_github)
        status, answer = http("POST", first.url + "/webhooks/github", body, headers)
        assert status == 202, answer
        with redis.Redis.from_url(first.redis_url()) as client:
            assert client.llen("frognano-control") == 1
    finally:
        assert first.stop() == 0, first.output()
    assert processes_marked(str(state_dir)) == []

    # 2. With the App and the model configured, the next `up` takes the queued task.
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    work_dir = Path(f"/var/tmp/frognano-up-test-{uuid.uuid4().hex[:8]}")
    env.update({"GITHUB_APP_ID": str(fake_github.app_id),
                "GITHUB_PRIVATE_KEY": fake_github.private_key_pem,
                "GITHUB_API_URL": fake_github.api_url,
                "FROGNANO_MODEL": f"scripted:{script}", "FROGNANO_WORK_DIR": str(work_dir),
                "FROGNANO_SANDBOX": "bubblewrap" if HAVE_BWRAP else "unsafe-local"})
    second = Up(state_dir, tmp_path / "up2.log", env)
    try:
        assert "1 control worker and 1 run worker(s) on the CPU (nvidia-smi is not " \
            "installed)" in second.output()
        wait_for(lambda: any(r.content == "eyes" for r in fake_github.reactions),
                 message="the 👀 reaction from the accept task queued before the restart")
        wait_for(lambda: fake_github.pulls(OWNER, REPO), timeout=40, message="the draft PR")

        # 3. A worker killed outright comes back.
        [control] = second.pids("control")
        os.kill(control, signal.SIGKILL)
        wait_for(lambda: len(second.pids("control")) == 2, message="the control restart")
        assert "was killed by SIGKILL unexpectedly; restarting" in second.output()
    finally:
        code = second.stop()
        subprocess.run(["rm", "-rf", str(work_dir)], check=False)
    assert code == 0, second.output()
    assert processes_marked(str(state_dir)) == []


# A host with two GPUs, as nvidia-smi would list them (no GPU here: the one process edge
# faked); the runs themselves go to the scripted model.
FAKE_NVIDIA_SMI = """#!/bin/sh
[ "$1" = "--query-gpu=index,uuid,name,memory.total" ] || exit 9
echo "0, GPU-8c1f0aaa, NVIDIA H200, 143771"
echo "1, GPU-8c1f0bbb, NVIDIA H200, 143771"
"""


def _environ(pid: int) -> dict[str, str]:
    pairs = (entry.split(b"=", 1) for entry in _read(f"/proc/{pid}/environ").split(b"\0")
             if b"=" in entry)
    return {key.decode(): value.decode() for key, value in pairs}


def test_run_workers_per_gpu_are_pinned_each_to_its_gpu(state_dir: Path, tmp_path: Path,
                                                        fake_github: FakeGitHub) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {**base_env(state_dir), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
           "FROGNANO_RUN_WORKERS_PER_GPU": "2", "GITHUB_WEBHOOK_SECRET": SECRET,
           "GITHUB_APP_ID": str(fake_github.app_id),
           "GITHUB_PRIVATE_KEY": fake_github.private_key_pem,
           "GITHUB_API_URL": fake_github.api_url, "FROGNANO_MODEL": f"scripted:{script}",
           "FROGNANO_SANDBOX": "bubblewrap" if HAVE_BWRAP else "unsafe-local"}
    up = Up(state_dir, tmp_path / "up.log", env)
    try:
        assert ("1 control worker and 4 run worker(s), 2 per GPU on 2 GPU(s) from nvidia-smi: "
                "worker-1, worker-2 on GPU 0 (NVIDIA H200, 143,771 MiB); worker-3, worker-4 "
                "on GPU 1 (NVIDIA H200, 143,771 MiB)") in up.output()
        pinned = {}
        for index in range(1, 5):
            [pid] = up.pids(f"worker-{index}")
            environ = _environ(pid)
            assert environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", \
                "nvidia-smi's index is the PCI bus order; CUDA's default is fastest first"
            assert environ["FROGNANO_STATE_DIR"] == str(state_dir)
            pinned[f"worker-{index}"] = environ.get("CUDA_VISIBLE_DEVICES")
        assert pinned == {"worker-1": "0", "worker-2": "0", "worker-3": "1", "worker-4": "1"}
        [control] = up.pids("control")
        assert "CUDA_VISIBLE_DEVICES" not in _environ(control), "the control worker has no model"
        assert not up.pids("worker-5")
        # Each is a live Celery worker taking runs, one at a time.
        wait_for(lambda: all(children_of(pid) for index in range(1, 5)
                             for pid in up.pids(f"worker-{index}")),
                 timeout=60, message="every run worker's pool process")
    finally:
        code = up.stop()
    assert code == 0, up.output()
    assert processes_marked(str(state_dir)) == []
