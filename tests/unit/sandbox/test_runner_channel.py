"""The host side of the runner channel against a runner that lies: replies must carry the
per-start key's MAC, and no message is buffered past its size bound."""

from __future__ import annotations

import sys
import time
import tracemalloc

import pytest

from sandbox.runner_client import MAX_MESSAGE_BYTES, RunnerGone, RunnerProcess

# A stand-in runner: reads the key line from --fd-in, then answers with `REPLY`.
FAKE = r"""
import os, sys
fd_in, fd_out = int(sys.argv[sys.argv.index("--fd-in") + 1]), int(sys.argv[-1])
reader = os.fdopen(fd_in, "rb")
reader.readline(); reader.readline()  # the key, then the request
out = os.fdopen(fd_out, "wb")
mode = sys.argv[1]
if mode == "flood":
    chunk = b"a" * (1 << 20)
    try:
        for _ in range(1024):  # 1 GiB, one line
            out.write(chunk)
    except BrokenPipeError:
        pass
else:
    out.write(b"0" * 64 + b' {"id": 1, "ok": true, "output": "forged"}\n')
out.flush()
"""


def fake_runner(mode: str) -> RunnerProcess:
    return RunnerProcess([sys.executable, "-c", FAKE, mode], env={})


def test_a_gigabyte_line_is_refused_without_being_buffered() -> None:
    runner = fake_runner("flood")
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(RunnerGone, match="over 64 MiB"):
            runner.request({"op": "ping"}, 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        runner.kill()
    assert peak < 2 * MAX_MESSAGE_BYTES + (8 << 20), peak
    assert time.monotonic() - started < 30
    assert not runner.alive()


def test_a_reply_without_the_key_is_refused() -> None:
    runner = fake_runner("forge")
    try:
        with pytest.raises(RunnerGone, match="failed authentication"):
            runner.request({"op": "ping"}, 30)
    finally:
        runner.kill()
    assert not runner.alive()
