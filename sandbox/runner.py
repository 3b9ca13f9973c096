#!/usr/bin/env python3
"""FrogNano tool runner: the five Leaf tools plus the harness's `exec`, stdlib only.

It is bind-mounted read-only into the sandbox and started as `python3 -I -S runner.py`,
so it must not import anything from the project. Tool outputs follow docs/LEAF_CONTRACT.md §3
byte for byte, because the model was trained on exactly those shapes.

Protocol (one JSON object per line, both directions; arguments are never spliced into a
shell string):

    runner.py serve --workdir DIR [--reap namespace|group] [--default-timeout S]
                    [--max-timeout S] [--bash-chars N]
        answers requests from stdin until EOF
    runner.py once ...   same options, answers exactly one request

    {"id": 1, "op": "tool", "name": "Read", "args": {...}}
        -> {"id": 1, "ok": true, "output": "...", "error": false}
           (error: the tool failed, e.g. "FileNotFoundError: …"; the output says how)
    {"id": 2, "op": "exec", "command": "pytest -q", "timeout": 600, "max_chars": 200000}
        -> {"id": 2, "ok": true, "exit_code": 0, "stdout": "...", "stderr": "...",
            "timed_out": false, "seconds": 1.2, "truncated": false}
    {"id": 3, "op": "ping"} -> {"id": 3, "ok": true, "pid": 2}
    anything malformed -> {"id": ..., "ok": false, "error": "..."}

The sandboxed backend passes `--fd-in N --fd-out M`: private pipes that bwrap's init
does not keep, so no sandboxed process holds them, and the runner makes itself
non-dumpable before it reads anything, so /proc/<runner>/fd and ptrace are closed to
the commands it runs (same uid, no capabilities). The first line on fd-in is then a
hex key, and every reply goes out as `<hex HMAC-SHA256 of the JSON> <JSON>`: a reply
the host did not get from this runner fails the check, whatever route it took.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import glob as globlib
import hashlib
import hmac
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

READ_OUTPUT_CHARS = 20_000
GLOB_LIMIT = 1_000
EXEC_OUTPUT_CHARS = 200_000
KILL_PASSES = 200
# After the main shell exits, how long stragglers may keep writing before they are killed.
EXIT_DRAIN_SECONDS = 0.1


class Settings:
    """Per-runner knobs, set from the command line by the host."""

    # "namespace": we own a pid namespace, so a timed-out command's setsid escapes can
    # be found in /proc; "group": commands stay in the host-killed process group.
    reap = "group"
    default_timeout = 120.0
    max_timeout = 1800.0
    bash_chars = 30_000
    # The test services' daemons (a `detach` exec's survivors): they and their children
    # (a PostgreSQL backend per connection) outlive every command; the runner's end kills
    # them with the rest.
    kept: ClassVar[set[int]] = set()


class ToolFailure(Exception):
    """A tool failed with exactly this text (already in Leaf's `Type: message` form)."""


# --------------------------------------------------------------------------- tools


def run_tool(name: str, arguments: Any) -> str:
    return tool_reply(name, arguments)[0]


def tool_reply(name: str, arguments: Any) -> tuple[str, bool]:
    """The output the model reads, and whether the call failed (unknown tool, or the tool
    raised): said here, where it is known, so nobody guesses it from the text."""
    if not isinstance(arguments, dict):
        arguments = {}
    handlers = {"Read": _read, "Write": _write, "Edit": _edit, "Glob": _glob, "Bash": _bash}
    handler = handlers.get(name)
    if handler is None:
        return f"Unknown tool: {name}", True
    try:
        return handler(arguments), False
    except ToolFailure as exc:
        return str(exc), True
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", True


def _read(arguments: dict[str, Any]) -> str:
    path = _path(arguments, "file_path")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    offset = max(1, _optional_int(arguments.get("offset"), 1))
    limit = _optional_int(arguments.get("limit"), 0)
    end = len(lines) if limit <= 0 else min(len(lines), offset - 1 + limit)
    numbered = "\n".join(
        f"{number}. {line}" for number, line in enumerate(lines[offset - 1:end], start=offset)
    )
    return _truncate(f"{_display(path)}\n{numbered}", READ_OUTPUT_CHARS)


def _write(arguments: dict[str, Any]) -> str:
    path = _path(arguments, "file_path")
    content = str(arguments.get("content", ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return f"Wrote {_display(path)} ({len(content)} bytes)."


def _edit(arguments: dict[str, Any]) -> str:
    path = _path(arguments, "file_path")
    old = str(arguments.get("old_string") or "")
    new = str(arguments.get("new_string") or "")
    if not old:
        raise ValueError("old_string must be non-empty")
    text = path.read_text(encoding="utf-8", errors="replace")
    count = text.count(old)
    replace_all = _truthy(arguments.get("replace_all"))
    if count == 0:
        raise ValueError("old_string was not found")
    if count > 1 and not replace_all:
        raise ValueError(
            f"old_string matched {count} times; set replace_all=true or use a more specific "
            "old_string"
        )
    path.write_text(text.replace(old, new) if replace_all else text.replace(old, new, 1),
                    encoding="utf-8")
    changed = count if replace_all else 1
    return f"Edited {_display(path)} ({changed} replacement{'' if changed == 1 else 's'})."


def _glob(arguments: dict[str, Any]) -> str:
    pattern = str(arguments.get("pattern") or "")
    if not pattern:
        raise ValueError("pattern is required")
    root = _resolve(arguments.get("path") or ".")
    # glob.glob (not Path.glob) as in Leaf: hidden entries such as .git stay out of `**`.
    matches = sorted(
        _display(Path(match))
        for match in globlib.glob(str(root / pattern), recursive=True)
        if Path(match).is_file()
    )
    if not matches:
        return "No files matched."
    shown = "\n".join(matches[:GLOB_LIMIT])
    if len(matches) > GLOB_LIMIT:
        shown += f"\n... {len(matches) - GLOB_LIMIT} more files"
    return shown


def _bash(arguments: dict[str, Any]) -> str:
    command = str(arguments.get("command") or "")
    if not command:
        raise ValueError("command is required")
    timeout = bash_timeout(arguments, Settings.default_timeout, Settings.max_timeout)
    limit = Settings.bash_chars
    # A head of 4 bytes per char (UTF-8 worst case) always covers the part that is shown.
    # Like Leaf's subprocess.run, wait until every writer has closed the pipes (late
    # output from background children is kept); what detached from them lives on.
    run = run_command(command, timeout, keep_bytes=4 * limit + 64, keep_tail=False,
                      wait_for_pipes=True, count=True)
    if run.timed_out:
        # Leaf: TimeoutExpired's raw bytes, decoded with errors="replace" and no newline
        # translation, so "\r\n" stays.
        head = f"Timed out after {timeout:.1f}s\nSTDOUT:\n"
        out, err = run.stdout.raw_text(), run.stderr.raw_text()
        total = run.stdout.raw_chars + run.stderr.raw_chars
    else:
        # Leaf: text mode, strict UTF-8; one bad byte anywhere and the call fails.
        for capture in (run.stdout, run.stderr):
            if capture.error is not None:
                raise ToolFailure(f"UnicodeDecodeError: {capture.error}")
        head = f"Exit code: {run.returncode}\nSTDOUT:\n"
        out, err = run.stdout.text(), run.stderr.text()
        total = run.stdout.text_chars() + run.stderr.text_chars()
    text = f"{head}{out}\nSTDERR:\n{err}"
    # The count is Leaf's: characters of the whole output, dropped bytes included.
    return _truncate(text, limit, total=total + len(head) + len("\nSTDERR:\n"))


def bash_timeout(arguments: dict[str, Any], default: float, ceiling: float) -> float:
    """Seconds for a Bash call: `timeout_ms` wins; a `timeout` above 1000 is milliseconds."""
    if arguments.get("timeout_ms") is not None:
        value = max(0.1, float(arguments["timeout_ms"]) / 1000.0)
    elif arguments.get("timeout") is None:
        value = default
    else:
        raw = float(arguments["timeout"])
        value = max(0.1, raw / 1000.0 if raw > 1000 else raw)
    return min(value, ceiling)


def _path(arguments: dict[str, Any], key: str) -> Path:
    value = arguments.get(key) or arguments.get("path")
    if not value:
        raise ValueError(f"{key} is required")
    return _resolve(value)


def _resolve(value: Any) -> Path:
    # Joined to the workdir as Leaf does, so errors quote the absolute path.
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else Path.cwd() / path


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _optional_int(value: Any, default: int) -> int:
    if value in (None, ""):
        return default
    return int(value)


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value or "").strip().lower() in {"1", "true", "yes", "on"}


def _truncate(text: str, limit: int, total: int | None = None) -> str:
    """`total`: the length of the whole text when only a head of it was kept."""
    total = len(text) if total is None else total
    if total <= limit:
        return text
    return f"{text[:limit]}\n[truncated {total - limit} chars]"


# --------------------------------------------------------------------------- commands


class Capture:
    """Bounded capture of one output stream: a head (tools) or a tail (test logs).

    With `count`, the whole stream (kept or not) is also measured as Leaf would see it
    decoded: its length in characters, its first strict UTF-8 error, its "\r\n" pairs."""

    def __init__(self, keep_bytes: int, keep_tail: bool, count: bool = False) -> None:
        self.keep_bytes = keep_bytes
        self.keep_tail = keep_tail
        self.data = bytearray()
        self.dropped = 0
        self.count = count
        self.raw_chars = 0  # decoded with errors="replace", newlines untouched
        self.crlf = 0
        self.error: str | None = None  # strict decoding's message, as str(UnicodeDecodeError)
        self._fed = 0
        self._last_cr = False
        self._strict = codecs.getincrementaldecoder("utf-8")("strict")
        self._lenient = codecs.getincrementaldecoder("utf-8")("replace")

    def add(self, chunk: bytes) -> None:
        if self.count:
            self._measure(chunk, final=False)
        if self.keep_tail:
            self.data += chunk
            excess = len(self.data) - self.keep_bytes
            if excess > 0:
                del self.data[:excess]
                self.dropped += excess
            return
        room = max(0, self.keep_bytes - len(self.data))
        self.data += chunk[:room]
        self.dropped += len(chunk) - min(room, len(chunk))

    def finish(self) -> None:
        if self.count:
            self._measure(b"", final=True)

    def _measure(self, chunk: bytes, final: bool) -> None:
        # "\r" and "\n" never occur inside a multi-byte sequence: count them on bytes.
        self.crlf += chunk.count(b"\r\n") + (self._last_cr and chunk[:1] == b"\n")
        if chunk:
            self._last_cr = chunk[-1:] == b"\r"
        if chunk.isascii() and not self._lenient.getstate()[0] and not final:
            self.raw_chars += len(chunk)  # the common case, without decoding
        else:
            self.raw_chars += len(self._lenient.decode(chunk, final))
            if self.error is None:
                base = self._fed - len(self._strict.getstate()[0])
                try:
                    self._strict.decode(chunk, final)
                except UnicodeDecodeError as exc:
                    self.error = _decode_message(exc, base)
        self._fed += len(chunk)

    def text_chars(self) -> int:
        """Characters of the whole stream in text mode (valid UTF-8, newlines translated)."""
        return self.raw_chars - self.crlf

    def raw_text(self) -> str:
        return bytes(self.data).decode("utf-8", errors="replace")

    def text(self) -> str:
        # Same newline translation as subprocess's text mode, which Leaf used.
        return self.raw_text().replace("\r\n", "\n").replace("\r", "\n")


def _decode_message(exc: UnicodeDecodeError, base: int) -> str:
    """str(exc) as a decode of the whole stream would word it: positions from its start."""
    start, end = base + exc.start, base + exc.end
    if exc.end == exc.start + 1:
        return (f"'utf-8' codec can't decode byte 0x{exc.object[exc.start]:02x} in position "
                f"{start}: {exc.reason}")
    return f"'utf-8' codec can't decode bytes in position {start}-{end - 1}: {exc.reason}"


class CommandRun:
    def __init__(self, returncode: int | None, stdout: Capture, stderr: Capture,
                 timed_out: bool, seconds: float) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        self.seconds = seconds


def run_command(command: str, timeout: float, *, keep_bytes: int, keep_tail: bool,
                wait_for_pipes: bool = False, count: bool = False) -> CommandRun:
    """`/bin/bash -lc COMMAND` in the cwd, bounded in time and memory.

    wait_for_pipes (Bash, as Leaf): read until every writer closed the pipes, and leave
    alive whatever detached from them (a server started in the background serves the
    next call). Otherwise (exec) stragglers get EXIT_DRAIN_SECONDS, then die. On timeout
    everything this call started dies either way."""
    started = time.monotonic()
    deadline = started + max(0.1, timeout)
    before = set(_live_pids())
    # Group mode has no namespace to die with: commands stay in the runner's process
    # group, which the host kills when it stops the sandbox (background ones included).
    proc = subprocess.Popen(
        ["/bin/bash", "-lc", command],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=Settings.reap == "namespace", close_fds=True,
    )
    captures = {proc.stdout.fileno(): Capture(keep_bytes, keep_tail, count),  # type: ignore[union-attr]
                proc.stderr.fileno(): Capture(keep_bytes, keep_tail, count)}  # type: ignore[union-attr]
    selector = selectors.DefaultSelector()
    for fd in captures:
        selector.register(fd, selectors.EVENT_READ)
    timed_out = False
    exited_at: float | None = None
    returncode: int | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if not wait_for_pipes and proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > EXIT_DRAIN_SECONDS:
                    break
            wait = min(deadline - now, 0.05 if exited_at else 0.5)
            for key, _ in selector.select(wait):
                _pump(selector, key.fd, captures[key.fd])
        if not timed_out:
            try:
                returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out or not wait_for_pipes:
            kill_call(proc.pid, before)
        proc.wait()
        _reap_children()
        _drain(selector, captures, time.monotonic() + (0.5 if timed_out or not wait_for_pipes
                                                       else 0.0))
    finally:
        selector.close()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    for capture in captures.values():
        capture.finish()
    out, err = captures.values()
    return CommandRun(returncode, out, err, timed_out, time.monotonic() - started)


def _pump(selector: selectors.BaseSelector, fd: int, capture: Capture) -> None:
    chunk = os.read(fd, 65536)
    if chunk:
        capture.add(chunk)
    else:
        selector.unregister(fd)


def _drain(selector: selectors.BaseSelector, captures: dict[int, Capture],
           deadline: float) -> None:
    """Read what is left in the pipes once every writer is dead."""
    while selector.get_map():
        wait = deadline - time.monotonic()
        if wait <= 0:
            return
        events = selector.select(wait)
        if not events:
            return
        for key, _ in events:
            _pump(selector, key.fd, captures[key.fd])


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_call(pid: int, before: set[int]) -> None:
    """Kill what one command started: in our own pid namespace its session and every
    process that was not there before it (setsid and double forks included); in group
    mode the command and its descendants. Processes of earlier calls live on, as in
    Leaf, until the sandbox stops."""
    services = _kept_trees()
    if Settings.reap == "namespace":
        _kill_group(pid)
        _kill_namespace(before | services)
        return
    group = os.getpgid(0)
    newcomers = [other for other in _live_pids()
                 if other not in before | services and other != os.getpid()
                 and _pgid(other) == group]
    for victim in {pid, *_descendants(pid), *newcomers}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def _kept_trees() -> set[int]:
    """The services' daemons still alive and every process below them."""
    alive = {pid for pid in Settings.kept if _stat(pid)[0] not in ("Z", "X")}
    Settings.kept = alive
    return alive | set(_descendants(*alive)) if alive else set()


def _descendants(*roots: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(_stat(int(entry))[1], []).append(int(entry))
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_leftovers() -> None:
    """At the runner's end, in a namespace: everything (group mode: the host's killpg)."""
    if Settings.reap == "namespace":
        _kill_namespace(set())


def _kill_namespace(spare: set[int]) -> None:
    keep = _self_and_ancestors() | spare
    for _ in range(KILL_PASSES):
        victims = [pid for pid in _live_pids() if pid not in keep]
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _reap_children()
        time.sleep(0.002)
    _reap_children()


def _self_and_ancestors() -> set[int]:
    keep = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        pid = _stat(pid)[1]
        if pid <= 0:
            break
        keep.add(pid)
    return keep


def _stat(pid: int) -> tuple[str, int]:
    """(state, ppid) of a process; ("X", 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return "X", 0
    fields = raw[raw.rfind(")") + 2:].split()  # the command name may hold spaces and parens
    return fields[0], int(fields[1])


def _live_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _stat(int(entry))[0] not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_exec(request: dict[str, Any]) -> dict[str, Any]:
    command = request.get("command")
    if not isinstance(command, str) or not command:
        raise ValueError("exec needs a non-empty string 'command'")
    timeout = min(float(request.get("timeout") or Settings.default_timeout),
                  Settings.max_timeout)
    max_chars = int(request.get("max_chars") or EXEC_OUTPUT_CHARS)
    # `detach` (the host's start of the test services, sandbox/services.py): what the
    # command leaves running lives on, and is spared when later commands are reaped.
    detach = request.get("detach") is True
    before = set(_live_pids()) if detach else set()
    # Test failures are reported at the end, so keep the tail.
    run = run_command(command, timeout, keep_bytes=max_chars, keep_tail=True,
                      wait_for_pipes=detach)
    if detach and not run.timed_out:
        survivors = set(_live_pids()) - before - _self_and_ancestors()
        if Settings.reap == "group":  # the host's /proc: only what stayed in our group
            survivors = {pid for pid in survivors if _pgid(pid) == os.getpgid(0)}
        Settings.kept |= survivors
    result: dict[str, Any] = {"exit_code": run.returncode, "timed_out": run.timed_out,
                              "seconds": round(run.seconds, 3),
                              "truncated": bool(run.stdout.dropped or run.stderr.dropped)}
    for name, capture in (("stdout", run.stdout), ("stderr", run.stderr)):
        marker = f"[truncated {capture.dropped} bytes]\n" if capture.dropped else ""
        result[name] = marker + capture.text()
    return result


# --------------------------------------------------------------------------- protocol


def handle(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        return {"id": None, "ok": False, "error": "request must be a JSON object"}
    reply: dict[str, Any] = {"id": request.get("id"), "ok": True}
    op = request.get("op")
    try:
        if op == "tool":
            reply["output"], reply["error"] = tool_reply(str(request.get("name") or ""),
                                                         request.get("args"))
        elif op == "exec":
            reply.update(run_exec(request))
        elif op == "ping":
            reply["pid"] = os.getpid()
        else:
            return {"id": request.get("id"), "ok": False, "error": f"unknown op: {op!r}"}
    except Exception as exc:
        return {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return reply


def seal() -> None:
    """PR_SET_DUMPABLE 0: same-uid processes without CAP_SYS_PTRACE (every command we
    run) can no longer open /proc/<runner>/fd/*, read its memory or ptrace it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def serve(single: bool, fd_in: int | None = None, fd_out: int | None = None) -> int:
    reader: BinaryIO
    writer: BinaryIO
    if fd_in is not None and fd_out is not None:
        seal()
        reader = os.fdopen(fd_in, "rb")
        writer = os.fdopen(fd_out, "wb")
        key: bytes | None = bytes.fromhex(reader.readline().decode("ascii").strip())
    else:
        reader, writer, key = sys.stdin.buffer, sys.stdout.buffer, None
    try:
        return _answer(reader, writer, key, single)
    finally:
        kill_leftovers()


def _answer(reader: Any, writer: Any, key: bytes | None, single: bool) -> int:
    while True:
        line = reader.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            reply = {"id": None, "ok": False, "error": f"bad JSON: {exc}"}
        else:
            reply = handle(request)
        body = json.dumps(reply).encode()
        if key is not None:
            body = hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body
        writer.write(body + b"\n")
        writer.flush()
        if single:
            return 0


def relay(port: int, unix_path: str) -> None:
    """The setup phase's way out, inside: 127.0.0.1:`port` is relayed to a host socket,
    the egress proxy's (what https_proxy names; sandbox/egress.py decides where it may
    go) or the package index endpoint's (what PIP_INDEX_URL names)."""
    import socket
    import threading

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def serve_one(client: socket.socket) -> None:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            try:
                upstream.connect(unix_path)
            except OSError:
                return
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()

    def accept() -> None:
        while True:
            client, _ = server.accept()
            threading.Thread(target=serve_one, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True, name=f"relay-{port}").start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="FrogNano sandbox tool runner")
    parser.add_argument("mode", choices=["serve", "once"])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reap", choices=["namespace", "group"], default="group")
    parser.add_argument("--default-timeout", type=float, default=Settings.default_timeout)
    parser.add_argument("--max-timeout", type=float, default=Settings.max_timeout)
    parser.add_argument("--bash-chars", type=int, default=Settings.bash_chars)
    parser.add_argument("--fd-in", type=int, help="request pipe (default: stdin)")
    parser.add_argument("--fd-out", type=int, help="reply pipe (default: stdout)")
    parser.add_argument("--egress-socket", help="the host's egress proxy (setup phase)")
    parser.add_argument("--egress-port", type=int, default=0)
    parser.add_argument("--index-socket", help="the host's package index endpoint (setup)")
    parser.add_argument("--index-port", type=int, default=0)
    options = parser.parse_args(argv)
    if options.egress_socket:
        relay(options.egress_port, options.egress_socket)
    if options.index_socket:
        relay(options.index_port, options.index_socket)
    Settings.reap = options.reap
    Settings.default_timeout = options.default_timeout
    Settings.max_timeout = options.max_timeout
    Settings.bash_chars = options.bash_chars
    os.chdir(options.workdir)
    return serve(options.mode == "once", options.fd_in, options.fd_out)


if __name__ == "__main__":
    raise SystemExit(main())
