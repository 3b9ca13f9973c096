"""Real bubblewrap under attack: every way out must fail and leave the host intact."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import SandboxConfig, SandboxLimits, SandboxUnavailable, open_sandbox
from tests.support.sandbox_support import (
    HAVE_BWRAP,
    host_repo,
    reachable_dir,
    running_sandbox,
    wait_gone,
)

pytestmark = [pytest.mark.bwrap,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap (bwrap) is not installed")]
SECRET = f"frognano-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def sb() -> Iterator:
    os.environ["FROGNANO_TEST_SECRET"] = SECRET  # present in the host env at start
    try:
        with running_sandbox("bubblewrap") as sandbox:
            yield sandbox
    finally:
        del os.environ["FROGNANO_TEST_SECRET"]


@pytest.fixture(scope="module")
def tight() -> Iterator:
    limits = SandboxLimits(memory_bytes=512 * 1024**2, max_processes=32)
    with running_sandbox("bubblewrap", limits) as sandbox:
        yield sandbox


@pytest.fixture()
def server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1 that records who got through."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    hits: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            hits.append("connected")
            conn.sendall(b"hello from host\n")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], hits
    stop.set()
    thread.join()
    listener.close()


def bash(sb, command: str, timeout: float = 20) -> str:
    return sb.run_tool("Bash", {"command": command, "timeout": timeout})


CONNECT = ("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), "
           "timeout=3); print(s.recv(100).decode())\"")


def test_no_network_in_tools(sb, server) -> None:
    port, hits = server
    out = bash(sb, CONNECT.format(port=port))
    assert out.startswith("Exit code: 1") and "ConnectionRefusedError" in out
    assert hits == []
    dns = bash(sb, "getent hosts example.com || echo resolve-failed")
    assert "resolve-failed" in dns
    assert "Exit code: 0" in bash(sb, "cat /proc/net/dev | grep -v -E 'lo:|Inter|face' | wc -l")
    assert "STDOUT:\n0\n" in bash(sb, "grep -c -v -E 'lo:|Inter|face' /proc/net/dev")


PROXIED = ("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', 3128), "
           "timeout=3); s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'); "
           "print(s.recv(200).decode().splitlines()[0])\"")


def test_exec_with_network_never_reaches_the_host(sb, server) -> None:
    """The setup phase has a network namespace of its own: the host's 127.0.0.1 is not
    its loopback, and the egress proxy refuses it (sandbox/egress.py)."""
    port, hits = server
    direct = sb.exec(CONNECT.format(port=port), network=True, timeout=20)
    assert direct.exit_code == 1 and "ConnectionRefusedError" in direct.stderr, direct
    proxied = sb.exec(PROXIED.format(port=port), network=True, timeout=20)
    assert proxied.ok and proxied.stdout.startswith("HTTP/1.1 403"), proxied
    assert hits == []
    # ...and the persistent runner has no network (nor the proxy) afterwards.
    assert "ConnectionRefusedError" in bash(sb, CONNECT.format(port=port))
    assert "ConnectionRefusedError" in bash(sb, PROXIED.format(port=port))


def test_writes_outside_workspace_fail(sb) -> None:
    marker = uuid.uuid4().hex
    targets = [f"/usr/{marker}", f"/etc/{marker}", f"/opt/{marker}", f"/{marker}",
               f"/root/{marker}"]
    for target in targets:
        out = bash(sb, f"echo evil > {target}")
        assert not out.startswith("Exit code: 0"), (target, out)
    # .git is the sandbox's own, writable copy: the host never reads it (solver/hostgit.py).
    assert bash(sb, f"echo x > .git/{marker}").startswith("Exit code: 0")
    workspace = sb.config.workspace
    for host_path in (f"/usr/{marker}", f"/etc/{marker}", f"/opt/{marker}", f"/root/{marker}"):
        assert not Path(host_path).exists()
    # The workspace itself is writable, and git inside can read the repository.
    assert bash(sb, "echo ok > inside.txt && git status --short").startswith("Exit code: 0")
    assert (workspace / "inside.txt").read_text() == "ok\n"


def test_host_environment_and_secrets_are_invisible(sb) -> None:
    out = bash(sb, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert SECRET not in out and "FROGNANO_TEST_SECRET" not in out
    assert "HOME=/frognano/home" in out and "PYTHONDONTWRITEBYTECODE=1" in out
    for secret_file in ("/etc/shadow", "/etc/gshadow", "/root", "/home", "/etc/ssh"):
        assert "No such file or directory" in bash(sb, f"ls {secret_file}"), secret_file
    # As root, the sandbox runs as a leased uid of its own, never as root.
    assert "STDOUT:\nsandbox\n" in bash(sb, "id -un") or os.geteuid() != 0
    assert "STDOUT:\n0\n" not in bash(sb, "id -u")


def test_symlinks_in_workspace_do_not_get_host_files_chowned() -> None:
    with reachable_dir() as root:
        victim = root / "victim.txt"
        victim.write_text("host file\n")
        workspace = root / "ws"
        workspace.mkdir()
        (workspace / "link").symlink_to(victim)
        config = SandboxConfig(workspace=workspace, private_dir=root / "private")
        with open_sandbox("bubblewrap", config) as sandbox:
            out = sandbox.run_tool("Bash", {"command": "cat link; echo x > link"})
        assert "No such file or directory" in out  # the host path does not exist inside
        assert victim.stat().st_uid == os.geteuid()
        assert victim.read_text() == "host file\n"


def test_sleep_past_timeout_returns_quickly(sb) -> None:
    started = time.monotonic()
    out = sb.run_tool("Bash", {"command": "echo before; sleep 60", "timeout": 1})
    assert out == "Timed out after 1.0s\nSTDOUT:\nbefore\n\nSTDERR:\n"
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("spawn", [
    "(sleep {n} >/dev/null 2>&1 &)",
    "setsid sleep {n} >/dev/null 2>&1 &",
    "nohup sleep {n} >/dev/null 2>&1 &",
    "setsid bash -c 'trap \"\" HUP TERM; sleep {n}' >/dev/null 2>&1 & disown",
])
def test_background_processes_live_until_the_sandbox_stops(sb, spawn: str) -> None:
    """As in Leaf, a process detached from the call's pipes serves later calls; stop()
    (before every host snapshot) leaves none of them writing the tree."""
    seconds = f"{1000 + int(uuid.uuid4().int % 1000)}.5"
    assert bash(sb, spawn.format(n=seconds)).startswith("Exit code: 0")
    assert f"sleep {seconds}" in bash(sb, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    sb.stop()
    assert wait_gone(f"sleep {seconds}") == []
    assert bash(sb, "echo still-works") == "Exit code: 0\nSTDOUT:\nstill-works\n\nSTDERR:\n"


def test_a_child_holding_the_pipes_is_waited_for_then_killed_at_the_timeout(sb) -> None:
    seconds = f"{4000 + int(uuid.uuid4().int % 1000)}.5"
    assert bash(sb, f"(sleep 0.3; echo late) & sleep {seconds} & echo now", timeout=1) == (
        "Timed out after 1.0s\nSTDOUT:\nnow\nlate\n\nSTDERR:\n")
    assert wait_gone(f"sleep {seconds}") == []


def test_timed_out_command_leaves_nothing_behind(sb) -> None:
    seconds = f"{2000 + int(uuid.uuid4().int % 1000)}.5"
    out = bash(sb, f"setsid sleep {seconds} & sleep 30", timeout=0.5)
    assert out.startswith("Timed out after 0.5s")
    assert wait_gone(f"sleep {seconds}") == []


def test_fork_bomb_is_contained(tight) -> None:
    started = time.monotonic()
    out = bash(tight, "for i in $(seq 100); do sleep 3017 & done; wait", timeout=3)
    assert "Resource temporarily unavailable" in out
    assert time.monotonic() - started < 15
    count = bash(tight, "ls -d /proc/[0-9]* | wc -l")
    # bwrap's init, the runner, bash and ls: nothing left over from the bomb.
    assert count.startswith("Exit code: 0\nSTDOUT:\n") and int(count.split("\n")[2]) <= 5
    assert wait_gone("sleep 3017") == []


def test_memory_hog_is_contained(tight) -> None:
    out = bash(tight, "python3 -c 'b = bytearray(2 * 1024**3); print(len(b))'")
    assert out.startswith("Exit code: 1") and "MemoryError" in out
    assert bash(tight, "echo alive").endswith("alive\n\nSTDERR:\n")


def test_runner_killed_from_inside_is_restarted(sb) -> None:
    out = bash(sb, "kill -9 $PPID; sleep 5")
    assert out.startswith("SandboxError:") and "restarted" in out
    assert bash(sb, "echo back") == "Exit code: 0\nSTDOUT:\nback\n\nSTDERR:\n"


def test_diff_is_computed_on_the_host(sb) -> None:
    assert sb.run_tool("Write", {"file_path": "diffme.txt", "content": "new\n"}).startswith(
        "Wrote diffme.txt")
    sb.stop()
    patch = host_repo(sb).snapshot().diff
    assert "diff --git a/diffme.txt b/diffme.txt" in patch and "+new" in patch
    assert bash(sb, "echo back").endswith("back\n\nSTDERR:\n"), "stop() then a fresh runner"


def test_missing_bwrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with reachable_dir() as root, pytest.raises(SandboxUnavailable, match="apt-get install"):
        open_sandbox("bubblewrap", SandboxConfig(workspace=root, private_dir=root / "p"))
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        open_sandbox("docker", SandboxConfig(workspace=Path("/"), private_dir=Path("/")))


@pytest.mark.skipif(os.geteuid() != 0, reason="uid leases are for workers running as root")
def test_a_fork_bomb_in_one_sandbox_does_not_stop_another(tight) -> None:
    """Each sandbox has a uid of its own, so RLIMIT_NPROC is counted per sandbox."""
    bomb = threading.Thread(target=bash, args=(tight, "while :; do sleep 3017 & done",),
                            kwargs={"timeout": 6})
    bomb.start()
    time.sleep(1.5)  # the bomb is at its limit now
    try:
        with running_sandbox("bubblewrap") as other:
            assert bash(other, "echo unaffected") == \
                "Exit code: 0\nSTDOUT:\nunaffected\n\nSTDERR:\n"
            uid_inside = bash(other, "id -u; id -un").split("\n")[2:4]
            assert int(uid_inside[0]) != 65534 and uid_inside[1] == "sandbox"
    finally:
        bomb.join()
    assert wait_gone("sleep 3017") == []


def test_bind_sources_are_host_owned_and_checked(sb) -> None:
    """passwd/group come from a host-owned dir outside anything the sandbox can write;
    a bind source turned into a link is refused before the next start."""
    from sandbox.base import SandboxError

    files = sb._host_files
    writable = (sb.config.workspace.resolve(), sb.config.private_dir.resolve())
    assert not any(root in files.resolve().parents for root in writable)
    assert files.stat().st_uid == os.geteuid() and files.stat().st_mode & 0o777 == 0o755
    assert "sandbox:x:" in bash(sb, "cat /etc/passwd")
    appended = bash(sb, "echo x >> /etc/passwd")
    assert "Read-only file system" in appended or "Permission denied" in appended
    original = (files / "passwd").read_text()
    (files / "passwd").rename(files / "passwd.real")
    (files / "passwd").symlink_to("/etc/passwd")
    try:
        with pytest.raises(SandboxError, match="cannot be opened safely"):
            sb._check_bind_sources()
    finally:
        (files / "passwd").unlink()
        (files / "passwd.real").rename(files / "passwd")
    assert (files / "passwd").read_text() == original


def test_enforcement_is_described() -> None:
    from sandbox.enforcement import describe_host

    lines = describe_host(SandboxLimits(memory_bytes=300 * 1024**2))
    assert lines[0].startswith("whole sandbox") and "300 MiB" in lines[0]
    assert any(line.startswith("per process only") for line in lines)
