"""Scenario 6: sandbox abuse. Each attack runs as the agent's Bash (or Write) tool in a
real bubblewrap sandbox with the limits a worker uses; it must be contained, and the
same sandbox must answer the next call (what the worker's next step or run needs)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import SandboxLimits
from sandbox.base import Sandbox, SandboxError
from tests.reliability.conftest import Recorder
from tests.support.sandbox_support import HAVE_BWRAP, host_pids_with, host_repo, running_sandbox

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

WORKER_LIMITS = SandboxLimits()  # what run_issue gives every run
SECRET_VARIABLE = "FROGNANO_RELIABILITY_HOST_SECRET"


def bash(sandbox: Sandbox, command: str, timeout: float = 30) -> tuple[str, float]:
    started = time.monotonic()
    output = sandbox.run_tool("Bash", {"command": command, "timeout": timeout})
    return output, time.monotonic() - started


def still_serves(sandbox: Sandbox) -> bool:
    return "Exit code: 0\nSTDOUT:\nalive" in sandbox.run_tool("Bash", {"command": "echo alive"})


def sandbox_uid_processes(sandbox: Sandbox) -> int:
    """Host processes of the sandbox's uid: its own leased uid when the worker is root
    (sandbox/uid_pool.py), the worker's uid otherwise."""
    uid = sandbox.uid  # type: ignore[attr-defined]
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with running_sandbox("bubblewrap", WORKER_LIMITS) as sb:
        yield sb


def test_fork_bomb(sandbox: Sandbox, scorecard: Recorder) -> None:
    record = scorecard("6a-sandbox-fork-bomb", "Sandbox abuse: fork bomb",
                       "stopped by the process limit and the timeout; nothing left "
                       "running; the sandbox serves the next call")
    before = sandbox_uid_processes(sandbox)
    assert before >= 3, "bwrap, its init and the runner run as the sandbox uid"
    _, seconds = bash(sandbox, ":(){ :|:& };:; sleep 5", timeout=8)
    time.sleep(0.5)
    after = sandbox_uid_processes(sandbox)
    record.observed = {"call seconds": seconds, "sandbox-uid processes before": before,
                       "after": after, "max processes": WORKER_LIMITS.max_processes}
    assert seconds < 8 + 15
    assert after <= before, "every forked process was reaped"
    assert still_serves(sandbox)


def test_memory_bomb(sandbox: Sandbox, scorecard: Recorder) -> None:
    record = scorecard("6b-sandbox-memory-bomb", "Sandbox abuse: memory bomb",
                       "allocation beyond the memory limit fails inside; the sandbox "
                       "serves the next call")
    output, seconds = bash(sandbox, "python3 -c 'x = bytearray(64 * 1024**3)'; "
                                    "python3 -c 'a = []\nwhile True: a.append(bytes(2**30))'")
    record.observed = {"MemoryError raised": output.count("MemoryError"),
                       "call seconds": seconds,
                       "limit GiB": WORKER_LIMITS.memory_bytes / 1024**3}
    assert output.count("MemoryError") == 2, output
    assert still_serves(sandbox)


def test_filling_the_disk_ends_the_run_with_a_named_reason(scorecard: Recorder) -> None:
    record = scorecard("6c-sandbox-disk-fill", "Sandbox abuse: filling the disk",
                       "one file stops at RLIMIT_FSIZE; many files are stopped by the "
                       "workspace disk quota, and the run ends with `disk_quota`")
    limits = replace(WORKER_LIMITS, max_file_bytes=64 * 1024**2, disk_bytes=256 * 1024**2)
    with running_sandbox("bubblewrap", limits) as sandbox:
        one_file, _ = bash(sandbox, "head -c 100M /dev/zero > big; ls -l big")
        assert "File size limit exceeded" in one_file or "File too large" in one_file
        started = time.monotonic()
        with pytest.raises(SandboxError, match="disk_quota") as raised:
            bash(sandbox, "for i in $(seq 1 400); do head -c 60M /dev/zero > f$i; done",
                 timeout=120)
        seconds = time.monotonic() - started
        workspace = sandbox.config.workspace  # type: ignore[attr-defined]
        used = sum(p.stat().st_blocks * 512 for p in workspace.rglob("*") if p.is_file())
    record.observed = {"single file capped at MiB": limits.max_file_bytes / 1024**2,
                       "quota MiB": limits.disk_bytes / 1024**2,
                       "written before the kill MiB": round(used / 1024**2),
                       "seconds to stop": seconds, "reason": str(raised.value)[:60]}
    assert used < limits.disk_bytes + 1024**3, "stopped within a second of writing"
    with running_sandbox("bubblewrap", WORKER_LIMITS) as fresh:
        assert still_serves(fresh), "the next run gets a working sandbox"


def test_ten_gigabytes_of_output(sandbox: Sandbox, scorecard: Recorder) -> None:
    record = scorecard("6d-sandbox-output-flood", "Sandbox abuse: 10 GB of output",
                       "captured output stays within max_output_chars; the flood is cut "
                       "by the timeout at worst; the sandbox serves the next call")
    output, seconds = bash(sandbox, "head -c 10000000000 /dev/zero | tr '\\0' a", timeout=60)
    record.observed = {"chars returned": len(output), "call seconds": seconds,
                       "timed out": output.startswith("Timed out")}
    assert len(output) <= WORKER_LIMITS.max_output_chars + 200
    assert still_serves(sandbox)


def test_infinite_loop(sandbox: Sandbox, scorecard: Recorder) -> None:
    record = scorecard("6e-sandbox-infinite-loop", "Sandbox abuse: infinite loop",
                       "killed at the command's timeout; the sandbox serves the next call")
    output, seconds = bash(sandbox, "while :; do :; done", timeout=3)
    record.observed = {"call seconds": seconds, "timed out": output.startswith("Timed out")}
    assert output.startswith("Timed out") and seconds < 3 + 10
    assert still_serves(sandbox)


def test_daemons_do_not_outlive_the_sandbox(sandbox: Sandbox, scorecard: Recorder) -> None:
    record = scorecard("6f-sandbox-daemons", "Sandbox abuse: daemons",
                       "nohup, setsid and double-forked processes live on between calls, as "
                       "in Leaf, and are all killed when the host stops the sandbox (before "
                       "every snapshot) or closes it")
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}"
    quiet = ">/dev/null 2>&1"
    bash(sandbox, f"nohup sleep {marker}1 {quiet} & setsid sleep {marker}2 {quiet} & "
                  f"( ( sleep {marker}3 {quiet} & ) & ); disown -a; echo started")
    time.sleep(0.5)
    between_calls = len(host_pids_with(f"sleep {marker}"))
    sandbox.stop()
    time.sleep(0.5)
    after_stop = host_pids_with(f"sleep {marker}")
    bash(sandbox, f"setsid sleep {marker}4 {quiet} & echo again")
    sandbox.close()
    time.sleep(0.5)
    after_close = host_pids_with(f"sleep {marker}")
    record.observed = {"daemons started": 3, "alive between calls": between_calls,
                       "left after stop()": len(after_stop),
                       "left after close()": len(after_close)}
    assert between_calls == 3, "a daemon serves the model's next call, as in Leaf"
    assert after_stop == [] and after_close == [], "the host sees every sandbox process"


def test_symlinks_to_host_paths(sandbox: Sandbox, scorecard: Recorder, tmp_path: Path) -> None:
    record = scorecard("6g-sandbox-symlinks", "Sandbox abuse: symlinks to host paths",
                       "links resolve inside the sandbox's own root: host files are "
                       "neither read nor written, and the diff holds links, not contents")
    host_target = Path(f"/tmp/frognano-reliability-{uuid.uuid4().hex}")
    output, _ = bash(sandbox, f"ln -s /etc/shadow shadow; ln -s /root root-home; "
                              f"ln -s {host_target} planted; cat shadow; ls root-home; "
                              f"echo pwned > planted; cat planted")
    written = sandbox.run_tool("Write", {"file_path": "planted", "content": "pwned"})
    read = sandbox.run_tool("Read", {"file_path": "shadow"})
    sandbox.stop()
    diff = host_repo(sandbox).snapshot().diff
    shadow = Path("/etc/shadow").read_text() if Path("/etc/shadow").exists() else ""
    root_line = next((line for line in shadow.splitlines() if line.startswith("root:")), "")
    leaked = bool(root_line) and (root_line in output or root_line in read
                                  or root_line in diff)
    record.observed = {"host file created": host_target.exists(), "shadow leaked": leaked,
                       "symlinks in diff": diff.count("new file mode 120000")}
    assert not host_target.exists(), written
    assert not leaked
    assert diff.count("new file mode 120000") == 3
    assert still_serves(sandbox)


def test_proc_snooping(scorecard: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    record = scorecard("6h-sandbox-proc-snooping", "Sandbox abuse: /proc snooping",
                       "only the sandbox's own processes are visible; no host variable "
                       "or command line leaks")
    secret = uuid.uuid4().hex
    monkeypatch.setenv(SECRET_VARIABLE, secret)
    with running_sandbox("bubblewrap", WORKER_LIMITS) as sandbox:
        output, _ = bash(sandbox, "ls /proc | grep -cE '^[0-9]+$'; "
                                  "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | "
                                  "tr '\\0' '\\n'; cat /proc/1/status | head -3; "
                                  "ls /proc/1/root/ 2>&1 | head; cat /proc/self/mountinfo")
        visible = int(output.split("STDOUT:\n", 1)[1].split("\n", 1)[0])
        record.observed = {"processes visible": visible, "host secret leaked": secret in output,
                           "host pid 1 visible": "systemd" in output or "init" in output}
        assert secret not in output
        assert visible < 10, output[:2000]
        assert still_serves(sandbox)
