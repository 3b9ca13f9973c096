"""The five tools through the real runner, compared byte for byte with docs/LEAF_CONTRACT.md §3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.runner_client import RUNNER_PATH
from tests.support.sandbox_support import BACKENDS, running_sandbox


@pytest.fixture(scope="module", params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Iterator:
    with running_sandbox(request.param) as sandbox:
        yield sandbox


def host(sb) -> Path:
    return sb.config.workspace


def put(sb, name: str, text: str) -> None:
    """Create a file from the host that the sandbox may then edit (owned by its uid)."""
    path = host(sb) / name
    path.write_text(text)
    if os.geteuid() == 0 and hasattr(sb, "uid"):
        os.chown(path, sb.uid, sb.gid)


def tool(sb, name: str, args) -> str:
    return sb.run_tool(name, args)


# --------------------------------------------------------------------------- Read


def test_read_numbers_lines_and_uses_splitlines(sb) -> None:
    (host(sb) / "r.txt").write_bytes(b"alpha\nbeta\r\ngamma\x0cdelta\n")
    assert tool(sb, "Read", {"file_path": "r.txt"}) == (
        "r.txt\n1. alpha\n2. beta\n3. gamma\n4. delta")


def test_read_offset_limit_and_path_alias(sb) -> None:
    (host(sb) / "o.txt").write_text("a\nb\nc\nd\n")
    assert tool(sb, "Read", {"path": "o.txt", "offset": 2, "limit": 2}) == "o.txt\n2. b\n3. c"
    assert tool(sb, "Read", {"file_path": "o.txt", "offset": 0, "limit": 0}) == (
        "o.txt\n1. a\n2. b\n3. c\n4. d")
    assert tool(sb, "Read", {"file_path": "o.txt", "offset": 9}) == "o.txt\n"


def test_read_replaces_invalid_utf8(sb) -> None:
    (host(sb) / "bin.txt").write_bytes(b"ok \xff\xfe end\n")
    assert tool(sb, "Read", {"file_path": "bin.txt"}) == "bin.txt\n1. ok \ufffd\ufffd end"


def test_read_errors(sb) -> None:
    assert tool(sb, "Read", {}) == "ValueError: file_path is required"
    assert tool(sb, "Read", {"file_path": "x.py"}) == (
        f"FileNotFoundError: [Errno 2] No such file or directory: '{sb.workdir}/x.py'")
    (host(sb) / "o2.txt").write_text("a\n")
    assert tool(sb, "Read", {"file_path": "o2.txt", "offset": "abc"}) == (
        "ValueError: invalid literal for int() with base 10: 'abc'")
    (host(sb) / "adir").mkdir()
    assert tool(sb, "Read", {"file_path": "adir"}) == (
        f"IsADirectoryError: [Errno 21] Is a directory: '{sb.workdir}/adir'")


def test_read_truncates_at_20000_chars(sb) -> None:
    lines = [f"line {i:05d} " + "x" * 40 for i in range(1, 1001)]
    (host(sb) / "big.txt").write_text("\n".join(lines) + "\n")
    full = "big.txt\n" + "\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1))
    expected = full[:20000] + f"\n[truncated {len(full) - 20000} chars]"
    assert tool(sb, "Read", {"file_path": "big.txt"}) == expected


# --------------------------------------------------------------------------- Write


def test_write_counts_characters_and_creates_parents(sb) -> None:
    assert tool(sb, "Write", {"file_path": "deep/er/w.txt", "content": "héllo"}) == (
        "Wrote deep/er/w.txt (5 bytes).")
    assert (host(sb) / "deep/er/w.txt").read_bytes() == "héllo".encode()


def test_write_absolute_paths_display(sb) -> None:
    inside = f"{sb.workdir}/abs.txt"
    assert tool(sb, "Write", {"file_path": inside, "content": "1"}) == "Wrote abs.txt (1 bytes)."
    outside = f"/tmp/frognano-contract-{uuid.uuid4().hex}.txt"
    assert tool(sb, "Write", {"file_path": outside, "content": "12"}) == (
        f"Wrote {outside} (2 bytes).")
    assert tool(sb, "Bash", {"command": f"rm {outside}"}).startswith("Exit code: 0")


def test_write_requires_path(sb) -> None:
    assert tool(sb, "Write", {"content": "x"}) == "ValueError: file_path is required"


# --------------------------------------------------------------------------- Edit


def test_edit_single_and_replace_all(sb) -> None:
    put(sb, "e.py", "a = 1\nb = 1\nc = 1\n")
    assert tool(sb, "Edit", {"file_path": "e.py", "old_string": "a = 1",
                             "new_string": "a = 2"}) == "Edited e.py (1 replacement)."
    assert tool(sb, "Edit", {"file_path": "e.py", "old_string": " = 1", "new_string": " = 3",
                             "replace_all": True}) == "Edited e.py (2 replacements)."
    assert (host(sb) / "e.py").read_text() == "a = 2\nb = 3\nc = 3\n"
    put(sb, "e3.py", "x x x")
    assert tool(sb, "Edit", {"file_path": "e3.py", "old_string": "x", "new_string": "y",
                             "replace_all": "true"}) == "Edited e3.py (3 replacements)."


def test_edit_errors(sb) -> None:
    put(sb, "f.py", "x x\n")
    base = {"file_path": "f.py", "new_string": "z"}
    assert tool(sb, "Edit", {**base, "old_string": ""}) == (
        "ValueError: old_string must be non-empty")
    assert tool(sb, "Edit", {**base, "old_string": "nope"}) == (
        "ValueError: old_string was not found")
    assert tool(sb, "Edit", {**base, "old_string": "x"}) == (
        "ValueError: old_string matched 2 times; set replace_all=true or use a more "
        "specific old_string")
    assert tool(sb, "Edit", {"old_string": "x", "new_string": "y"}) == (
        "ValueError: file_path is required")
    assert tool(sb, "Edit", {"file_path": "none.py", "old_string": "a", "new_string": "b"}) == (
        f"FileNotFoundError: [Errno 2] No such file or directory: '{sb.workdir}/none.py'")


# --------------------------------------------------------------------------- Glob


def test_glob_recursive_sorted_files_only(sb) -> None:
    for name in ("g/b.py", "g/a.py", "g/sub/c.py", "g/sub/d.txt"):
        (host(sb) / name).parent.mkdir(parents=True, exist_ok=True)
        (host(sb) / name).write_text("")
    (host(sb) / "g/dir.py").mkdir()
    assert tool(sb, "Glob", {"pattern": "g/**/*.py"}) == "g/a.py\ng/b.py\ng/sub/c.py"
    assert tool(sb, "Glob", {"pattern": "*.py", "path": "g"}) == "g/a.py\ng/b.py"
    assert tool(sb, "Glob", {"pattern": "*.nothing"}) == "No files matched."
    assert tool(sb, "Glob", {}) == "ValueError: pattern is required"


def test_glob_caps_at_1000(sb) -> None:
    many = host(sb) / "many"
    many.mkdir()
    for i in range(1003):
        (many / f"f{i:04d}.txt").write_text("")
    out = tool(sb, "Glob", {"pattern": "many/*.txt"})
    lines = out.split("\n")
    assert len(lines) == 1001
    assert lines[0] == "many/f0000.txt"
    assert lines[999] == "many/f0999.txt"
    assert lines[1000] == "... 3 more files"


# --------------------------------------------------------------------------- Bash


def test_bash_exit_code_and_streams(sb) -> None:
    assert tool(sb, "Bash", {"command": "echo out; echo err >&2; exit 3"}) == (
        "Exit code: 3\nSTDOUT:\nout\n\nSTDERR:\nerr\n")
    assert tool(sb, "Bash", {"command": "pwd"}) == (
        f"Exit code: 0\nSTDOUT:\n{sb.workdir}\n\nSTDERR:\n")
    assert tool(sb, "Bash", {"command": "printf 'a\\r\\nb'"}) == (
        "Exit code: 0\nSTDOUT:\na\nb\nSTDERR:\n")
    assert tool(sb, "Bash", {"command": "kill -9 $$"}) == "Exit code: -9\nSTDOUT:\n\nSTDERR:\n"


def test_bash_arguments_are_not_shell_spliced(sb) -> None:
    command = "echo \"it's $((1+1))\"; echo '$HOME \"quoted\"'"
    assert tool(sb, "Bash", {"command": command}) == (
        "Exit code: 0\nSTDOUT:\nit's 2\n$HOME \"quoted\"\n\nSTDERR:\n")


def test_bash_timeouts(sb) -> None:
    assert tool(sb, "Bash", {"command": "echo start; sleep 5", "timeout": 0.5}) == (
        "Timed out after 0.5s\nSTDOUT:\nstart\n\nSTDERR:\n")
    # Above 1000 the value is read as milliseconds; timeout_ms wins over timeout.
    assert tool(sb, "Bash", {"command": "sleep 5", "timeout": 1200}) == (
        "Timed out after 1.2s\nSTDOUT:\n\nSTDERR:\n")
    assert tool(sb, "Bash", {"command": "sleep 5", "timeout": 60, "timeout_ms": 700}) == (
        "Timed out after 0.7s\nSTDOUT:\n\nSTDERR:\n")
    assert tool(sb, "Bash", {"command": "true", "timeout": "abc"}) == (
        "ValueError: could not convert string to float: 'abc'")


def test_bash_truncates_at_30000_chars(sb) -> None:
    out = tool(sb, "Bash", {"command": "python3 -c \"print('x' * 40000)\""})
    full = "Exit code: 0\nSTDOUT:\n" + "x" * 40000 + "\n\nSTDERR:\n"
    assert out == full[:30000] + f"\n[truncated {len(full) - 30000} chars]"


def test_bash_runaway_output_is_bounded(sb) -> None:
    out = tool(sb, "Bash", {"command": "yes", "timeout": 1.5})
    assert out.startswith("Timed out after 1.5s\nSTDOUT:\ny\ny\n")
    head, _, tail = out.rpartition("\n[truncated ")
    assert len(head) == 30000
    assert tail.endswith(" chars]") and int(tail.split()[0]) > 1_000_000


def test_bash_requires_command(sb) -> None:
    assert tool(sb, "Bash", {}) == "ValueError: command is required"


# --------------------------------------------------------------------------- dispatch


def test_unknown_tool_and_non_object_arguments(sb) -> None:
    assert tool(sb, "Frobnicate", {"x": 1}) == "Unknown tool: Frobnicate"
    assert tool(sb, "Read", "not an object") == "ValueError: file_path is required"
    assert tool(sb, "Read", ["file_path"]) == "ValueError: file_path is required"


def test_exec_is_structured(sb) -> None:
    result = sb.exec("echo out; echo err >&2; exit 4", timeout=30)
    assert (result.exit_code, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert not result.timed_out and not result.truncated and not result.ok
    slow = sb.exec("echo partial; sleep 10", timeout=0.5)
    assert slow.timed_out and slow.exit_code is None and slow.stdout == "partial\n"


def test_exec_keeps_the_tail_of_long_output(sb) -> None:
    result = sb.exec("seq 1 100000; echo FAILED-AT-END", timeout=30)
    assert result.truncated and result.exit_code == 0
    assert result.stdout.startswith("[truncated ") and result.stdout.endswith("FAILED-AT-END\n")
    assert len(result.stdout) < 200_100


# --------------------------------------------------------------------------- standalone


def test_runner_once_mode_standalone(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    request = {"id": 7, "op": "tool", "name": "Read", "args": {"file_path": "a.txt"}}
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(RUNNER_PATH), "once", "--workdir", str(tmp_path)],
        input=json.dumps(request) + "\n", capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(done.stdout) == {"id": 7, "ok": True, "output": "a.txt\n1. one",
                                       "error": False}
