"""The unsafe-local backend: loud about being unsafe, still tidy about processes and env."""

from __future__ import annotations

import logging
import os
import uuid

import pytest

from tests.support.sandbox_support import host_pids_with, running_sandbox, wait_gone


def test_warns_loudly_and_cleans_up(caplog: pytest.LogCaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"local-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("FROGNANO_TEST_SECRET", secret)
    seconds = f"{3000 + int(uuid.uuid4().int % 1000)}.5"
    with caplog.at_level(logging.WARNING, logger="sandbox.local"), \
            running_sandbox("unsafe-local") as sb:
        assert any("UNSAFE" in record.getMessage() for record in caplog.records)
        assert sb.workdir == str(sb.config.workspace.resolve())
        assert secret not in sb.run_tool("Bash", {"command": "env"})
        # As in Leaf, what leaves the call's pipes lives on until the sandbox stops.
        assert sb.run_tool("Bash", {"command": f"(sleep {seconds} >/dev/null 2>&1 &); "
                                               f"nohup sleep {seconds} >/dev/null 2>&1 &"}
                           ).startswith("Exit code: 0")
        assert len(host_pids_with(f"sleep {seconds}")) == 2
        sb.stop()
        assert wait_gone(f"sleep {seconds}") == []
        assert sb.run_tool("Bash", {"command": f"(sleep {seconds}1 &); sleep 30",
                                    "timeout": 1}).startswith("Timed out after 1.0s")
        assert wait_gone(f"sleep {seconds}1") == []
        assert sb.run_tool("Bash", {"command": "echo $HOME"}).split("\n")[2] == (
            f"{sb.config.private_dir.resolve()}/home")
    assert os.environ["FROGNANO_TEST_SECRET"] == secret
