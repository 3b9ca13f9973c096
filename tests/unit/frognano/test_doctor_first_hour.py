"""`frognano doctor` and the `frognano up` banner finish the job (issue 22 §3): dashboard
auth with the line that makes a token and the address to open, the CUDA build command only
where a GPU exists (CUDA_VISIBLE_DEVICES names one: the GPU is the one edge faked), and a
concrete FROGNANO_PUBLIC_URL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import BotSettings
from frognano.doctor import check_app, check_dashboard, check_gpu
from frognano.up_command import _banner, _dashboard_text
from tests.support.paths import REPO_ROOT

REPO_ROOT = REPO_ROOT


def _settings(tmp_path: Path, **values: object) -> BotSettings:
    return BotSettings(_env_file=None, FROGNANO_STATE_DIR=tmp_path / "state",  # type: ignore[call-arg]
                       **values)


def test_dashboard_auth_says_how_to_get_in(tmp_path: Path) -> None:
    unset = check_dashboard(_settings(tmp_path, FROGNANO_PUBLIC_URL="https://bot.example.org"))
    assert unset.status == "warn" and "https://bot.example.org/runs refuses everyone" in \
        unset.detail
    assert 'export FROGNANO_DASHBOARD_TOKEN="$(openssl rand -hex 16)"' in unset.fix
    assert "https://bot.example.org/runs?token=$FROGNANO_DASHBOARD_TOKEN" in unset.fix
    token = check_dashboard(_settings(tmp_path, FROGNANO_DASHBOARD_TOKEN="t" * 32))
    assert token.status == "ok"
    assert token.detail.startswith("open http://127.0.0.1:8000/runs?token=")
    half = check_dashboard(_settings(tmp_path, FROGNANO_DASHBOARD_USER="ops"))
    assert half.status == "fail" and "FROGNANO_DASHBOARD_PASSWORD" in half.detail


def test_the_cuda_build_command_only_where_a_gpu_exists() -> None:
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama.cpp is a GPU build: nothing to rebuild")
    cpu_host = check_gpu({"PATH": "/nonexistent"})
    assert cpu_host.status == "ok" and "no GPU here" in cpu_host.detail
    assert "GGML_CUDA" not in cpu_host.line()
    gpu_host = check_gpu({"PATH": "/nonexistent", "CUDA_VISIBLE_DEVICES": "0"})
    assert gpu_host.status == "warn" and "1 GPU(s)" in gpu_host.detail
    assert gpu_host.fix.startswith('CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native" '
                                   "pip install --force-reinstall")
    assert "GGML_CUDA" in gpu_host.line()


def test_the_public_url_fix_is_a_concrete_example(tmp_path: Path) -> None:
    checks = {c.name: c for c in check_app(_settings(tmp_path))}
    fix = checks["public url"].fix
    assert "FROGNANO_PUBLIC_URL=https://frognano.example.org" in fix
    assert "cloudflared tunnel --url http://127.0.0.1:8000" in fix


def test_the_banner_names_the_dashboard(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8000/"
    none = _dashboard_text(_settings(tmp_path), url)
    banner = _banner(url, "private", "none", tmp_path, "next", none)
    assert "  dashboard http://127.0.0.1:8000/runs refuses everyone" in banner
    assert "openssl rand -hex 16" in banner
    with_token = _dashboard_text(_settings(tmp_path, FROGNANO_DASHBOARD_TOKEN="t" * 32), url)
    assert with_token == ("open http://127.0.0.1:8000/runs?token=$FROGNANO_DASHBOARD_TOKEN "
                          "once (then a cookie)")


def test_doctor_prints_the_dashboard_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "FROGNANO_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "frognano.cli", "doctor"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True,
                          text=True, timeout=180, check=False)
    assert "warn  dashboard" in done.stdout, done.stdout + done.stderr
    assert "openssl rand -hex 16" in done.stdout
    assert "/runs?token=$FROGNANO_DASHBOARD_TOKEN" in done.stdout


def test_doctor_addresses_follow_the_receivers_port(tmp_path: Path) -> None:
    """`frognano up --port 8765`: doctor's dashboard and public-URL lines name 8765, the
    port the receiver listens on, not the default 8000 (issue 33 §3)."""
    local = "http://127.0.0.1:8765/"
    dashboard = check_dashboard(_settings(tmp_path), local)
    assert dashboard.detail.startswith("http://127.0.0.1:8765/runs refuses everyone")
    assert "http://127.0.0.1:8765/runs?token=$FROGNANO_DASHBOARD_TOKEN" in dashboard.fix
    public = {c.name: c for c in check_app(_settings(tmp_path), local)}["public url"]
    assert "cloudflared tunnel --url http://127.0.0.1:8765`" in public.fix
    assert "8000" not in dashboard.line() + public.line()
