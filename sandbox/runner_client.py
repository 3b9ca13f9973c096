"""Host side of the runner protocol: one runner process, JSON lines over its stdin/stdout.

Shared by both backends; they differ only in the argv that starts the runner and in how
the process is confined.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import hmac
import itertools
import json
import os
import secrets
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandbox import services
from sandbox.base import UV_CACHE_NAME, ExecResult, SandboxConfig, SandboxError, ToolResult
from sandbox.disk_quota import DiskQuotaExceeded, DiskWatch
from sandbox.egress import NetworkLog
from sandbox.services import ServicePorts
from sandbox.trees import remove_tree
from sandbox.usage_watch import UsageWatch, measure

RUNNER_PATH = Path(__file__).with_name("runner.py")
# Time the runner gets beyond a command's own timeout to kill, reap and answer.
GRACE_SECONDS = 10.0
NON_BASH_TOOL_SECONDS = 120.0
STARTUP_SECONDS = 30.0
EXEC_OUTPUT_CHARS = 200_000
# The largest honest reply is a few MiB (1,000 Glob paths, JSON-escaped): anything
# longer is a broken or hostile runner, refused before it is buffered whole.
MAX_MESSAGE_BYTES = 64 * 1024**2
READ_CHUNK_BYTES = 1 << 20
STDERR_LINE_BYTES = 4096


class RunnerGone(Exception):
    """The runner died, broke the protocol or missed its deadline; it has been killed."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class RunnerProcess:
    """A started runner; `request` sends one JSON line and waits for its answer.

    The protocol runs over two pipes of its own (`--fd-in`/`--fd-out` appended to argv,
    which must end with the runner's own arguments), never over stdio: bwrap's init
    keeps its stdio, and every sandboxed process can reach that through /proc/1/fd.
    Replies are authenticated with a per-spawn key and bounded in size.
    """

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str | None = None,
                 pass_fds: tuple[int, ...] = (), preexec_fn: Callable[[], None] | None = None,
                 user: int | None = None, group: int | None = None) -> None:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        self._key = secrets.token_bytes(32)
        argv = [*argv, "--fd-in", str(request_read), "--fd-out", str(reply_write)]
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=env, cwd=cwd,
                pass_fds=(*pass_fds, request_read, reply_write), preexec_fn=preexec_fn,
                user=user, group=group, extra_groups=[] if user is not None else None,
                start_new_session=True,  # one process group to kill, whatever happens inside
            )
        except OSError as exc:
            os.close(request_write)
            os.close(reply_read)
            raise SandboxError(f"cannot start the sandbox runner: {exc}") from exc
        finally:  # the child's ends: once it has them, only it may hold them
            os.close(request_read)
            os.close(reply_write)
        self._requests = os.fdopen(request_write, "wb")
        self._replies = reply_read
        self._buffer = bytearray()
        self._ids = itertools.count(1)
        self.on_kill: list[Callable[[], None]] = []  # host-side helpers of this runner
        self.network_log: NetworkLog | None = None  # what those helpers refused (setup)
        self._stderr_tail: collections.deque[bytes] = collections.deque(maxlen=64)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        self._send(self._key.hex().encode() + b"\n")

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        # Bounded lines: bwrap's init keeps this pipe, so a sandboxed process may write here.
        for line in iter(lambda: self.proc.stderr.readline(STDERR_LINE_BYTES), b""):  # type: ignore[union-attr]
            self._stderr_tail.append(line[:2000])

    def stderr_tail(self) -> str:
        return b"".join(self._stderr_tail).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _send(self, data: bytes) -> None:
        try:
            self._requests.write(data)
            self._requests.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.kill()
            raise RunnerGone(f"the sandbox runner is gone ({exc}); {self._why()}") from exc

    def request(self, payload: dict[str, Any], seconds: float) -> dict[str, Any]:
        request_id = next(self._ids)
        self._send(json.dumps({**payload, "id": request_id}).encode() + b"\n")
        reply_line = self._read_line(time.monotonic() + seconds)
        mac, _, body = reply_line.partition(b" ")
        expected = hmac.new(self._key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, expected):
            self.kill()
            raise RunnerGone("the sandbox runner's reply failed authentication (forged?)")
        try:
            reply = json.loads(body)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != request_id:
            self.kill()
            raise RunnerGone("the sandbox runner broke the protocol")
        if not reply.get("ok"):
            raise SandboxError(f"sandbox runner refused the request: {reply.get('error')}")
        return reply

    def _read_line(self, deadline: float) -> bytes:
        with selectors.DefaultSelector() as selector:
            selector.register(self._replies, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    self.kill()
                    raise RunnerGone(f"the sandbox runner sent a message over "
                                     f"{MAX_MESSAGE_BYTES // 1024**2} MiB; it was killed")
                wait = deadline - time.monotonic()
                if wait <= 0 or not selector.select(wait):
                    self.kill()
                    raise RunnerGone("the sandbox runner did not answer in time", timed_out=True)
                chunk = os.read(self._replies, READ_CHUNK_BYTES)
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
        with contextlib.suppress(OSError):
            self._requests.close()
        if self._replies >= 0:
            with contextlib.suppress(OSError):
                os.close(self._replies)
            self._replies = -1
        self._stderr_thread.join(timeout=1)
        while self.on_kill:
            self.on_kill.pop()()

    def close(self) -> None:
        """Ask politely (EOF), then kill the group so no stray process survives."""
        try:
            self._requests.close()
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


def exec_result(reply: dict[str, Any], max_chars: int = EXEC_OUTPUT_CHARS) -> ExecResult:
    """The reply as an ExecResult, each stream cut to `max_chars` here too: the runner
    cuts them, but the host keeps them (the verdict's output, the transcript) and takes
    no bound on trust from a process inside the sandbox."""
    stdout, stderr = _text(reply.get("stdout")), _text(reply.get("stderr"))
    # The runner's own cut leaves `max_chars` plus its "[truncated N bytes]" line: only
    # a reply past that is the host's to cut (a runner the sandbox tampered with).
    max_chars += _MARKER_CHARS
    cut = len(stdout) > max_chars or len(stderr) > max_chars
    return ExecResult(
        exit_code=reply.get("exit_code"), stdout=_tail(stdout, max_chars),
        stderr=_tail(stderr, max_chars), timed_out=bool(reply.get("timed_out")),
        seconds=float(reply.get("seconds", 0.0)),
        truncated=bool(reply.get("truncated")) or cut,
    )


_MARKER_CHARS = 64  # room for the runner's own truncation line


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _tail(text: str, max_chars: int) -> str:
    """The last `max_chars` characters (a test run's summary is at its end)."""
    if len(text) <= max_chars:
        return text
    return f"[frognano: {len(text) - max_chars} characters cut]\n" + text[-max_chars:]


def exec_failure(exc: RunnerGone, seconds: float,
                 usage: UsageWatch | None = None) -> ExecResult:
    why = (usage.failure() if usage is not None else None) or str(exc)
    return ExecResult(exit_code=None, stdout="", stderr=f"[sandbox: {why}]",
                      timed_out=exc.timed_out, seconds=seconds)


def _remove_service_data(host_root: Path, spawn: str) -> None:
    """A dead runner's service data; never through a link the sandbox put there."""
    if host_root.is_dir() and not host_root.is_symlink():
        remove_tree(host_root / spawn)


class RunnerBackedSandbox:
    """Sandbox behaviour common to both backends: a lazily (re)started persistent runner."""

    workdir: str

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._runner: RunnerProcess | None = None
        self._lock = threading.Lock()
        # The services its last runner started (config.services, resolved on this host).
        self.started_services: tuple[services.ServiceBinaries, ...] = ()

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
        try:
            runner = self._spawn(network=network)
            runner.request({"op": "ping"}, STARTUP_SECONDS)
        except RunnerGone as exc:
            raise SandboxError(f"the sandbox did not start: {exc}") from exc
        if self.config.services:
            self._start_services(runner)
        return runner

    # Backends say where the private area is inside and on which ports services listen.
    def _private_inside(self) -> str:
        return str(self.config.private_dir.resolve())

    def service_ports(self) -> ServicePorts:
        return ServicePorts()

    def _start_services(self, runner: RunnerProcess) -> None:
        """Fresh instances of the config's services in this runner, before any command:
        started by a `detach` exec, whose daemons the runner spares when it reaps (they die
        with it); their data in a directory of the private area of this spawn's own."""
        try:
            binaries = services.resolve(self.config.services)
        except services.ServiceUnavailable:
            runner.kill()
            raise
        spawn = secrets.token_hex(6)
        host_root = self.config.private_dir / "services"
        runner.on_kill.append(lambda: _remove_service_data(host_root, spawn))
        script = services.start_script(binaries, f"{self._private_inside()}/services/{spawn}",
                                       self.service_ports())
        request = {**exec_request(script, services.START_SECONDS), "detach": True}
        try:
            result = exec_result(runner.request(request,
                                                services.START_SECONDS + GRACE_SECONDS))
        except (RunnerGone, SandboxError) as exc:
            runner.kill()
            raise services.ServiceFailed(f"the services did not start: {exc}") from exc
        if not result.ok or "frognano-services-ready" not in result.stdout:
            runner.kill()
            raise services.failure(result.stdout, result.stderr, result.exit_code,
                                   result.timed_out)
        self.started_services = binaries  # what runs, for the model's task and the record

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
        return self.call_tool(name, args).output

    def call_tool(self, name: str, args: dict[str, Any]) -> ToolResult:
        if not isinstance(args, dict):
            args = {}
        limits = self.config.limits
        seconds = tool_deadline(name, args, limits.default_timeout, limits.max_timeout)
        request = {"op": "tool", "name": name, "args": args}
        with self._lock:
            runner = self._ensure()
            with self._disk_watch(runner) as watch, self._watch_usage(runner) as usage:
                try:
                    reply = runner.request(request, seconds)
                    result = ToolResult(str(reply["output"]), reply.get("error") is True)
                except RunnerGone as exc:
                    self._runner = None  # restarted lazily by the next call
                    # A Bash call cut off by its deadline reads as a timed-out command.
                    result = ToolResult(tool_failure_text(name, exc, seconds - GRACE_SECONDS),
                                        error=not (name == "Bash" and exc.timed_out))
                    if usage is not None and usage.failure():
                        result = ToolResult(f"SandboxError: {usage.failure()}", error=True)
            self._enforce_quota(watch)
            return result

    def exec(self, command: str, *, network: bool = False,
             timeout: float | None = None) -> ExecResult:
        limits = self.config.limits
        seconds = min(timeout or limits.default_timeout, limits.max_timeout)
        request = exec_request(command, seconds)
        if network:
            return self._exec_with_network(request, seconds)
        with self._lock:
            runner = self._ensure()
            with self._disk_watch(runner) as watch, self._watch_usage(runner) as usage:
                try:
                    result = exec_result(runner.request(request, seconds + GRACE_SECONDS))
                except RunnerGone as exc:
                    self._runner = None
                    result = exec_failure(exc, seconds, usage)
            self._enforce_quota(watch)
            return result

    def _disk_watch(self, runner: RunnerProcess) -> DiskWatch:
        roots = [self.config.workspace, self.config.private_dir]
        devices = {os.stat(root).st_dev for root in roots if root.exists()}

        def deleted_but_open() -> int:
            return measure(runner.proc.pid, disk_devices=devices,
                           count_memory=False).deleted_disk_bytes
        return DiskWatch(roots, self.config.limits.disk_bytes, runner.signal_kill,
                         extra=deleted_but_open)

    def _usage_watch(self, runner: RunnerProcess) -> UsageWatch | None:
        """The host-side memory and process watch, for backends that need one."""
        return None

    @contextlib.contextmanager
    def _watch_usage(self, runner: RunnerProcess) -> Iterator[UsageWatch | None]:
        watch = self._usage_watch(runner)
        if watch is None:
            yield None
            return
        with watch:
            yield watch

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
            with self._disk_watch(runner) as watch, self._watch_usage(runner) as usage:
                try:
                    result = exec_result(runner.request(request, seconds + GRACE_SECONDS))
                except RunnerGone as exc:
                    result = exec_failure(exc, seconds, usage)
        finally:
            runner.close()
            # uv's cache of this setup (base.UV_CACHE_NAME): the venv holds what it needs.
            remove_tree(self.config.private_dir / UV_CACHE_NAME)
        self._enforce_quota(watch)
        if runner.network_log is not None:
            result = dataclasses.replace(result, network_log=runner.network_log.lines())
        return result

    def stop(self) -> None:
        """Kill every process in the sandbox now, so the host can snapshot a work tree
        nothing is still writing; the next call starts a fresh runner."""
        with self._lock:
            if self._runner is not None:
                self._runner.kill()
                self._runner = None
