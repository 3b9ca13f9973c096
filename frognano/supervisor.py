"""Supervising child processes for `frognano up`: start, forward output, restart with
backoff, and stop in order (receiver, then workers with a grace period, then Redis)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import IO, Literal

import redis

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
