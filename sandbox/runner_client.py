"""Host side of the runner protocol: one runner process, JSON lines over its stdin/stdout.

Shared by both backends; they differ only in the argv that starts the runner and in how
the process is confined.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.base import ExecResult, SandboxConfig, SandboxError
from sandbox.disk_quota import DiskQuotaExceeded, DiskWatch

RUNNER_PATH = Path(__file__).with_name("runner.py")
# Time the runner gets beyond a command's own timeout to kill, reap and answer.
GRACE_SECONDS = 10.0
NON_BASH_TOOL_SECONDS = 120.0
STARTUP_SECONDS = 30.0
EXEC_OUTPUT_CHARS = 200_000


class RunnerGone(Exception):
    """The runner died, broke the protocol or missed its deadline; it has been killed."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class RunnerProcess:
    """A started runner; `request` sends one JSON line and waits for its answer."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str | None = None,
                 pass_fds: tuple[int, ...] = (), preexec_fn: Callable[[], None] | None = None,
                 user: int | None = None, group: int | None = None) -> None:
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=cwd, pass_fds=pass_fds, preexec_fn=preexec_fn,
                user=user, group=group, extra_groups=[] if user is not None else None,
                start_new_session=True,  # one process group to kill, whatever happens inside
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox runner: {exc}") from exc
        self._buffer = bytearray()
        self._ids = itertools.count(1)
        self._stderr_tail: collections.deque[bytes] = collections.deque(maxlen=64)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in iter(self.proc.stderr.readline, b""):
            self._stderr_tail.append(line[:2000])

    def stderr_tail(self) -> str:
        return b"".join(self._stderr_tail).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, payload: dict[str, Any], seconds: float) -> dict[str, Any]:
        request_id = next(self._ids)
        line = json.dumps({**payload, "id": request_id}) + "\n"
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self.kill()
            raise RunnerGone(f"the sandbox runner is gone ({exc}); {self._why()}") from exc
        reply_line = self._read_line(time.monotonic() + seconds)
        try:
            reply = json.loads(reply_line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != request_id:
            self.kill()
            raise RunnerGone("the sandbox runner broke the protocol")
        if not reply.get("ok"):
            raise SandboxError(f"sandbox runner refused the request: {reply.get('error')}")
        return reply

    def _read_line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                wait = deadline - time.monotonic()
                if wait <= 0 or not selector.select(wait):
                    self.kill()
                    raise RunnerGone("the sandbox runner did not answer in time", timed_out=True)
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.kill()
                    raise RunnerGone(f"the sandbox runner died; {self._why()}")
                self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    def _why(self) -> str:
        code = self.proc.poll()
        tail = self.stderr_tail()
        return f"exit status {code}" + (f", stderr: {tail[-1500:]}" if tail else "")

    def signal_kill(self) -> None:
        """SIGKILL the runner's process group, safe from another thread: the reader sees
        EOF and cleans up."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr_thread.join(timeout=1)

    def close(self) -> None:
        """Ask politely (EOF), then kill the group so no stray process survives."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def tool_deadline(name: str, args: dict[str, Any], default_timeout: float,
                  max_timeout: float) -> float:
    """Host-side deadline for a tool call: the command's own timeout plus grace."""
    if name != "Bash":
        return NON_BASH_TOOL_SECONDS
    try:
        if args.get("timeout_ms") is not None:
            seconds = float(args["timeout_ms"]) / 1000.0
        elif args.get("timeout") is not None:
            raw = float(args["timeout"])
            seconds = raw / 1000.0 if raw > 1000 else raw
        else:
            seconds = default_timeout
    except (TypeError, ValueError):
        seconds = default_timeout  # the runner reports the bad value itself, at once
    return min(max(seconds, 0.1), max_timeout) + GRACE_SECONDS


def tool_failure_text(name: str, exc: RunnerGone, seconds: float) -> str:
    """What the model sees when the runner itself failed during its call."""
    if name == "Bash" and exc.timed_out:
        return (f"Timed out after {seconds:.1f}s\nSTDOUT:\n\nSTDERR:\n"
                "[the sandbox stopped answering and was restarted]")
    return f"SandboxError: {exc}; the sandbox was restarted"


def exec_request(command: str, timeout: float) -> dict[str, Any]:
    return {"op": "exec", "command": command, "timeout": timeout,
            "max_chars": EXEC_OUTPUT_CHARS}


def exec_result(reply: dict[str, Any]) -> ExecResult:
    return ExecResult(
        exit_code=reply.get("exit_code"), stdout=reply.get("stdout", ""),
        stderr=reply.get("stderr", ""), timed_out=bool(reply.get("timed_out")),
        seconds=float(reply.get("seconds", 0.0)), truncated=bool(reply.get("truncated")),
    )


def exec_failure(exc: RunnerGone, seconds: float) -> ExecResult:
    return ExecResult(exit_code=None, stdout="", stderr=f"[sandbox: {exc}]",
                      timed_out=exc.timed_out, seconds=seconds)


class RunnerBackedSandbox:
    """Sandbox behaviour common to both backends: a lazily (re)started persistent runner."""

    workdir: str

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._runner: RunnerProcess | None = None
        self._lock = threading.Lock()

    # Backends provide these two.
    def _spawn(self, *, network: bool) -> RunnerProcess:
        raise NotImplementedError

    def _prepare(self) -> None:
        """One-off host-side preparation before the first runner starts."""

    def __enter__(self) -> RunnerBackedSandbox:
        with self._lock:
            self._ensure()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    def _started(self, *, network: bool) -> RunnerProcess:
        runner = self._spawn(network=network)
        try:
            runner.request({"op": "ping"}, STARTUP_SECONDS)
        except RunnerGone as exc:
            raise SandboxError(f"the sandbox did not start: {exc}") from exc
        return runner

    def _ensure(self) -> RunnerProcess:
        if self._runner is not None and not self._runner.alive():
            self._runner.kill()
            self._runner = None
        if self._runner is None:
            if not getattr(self, "_prepared", False):
                self._prepare()
                self._prepared = True
            self._runner = self._started(network=False)
        return self._runner

    def run_tool(self, name: str, args: dict[str, Any]) -> str:
        if not isinstance(args, dict):
            args = {}
        limits = self.config.limits
        seconds = tool_deadline(name, args, limits.default_timeout, limits.max_timeout)
        request = {"op": "tool", "name": name, "args": args}
        with self._lock:
            runner = self._ensure()
            with self._disk_watch(runner) as watch:
                try:
                    output = str(runner.request(request, seconds)["output"])
                except RunnerGone as exc:
                    self._runner = None  # restarted lazily by the next call
                    output = tool_failure_text(name, exc, seconds - GRACE_SECONDS)
            self._enforce_quota(watch)
            return output

    def exec(self, command: str, *, network: bool = False,
             timeout: float | None = None) -> ExecResult:
        limits = self.config.limits
        seconds = min(timeout or limits.default_timeout, limits.max_timeout)
        request = exec_request(command, seconds)
        if network:
            return self._exec_with_network(request, seconds)
        with self._lock:
            runner = self._ensure()
            with self._disk_watch(runner) as watch:
                try:
                    result = exec_result(runner.request(request, seconds + GRACE_SECONDS))
                except RunnerGone as exc:
                    self._runner = None
                    result = exec_failure(exc, seconds)
            self._enforce_quota(watch)
            return result

    def _disk_watch(self, runner: RunnerProcess) -> DiskWatch:
        return DiskWatch([self.config.workspace, self.config.private_dir],
                         self.config.limits.disk_bytes, runner.signal_kill)

    def _enforce_quota(self, watch: DiskWatch) -> None:
        """Past the quota the run cannot go on (the files stay until the run's directory
        is removed): end it with a SandboxError that names the reason."""
        try:
            watch.check()
        except DiskQuotaExceeded as exc:
            if self._runner is not None:
                self._runner.kill()
                self._runner = None
            raise SandboxError(str(exc)) from None

    def _exec_with_network(self, request: dict[str, Any], seconds: float) -> ExecResult:
        """A separate one-shot runner, so the persistent one never has a network."""
        with self._lock:
            if not getattr(self, "_prepared", False):
                self._prepare()
                self._prepared = True
        runner = self._started(network=True)
        try:
            with self._disk_watch(runner) as watch:
                try:
                    result = exec_result(runner.request(request, seconds + GRACE_SECONDS))
                except RunnerGone as exc:
                    result = exec_failure(exc, seconds)
        finally:
            runner.close()
        self._enforce_quota(watch)
        return result

    def stop(self) -> None:
        """Kill every process in the sandbox now, so the host can snapshot a work tree
        nothing is still writing; the next call starts a fresh runner."""
        with self._lock:
            if self._runner is not None:
                self._runner.kill()
                self._runner = None
