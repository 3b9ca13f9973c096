"""`frognano doctor` against the real things it checks: bwrap, git, redis-server, SQLite,
a real GGUF, a real RSA key; and the same host with each of them taken away."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.settings import BotSettings
from frognano.doctor import Check, all_checks, report
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer

ROOT = REPO_ROOT


def _pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _settings(tmp_path: Path, **values: object) -> BotSettings:
    base: dict[str, object] = {"FROGNANO_STATE_DIR": tmp_path / "state"}
    base.update(values)
    return BotSettings(_env_file=None, **base)  # type: ignore[call-arg]


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


def test_a_configured_host_passes_every_check(tmp_path: Path, tiny_qwen35_gguf: Path,
                                             redis_server: RedisServer) -> None:
    settings = _settings(
        tmp_path, GITHUB_APP_ID=1234, GITHUB_PRIVATE_KEY=_pem(),
        GITHUB_WEBHOOK_SECRET="s" * 40, FROGNANO_PUBLIC_URL="https://bot.example.org",
        FROGNANO_MODEL=str(tiny_qwen35_gguf), FROGNANO_REDIS_URL=redis_server.url)
    checks = _by_name(all_checks(settings))
    not_ok = {name: c.detail for name, c in checks.items() if c.status == "fail"}
    assert not not_ok
    assert checks["redis"].status == "ok" and "answers" in checks["redis"].detail
    assert checks["chat template"].status == "ok"
    assert checks["bubblewrap"].status == "ok"
    assert checks["context"].status == "ok" and "tokens" in checks["context"].detail
    limits = [c.detail for c in all_checks(settings) if c.name == "sandbox limits"]
    assert any(line.startswith("per process only") for line in limits)
    assert any("memory" in line and line.startswith("whole sandbox") for line in limits)
    # This machine's llama.cpp is a CPU build: said, not hidden.
    assert checks["gpu offload"].status in ("ok", "warn")
    out = io.StringIO()
    assert report(list(checks.values()), out)
    assert "checks passed" in out.getvalue()


def test_each_missing_piece_is_named_with_its_fix(tmp_path: Path, redis_server: RedisServer
                                                  ) -> None:
    no_template = tmp_path / "not-a-model.gguf"
    no_template.write_bytes(b"PK\x03\x04 not a gguf")
    redis_server.stop()
    settings = _settings(
        tmp_path, GITHUB_APP_ID=None, GITHUB_PRIVATE_KEY="-----BEGIN nonsense",
        GITHUB_WEBHOOK_SECRET="short", FROGNANO_PUBLIC_URL="http://bot.example.org",
        FROGNANO_MODEL=str(no_template), FROGNANO_REDIS_URL=redis_server.url,
        FROGNANO_DATABASE_URL="postgresql+psycopg://u:secretpw@127.0.0.1:1/db")
    checks = _by_name(all_checks(settings))
    expected_fail = ["app id", "app key", "webhook secret", "model", "redis", "database"]
    assert [n for n in expected_fail if checks[n].status != "fail"] == []
    assert checks["public url"].status == "warn"
    assert "not a GGUF" in checks["model"].detail
    assert "5 characters" in checks["webhook secret"].detail
    assert all(checks[name].fix for name in expected_fail)
    assert "secretpw" not in checks["database"].detail  # the password is never printed
    out = io.StringIO()
    assert not report(list(checks.values()), out)
    assert "6 of" in out.getvalue()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_command_exits_1_and_names_bwrap_when_it_is_not_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "redis-server"):
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "FROGNANO_STATE_DIR":
           str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "frognano.cli", "doctor"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    line = next(line for line in done.stdout.splitlines() if "bubblewrap" in line)
    assert line.startswith("FAIL") and "not on PATH" in line
    assert "apt-get install bubblewrap" in done.stdout
    assert "ok    git" in done.stdout


def test_the_package_index_is_checked_through_the_setup_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configured index answers the host-side index endpoint, with its credentials;
    a wrong token fails naming the setting, and the token is never printed."""
    from frognano.doctor import check_package_index
    from tests.support.private_index import private_index

    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)  # the settings read it too

    with private_index("right-token", []) as index:
        good = _settings(tmp_path, FROGNANO_PIP_INDEX_URL=index.url,
                         FROGNANO_PIP_FIND_LINKS=str(tmp_path))
        bad = _settings(tmp_path, FROGNANO_PIP_INDEX_URL=index.url.replace(
            "right-token", "wrong-token"))
        passed, failed = check_package_index(good), check_package_index(bad)
    assert [(c.name, c.status) for c in passed] == [("package index", "ok"),
                                                    ("find links", "ok")], passed
    assert "right-token" not in passed[0].detail and "***@127.0.0.1" in passed[0].detail
    assert [(c.name, c.status) for c in failed] == [("package index", "fail")]
    assert "401" in failed[0].detail and "FROGNANO_PIP_INDEX_URL" in failed[0].fix
    assert "wrong-token" not in failed[0].line()


def _smi(where: Path, listing: str) -> dict[str, str]:
    """An environment whose PATH has a fake `nvidia-smi` (the GPU is the process edge)."""
    where.mkdir(parents=True, exist_ok=True)
    smi = where / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    smi.chmod(0o755)
    return {"PATH": f"{where}{os.pathsep}/usr/bin:/bin"}


def test_the_context_is_cut_to_what_the_gpu_holds_and_doctor_says_why(tmp_path: Path
                                                                      ) -> None:
    """FrogNano's weights (2.9 GB, a sparse file of that size) on a 6 GiB GPU leave room
    for 65,536 tokens of cache, not the evaluated 131,072; an H200 holds them. Doctor's
    context line names the choice, the memory and the GPU; the worker builds with it."""
    from frognano.doctor import check_context
    from frognano.model_host import run_context

    model = tmp_path / "FrogNano-4B-Q4_K_M.gguf"
    with model.open("wb") as f:
        f.truncate(2_900_000_000)
    settings = _settings(tmp_path, FROGNANO_MODEL=str(model))
    small = _smi(tmp_path / "small", "0, GPU-aaa, Small GPU, 6144\\n")
    out = io.StringIO()
    report([check_context(settings, small)], out)
    line = out.getvalue().splitlines()[0]
    assert line.startswith("ok    context          65,536 tokens, cut from 131,072: "
                           "131,072 tokens need 4.0 GiB of KV cache (f16) per model"), line
    assert "GPU 0 (Small GPU, 6,144 MiB)" in line
    big = _smi(tmp_path / "big", "0, GPU-bbb, NVIDIA H200, 143771\\n")
    assert check_context(settings, big).detail.startswith("131,072 tokens: ")
    # Two run workers per GPU each hold the weights: less cache each, a smaller context.
    two = _settings(tmp_path, FROGNANO_MODEL=str(model), FROGNANO_RUN_WORKERS_PER_GPU=2)
    assert run_context(two, _smi(tmp_path / "eight", "0, GPU-c, L4, 8192\\n"),
                       copies=2).tokens == 16_384
    # No GPU: the host's memory; a setting that names a context is kept as it is.
    cpu = run_context(settings, {"PATH": "/nonexistent"}, copies=1, memory_bytes=4 * 2**30)
    assert cpu.tokens == 16_384 and "this host's memory (4.0 GiB, no GPU)" in cpu.reason
    named = _settings(tmp_path, FROGNANO_MODEL=str(model), FROGNANO_N_CTX=131072)
    assert check_context(named, small).detail == "131,072 tokens, as FROGNANO_N_CTX sets"
    agent = _settings(tmp_path, FROGNANO_MODEL=str(model), FROGNANO_LIMITS="agent")
    assert check_context(agent, small).detail.startswith("65,536 tokens: ")


def test_a_model_server_keeps_the_evaluated_context(tmp_path: Path) -> None:
    from frognano.doctor import check_context

    server = _settings(tmp_path, FROGNANO_MODEL="http://127.0.0.1:8080")
    check = check_context(server, os.environ)
    assert check.status == "ok" and check.detail.startswith("131,072 tokens (the evaluated "
                                                            "context)")
