"""`frognano up`: the whole bot on one host, as one supervised process tree.

Children, each in its own process group so a Ctrl-C in the terminal reaches only this
supervisor, which then stops them in order:

- a private `redis-server` (only when no FROGNANO_REDIS_URL is configured), with an
  append-only file under the state directory, so queued tasks survive a restart;
- the webhook receiver; without App credentials it still serves the setup pages;
- one control worker and N run workers, only when the App and the model are configured.

A child that dies unexpectedly is restarted with backoff. Shutdown stops the receiver
first (no new deliveries), then lets the workers finish their running tasks (Celery's warm
shutdown; tasks are acknowledged late, so one cut short is redelivered), then saves and
stops Redis.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import redis

from bot.settings import BotSettings

EXIT_OK, EXIT_FAILED, EXIT_BAD_SETUP = 0, 1, 2
# `frognano worker` exits with this when its settings are incomplete: restarting won't help.
WORKER_EXIT_NOT_CONFIGURED = 2

RESTART_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
MAX_RESTARTS = 5
# A child that ran this long before dying starts a fresh restart budget.
STABLE_AFTER_S = 60.0
POLL_S = 0.2
READY_TIMEOUT_S = 20.0
RECEIVER_STOP_S = 10.0
DEFAULT_WORKER_GRACE_S = 60.0
COLD_SHUTDOWN_S = 10.0
REDIS_STOP_S = 15.0

Kind = Literal["redis", "receiver", "worker"]


# --- output -------------------------------------------------------------------------------


class Output:
    """Children's lines, interleaved whole: JSON logs stay JSON (tagged with the process),
    anything else gets a `name |` prefix."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def line(self, name: str, text: str) -> None:
        text = text.rstrip("\r\n")
        rendered = _tag_json(name, text)
        if rendered is None:
            rendered = f"{name:<10}| {text}"
        self.write(rendered + "\n")

    def note(self, text: str) -> None:
        self.line("up", text)

    def write(self, text: str) -> None:
        with self._lock:
            self._stream.write(text)
            self._stream.flush()


def _tag_json(name: str, text: str) -> str | None:
    if not text.startswith("{"):
        return None
    try:
        entry = json.loads(text)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    entry.setdefault("process", name)
    return json.dumps(entry)


# --- one child ----------------------------------------------------------------------------


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec hook: the kernel sends SIGTERM to the child if this supervisor is killed
    outright, so no redis-server or worker outlives it (SIGTERM saves / shuts down warm)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return hook


_PREEXEC = _die_with_parent()


@dataclass
class ChildSpec:
    name: str
    kind: Kind
    argv: list[str]
    # Losing an essential child (Redis, the receiver) for good stops the whole tree.
    essential: bool


@dataclass
class Child:
    spec: ChildSpec
    env: dict[str, str]
    output: Output
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    finished: bool = False  # exited for good: not restarted again
    _reader: threading.Thread | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.spec.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_PREEXEC)
        self.started_at = time.monotonic()
        self._reader = threading.Thread(target=self._forward, args=(self.process,),
                                        name=f"forward-{self.name}", daemon=True)
        self._reader.start()
        self.output.note(f"started {self.name} (pid {self.process.pid})")

    def _forward(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        with process.stdout:
            for raw in iter(process.stdout.readline, b""):
                self.output.line(self.name, raw.decode("utf-8", "replace"))

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send(self, sig: signal.Signals) -> None:
        """To the main process only: Celery's main process must coordinate its pool."""
        if self.running():
            assert self.process is not None
            with suppress(ProcessLookupError):
                self.process.send_signal(sig)

    def kill_group(self) -> None:
        """Everything the child left in its group (pool processes, grandchildren)."""
        if self.process is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def drain(self, timeout: float = 2.0) -> None:
        if self.process is not None:
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


# --- signals ------------------------------------------------------------------------------


class StopRequests:
    """The first SIGINT/SIGTERM asks for a graceful stop; a second one asks to hurry."""

    def __init__(self) -> None:
        self.graceful = threading.Event()
        self.hurry = threading.Event()

    def _handle(self, signum: int, _frame: object) -> None:
        if self.graceful.is_set():
            self.hurry.set()
        self.graceful.set()

    @contextmanager
    def installed(self) -> Iterator[StopRequests]:
        previous = {sig: signal.signal(sig, self._handle)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


# --- the supervisor -----------------------------------------------------------------------


class Supervisor:
    def __init__(self, output: Output, stops: StopRequests, worker_grace_s: float) -> None:
        self.output = output
        self.stops = stops
        self.worker_grace_s = worker_grace_s
        self.children: list[Child] = []
        self.failure: str | None = None
        self.redis_url: str | None = None

    def add(self, spec: ChildSpec, env: dict[str, str]) -> Child:
        child = Child(spec, env, self.output)
        self.children.append(child)
        child.start()
        return child

    def supervise(self) -> None:
        while not self.stops.graceful.is_set() and self.failure is None:
            now = time.monotonic()
            for child in self.children:
                self._tend(child, now)
            self.stops.graceful.wait(POLL_S)

    def _tend(self, child: Child, now: float) -> None:
        if child.finished:
            return
        if child.running():
            if now - child.started_at >= STABLE_AFTER_S:
                child.restarts = 0
            return
        if child.restart_at is None:
            self._on_exit(child, now)
        elif now >= child.restart_at:
            child.restart_at = None
            child.restarts += 1
            child.start()

    def _on_exit(self, child: Child, now: float) -> None:
        assert child.process is not None
        code = child.process.returncode
        child.kill_group()
        child.drain()
        if child.spec.kind == "worker" and code == WORKER_EXIT_NOT_CONFIGURED:
            self.output.note(f"{child.name} {_exit_text(code)}: its settings are incomplete "
                             "(see its output above); not restarting it")
            child.finished = True
            return
        if child.restarts >= MAX_RESTARTS:
            self.output.note(f"{child.name} {_exit_text(code)} after {child.restarts} "
                             "restarts; giving up on it")
            child.finished = True
            if child.spec.essential:
                self.failure = f"{child.name} keeps dying"
            return
        delay = RESTART_DELAYS_S[min(child.restarts, len(RESTART_DELAYS_S) - 1)]
        self.output.note(f"{child.name} {_exit_text(code)} unexpectedly; restarting in "
                         f"{delay:g}s (restart {child.restarts + 1} of at most {MAX_RESTARTS})")
        child.restart_at = now + delay

    # --- shutdown, in dependency order ------------------------------------------------

    def shutdown(self) -> None:
        for child in self.children:
            child.restart_at = None  # a pending restart is cancelled
        self._stop_receivers()
        self._stop_workers()
        self._stop_redis()
        for child in self.children:
            child.kill_group()
            child.drain()

    def _of_kind(self, kind: Kind) -> list[Child]:
        return [c for c in self.children if c.spec.kind == kind and c.running()]

    def _wait(self, children: list[Child], timeout: float, *, hurry_ends_wait: bool) -> None:
        deadline = time.monotonic() + timeout
        while any(c.running() for c in children) and time.monotonic() < deadline:
            if hurry_ends_wait and self.stops.hurry.is_set():
                return
            time.sleep(0.05)

    def _stop_receivers(self) -> None:
        receivers = self._of_kind("receiver")
        if receivers:
            self.output.note("stopping the receiver (no new deliveries)")
        for child in receivers:
            child.send(signal.SIGTERM)
        self._wait(receivers, RECEIVER_STOP_S, hurry_ends_wait=False)
        for child in receivers:
            child.kill_group()

    def _stop_workers(self) -> None:
        workers = self._of_kind("worker")
        if not workers:
            return
        self.output.note(f"stopping {len(workers)} worker(s): running tasks get up to "
                         f"{self.worker_grace_s:g}s to finish (Ctrl-C again to cut them short;"
                         " they are redelivered on the next start)")
        for child in workers:
            child.send(signal.SIGTERM)  # Celery's warm shutdown
        self._wait(workers, self.worker_grace_s, hurry_ends_wait=True)
        late = [c for c in workers if c.running()]
        if late:
            # Cold shutdown: the pool is killed, but the main process still hands the
            # unacknowledged tasks back to Redis, so they run again on the next start.
            self.output.note(f"cold shutdown of {', '.join(c.name for c in late)}")
            for child in late:
                child.send(signal.SIGQUIT)
            self._wait(late, COLD_SHUTDOWN_S, hurry_ends_wait=False)
        for child in workers:
            child.kill_group()

    def _stop_redis(self) -> None:
        servers = self._of_kind("redis")
        if not servers or self.redis_url is None:
            return
        self.output.note("saving and stopping redis-server")
        try:
            with redis.Redis.from_url(self.redis_url, socket_connect_timeout=2,
                                      socket_timeout=REDIS_STOP_S) as admin:
                admin.shutdown(save=True)
        except redis.RedisError as exc:
            self.output.note(f"SHUTDOWN SAVE failed ({exc}); sending SIGTERM, which saves too")
            for child in servers:
                child.send(signal.SIGTERM)
        self._wait(servers, REDIS_STOP_S, hurry_ends_wait=False)
        for child in servers:
            child.kill_group()


# --- the private redis-server -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _port_taken(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _redis_argv(binary: str, directory: Path, port: int) -> list[str]:
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
            "--dir", str(directory), "--appendonly", "yes", "--appendfsync", "everysec",
            "--daemonize", "no", "--logfile", ""]


def _wait_for_redis(url: str, child: Child, timeout: float, stop: threading.Event) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.running() and not stop.is_set():
        try:
            with redis.Redis.from_url(url, socket_connect_timeout=0.5,
                                      socket_timeout=1) as probe:
                probe.ping()  # a server still loading its AOF answers LOADING, an error
            return True
        except redis.RedisError:
            time.sleep(0.05)
    return False


def start_private_redis(supervisor: Supervisor, directory: Path, port: int | None,
                        env: dict[str, str]) -> str | None:
    """Start redis-server and return its URL, or None (the reason is already printed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        supervisor.output.note("redis-server is not installed (apt install redis-server), "
                               "and no FROGNANO_REDIS_URL is configured")
        return None
    directory.mkdir(parents=True, exist_ok=True)
    # A free port can be taken between probing and binding; try a few.
    for _ in range(1 if port is not None else 3):
        chosen = port if port is not None else _free_port()
        url = f"redis://127.0.0.1:{chosen}/0"
        spec = ChildSpec("redis", "redis", _redis_argv(binary, directory, chosen),
                         essential=True)
        child = supervisor.add(spec, env)
        if _wait_for_redis(url, child, READY_TIMEOUT_S, supervisor.stops.graceful):
            supervisor.redis_url = url
            return url
        if supervisor.stops.graceful.is_set():
            supervisor.redis_url = url  # stopped by the shutdown, which saves
            return None
        child.kill_group()
        child.drain()
        supervisor.children.remove(child)
    supervisor.output.note(f"redis-server did not start; see its output above ({directory})")
    return None


# --- composition --------------------------------------------------------------------------


def _missing_for_workers(settings: BotSettings) -> list[str]:
    missing = []
    if settings.github_app_id is None:
        missing.append("GITHUB_APP_ID")
    try:
        key = settings.private_key()
    except OSError:
        key = None
    if not key:
        missing.append("GITHUB_PRIVATE_KEY (or a readable GITHUB_PRIVATE_KEY_PATH)")
    if not settings.model:
        missing.append("FROGNANO_MODEL")
    return missing


def _browser_host(host: str) -> str:
    return "localhost" if host in ("0.0.0.0", "::", "") else host


def _wait_until_listening(host: str, port: int, child: Child, timeout: float,
                          stop: threading.Event) -> bool:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.running() and not stop.is_set():
        try:
            with socket.create_connection((target, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


@contextmanager
def _state_lock(state_dir: Path) -> Iterator[bool]:
    """Two `up`s on one state directory would share (and corrupt) one Redis data dir."""
    with (state_dir / "up.lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def _banner(url: str, redis_text: str, workers_text: str, state_dir: Path,
            next_step: str) -> str:
    return "\n".join([
        "",
        "frognano is up",
        f"  receiver  {url}  (webhooks at {url}webhooks/github, health at {url}healthz)",
        f"  workers   {workers_text}",
        f"  redis     {redis_text}",
        f"  state     {state_dir}",
        f"  next      {next_step}",
        "  stop      Ctrl-C; queued work is kept for the next `frognano up`",
        "", ""])


def run_up(settings: BotSettings, *, host: str, port: int, workers: int, state_dir: Path,
           redis_port: int | None = None, worker_grace_s: float = DEFAULT_WORKER_GRACE_S,
           stream: IO[str] | None = None) -> int:
    """Run the bot on this host until SIGINT/SIGTERM; return the exit status."""
    output = Output(stream or sys.stdout)
    if workers < 1:
        output.note(f"--workers must be at least 1, not {workers}")
        return EXIT_BAD_SETUP
    state_dir.mkdir(parents=True, exist_ok=True)
    if _port_taken(host, port):
        output.note(f"{host}:{port} is already in use; choose another with --port")
        return EXIT_BAD_SETUP
    with _state_lock(state_dir) as locked:
        if not locked:
            output.note(f"another `frognano up` is running with {state_dir}")
            return EXIT_BAD_SETUP
        with StopRequests().installed() as stops:
            supervisor = Supervisor(output, stops, worker_grace_s)
            try:
                return _run(supervisor, settings, host=host, port=port, workers=workers,
                            state_dir=state_dir, redis_port=redis_port)
            finally:
                supervisor.shutdown()
                output.note("stopped")


def _run(supervisor: Supervisor, settings: BotSettings, *, host: str, port: int,
         workers: int, state_dir: Path, redis_port: int | None) -> int:
    output = supervisor.output
    env = {**os.environ, "FROGNANO_STATE_DIR": str(state_dir), "PYTHONUNBUFFERED": "1"}
    if "redis_url" in settings.model_fields_set:
        redis_url = settings.redis_url
        redis_text = f"{redis_url} (FROGNANO_REDIS_URL; not managed here)"
    else:
        started = start_private_redis(supervisor, state_dir / "redis", redis_port, env)
        if started is None:
            return EXIT_OK if supervisor.stops.graceful.is_set() else EXIT_FAILED
        redis_url = started
        redis_text = f"private, {redis_url}, append-only data in {state_dir / 'redis'}"
    env["FROGNANO_REDIS_URL"] = redis_url

    receiver = supervisor.add(ChildSpec(
        "receiver", "receiver",
        [sys.executable, "-m", "frognano.up_command", "--host", host, "--port", str(port)],
        essential=True), env)
    listening = _wait_until_listening(host, port, receiver, READY_TIMEOUT_S,
                                      supervisor.stops.graceful)
    if supervisor.stops.graceful.is_set():  # Ctrl-C while starting
        return EXIT_OK
    if not listening:
        output.note("the receiver did not start listening; see its output above")
        return EXIT_FAILED

    url = f"http://{_browser_host(host)}:{port}/"
    missing = _missing_for_workers(settings)
    if missing:
        workers_text = "not started: set " + ", ".join(missing)
        next_step = (f"open {url} to create the GitHub App, set FROGNANO_MODEL "
                     "(`frognano model pull`), then restart `frognano up`")
        output.note("workers not started: " + ", ".join(missing) + " not configured")
    else:
        supervisor.add(ChildSpec("control", "worker",
                                 [sys.executable, "-m", "frognano", "worker", "--control"],
                                 essential=False), env)
        for index in range(1, workers + 1):
            supervisor.add(ChildSpec(f"worker-{index}", "worker",
                                     [sys.executable, "-m", "frognano", "worker",
                                      "--concurrency", "1"], essential=False), env)
        workers_text = f"1 control worker and {workers} run worker(s)"
        next_step = (f"label an issue `{settings.trigger_label}` in a repository the App "
                     "is installed on")
        if not settings.webhook_secret:
            next_step = f"set GITHUB_WEBHOOK_SECRET (or open {url}); webhooks answer 503"
    output.write(_banner(url, redis_text, workers_text, state_dir, next_step))

    supervisor.supervise()
    if supervisor.failure is not None:
        output.note(f"shutting down: {supervisor.failure}")
        return EXIT_FAILED
    output.note("shutting down (signal received)")
    return EXIT_OK


# --- the receiver child -------------------------------------------------------------------


def _receiver_main(argv: list[str]) -> int:
    """`python -m frognano.up_command --host H --port P`: the receiver as `up` runs it,
    serving the setup pages even before the App (and its webhook secret) exists."""
    from pydantic import ValidationError

    from frognano.serve_command import run_serve

    parser = argparse.ArgumentParser(prog="frognano up (receiver)")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        settings = BotSettings()
    except ValidationError as exc:
        print(f"frognano: invalid settings:\n{exc}", file=sys.stderr)
        return EXIT_BAD_SETUP
    return run_serve(settings, args.host, args.port, allow_unconfigured=True)


if __name__ == "__main__":
    sys.exit(_receiver_main(sys.argv[1:]))
