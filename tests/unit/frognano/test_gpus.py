"""Which GPUs `frognano up` spreads its run workers over (frognano/gpus.py), with a fake
`nvidia-smi` on PATH (no GPU here: the one process edge faked); tests/e2e/test_up.py checks
the same plan reaches the real worker processes, and the last test here runs a real
`frognano worker` with the setting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from frognano.cli import _parser
from frognano.gpus import Gpu, GpuScan, plan_run_workers, scan_gpus
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer

ROOT = REPO_ROOT

LISTING = "0, GPU-aaa, NVIDIA H200, 143771\n1, GPU-bbb, NVIDIA L4, 23034\n"


def _path_with_smi(where: Path, listing: str = LISTING, status: int = 0) -> str:
    tools = where / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    smi = tools / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{listing}'\necho 'NVML: driver mismatch' >&2\n"
                   f"exit {status}\n")
    smi.chmod(0o755)
    return f"{tools}{os.pathsep}/usr/bin:/bin"


def test_nvidia_smi_s_gpus_are_pinned_by_index_in_pci_order(tmp_path: Path) -> None:
    scan = scan_gpus({"PATH": _path_with_smi(tmp_path)})
    assert scan == GpuScan((Gpu("0", "NVIDIA H200", 143771), Gpu("1", "NVIDIA L4", 23034)),
                           "nvidia-smi", pci_order=True)
    workers, text = plan_run_workers(3, scan)
    assert [(w.name, w.env["CUDA_VISIBLE_DEVICES"]) for w in workers] == [
        ("worker-1", "0"), ("worker-2", "0"), ("worker-3", "0"),
        ("worker-4", "1"), ("worker-5", "1"), ("worker-6", "1")]
    assert all(w.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for w in workers)
    assert text.startswith("6 run worker(s), 3 per GPU on 2 GPU(s) from nvidia-smi: ")
    assert "worker-4, worker-5, worker-6 on GPU 1 (NVIDIA L4, 23,034 MiB)" in text


def test_an_operator_s_cuda_visible_devices_list_is_used_as_given(tmp_path: Path) -> None:
    path = _path_with_smi(tmp_path)
    # Their order, their numbering: a UUID is named from nvidia-smi, a bare index is not
    # (in CUDA's default order it need not be nvidia-smi's card of that number).
    scan = scan_gpus({"PATH": path, "CUDA_VISIBLE_DEVICES": "GPU-bbb, 0"})
    assert scan == GpuScan((Gpu("GPU-bbb", "NVIDIA L4", 23034), Gpu("0")),
                           "CUDA_VISIBLE_DEVICES")
    workers, text = plan_run_workers(1, scan)
    assert [w.env for w in workers] == [{"CUDA_VISIBLE_DEVICES": "GPU-bbb"},
                                        {"CUDA_VISIBLE_DEVICES": "0"}]
    assert "worker-1 on GPU GPU-bbb (NVIDIA L4, 23,034 MiB); worker-2 on GPU 0" in text
    named = scan_gpus({"PATH": path, "CUDA_VISIBLE_DEVICES": "1",
                       "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert named.gpus == (Gpu("1", "NVIDIA L4", 23034),)
    # As CUDA reads the list: it ends at the first entry that is no device.
    assert [g.device for g in scan_gpus({"PATH": path,
                                         "CUDA_VISIBLE_DEVICES": "1,-1,0"}).gpus] == ["1"]


def test_without_a_gpu_the_workers_run_on_the_cpu_and_the_banner_says_why(
        tmp_path: Path) -> None:
    for environ, why in [
            ({"PATH": "/nonexistent"}, "nvidia-smi is not installed"),
            ({"PATH": _path_with_smi(tmp_path), "CUDA_VISIBLE_DEVICES": ""},
             "CUDA_VISIBLE_DEVICES='' hides every GPU"),
            ({"PATH": _path_with_smi(tmp_path), "CUDA_VISIBLE_DEVICES": "-1"},
             "CUDA_VISIBLE_DEVICES='-1' hides every GPU"),
            ({"PATH": _path_with_smi(tmp_path / "none", "", 0)}, "nvidia-smi lists no GPU"),
            ({"PATH": _path_with_smi(tmp_path / "broken", "", 9)},
             "nvidia-smi failed: NVML: driver mismatch")]:
        scan = scan_gpus(environ)
        assert scan == GpuScan((), why), environ
        workers, text = plan_run_workers(2, scan)
        assert [(w.name, w.env) for w in workers] == [("worker-1", {}), ("worker-2", {})]
        assert text == f"2 run worker(s) on the CPU ({why})"


def test_a_model_server_holds_the_gpus_so_its_workers_are_not_pinned() -> None:
    workers, text = plan_run_workers(3, None)
    assert [w.env for w in workers] == [{}, {}, {}]
    assert text == "3 run worker(s), not pinned (the model server holds the GPUs)"


def test_up_takes_workers_per_gpu_and_its_older_spelling() -> None:
    assert _parser().parse_args(["up", "--workers-per-gpu", "4"]).workers_per_gpu == 4
    assert _parser().parse_args(["up", "--workers", "2"]).workers_per_gpu == 2
    assert _parser().parse_args(["up"]).workers_per_gpu is None  # then the setting
    serve = _parser().parse_args(["serve", "--port", "9000"])
    assert (serve.host, serve.port) == ("127.0.0.1", 9000)


def test_doctor_says_how_many_copies_of_the_model_fit_the_smallest_gpu(tmp_path: Path
                                                                       ) -> None:
    from bot.settings import BotSettings
    from frognano.doctor import check_gpus

    environ = {"PATH": _path_with_smi(tmp_path)}
    model_bytes = 2_900_000_000  # FrogNano-4B Q4_K_M: 2,766 MiB, 8 of them in an L4's 23,034

    def checks(per_gpu: int) -> dict[str, tuple[str, str]]:
        settings = BotSettings(_env_file=None,  # type: ignore[call-arg]
                               FROGNANO_RUN_WORKERS_PER_GPU=per_gpu)
        return {c.name: (c.status, c.detail) for c in check_gpus(settings, environ,
                                                                  model_bytes)}

    eight = checks(8)
    assert eight["gpus"] == ("ok", "2 from nvidia-smi: GPU 0 (NVIDIA H200, 143,771 MiB), "
                                   "GPU 1 (NVIDIA L4, 23,034 MiB); 8 run worker(s) each "
                                   "(FROGNANO_RUN_WORKERS_PER_GPU)")
    assert eight["vram"][0] == "ok"
    assert "8 × the model's weights (2,766 MiB) in 23,034 MiB (the smallest GPU; 8 would " \
           "fit)" in eight["vram"][1]
    assert checks(9)["vram"][0] == "warn"
    [none] = check_gpus(BotSettings(_env_file=None, FROGNANO_RUN_WORKERS_PER_GPU=1),  # type: ignore[call-arg]
                        {"PATH": "/nonexistent"}, model_bytes)
    assert none.detail == ("none (nvidia-smi is not installed): `frognano up` runs 1 run "
                           "worker(s) on the CPU")


def _pool_size(pid: int) -> int:
    """Live child processes of `pid` (a prefork Celery worker's pool)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        count += entry.isdigit() and f"\nPPid:\t{pid}\n" in status
    return count


def _start_worker(tmp_path: Path, redis_url: str, extra: dict[str, str]
                  ) -> tuple[subprocess.Popen[bytes], Path]:
    from tests.unit.frognano.test_doctor import _pem

    script = tmp_path / "script.json"
    script.write_text("[]")
    log = tmp_path / f"worker-{len(list(tmp_path.glob('worker-*.log')))}.log"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("FROGNANO_", "GITHUB_", "CUDA_"))}
    env.update({"PYTHONPATH": str(ROOT), "FROGNANO_REDIS_URL": redis_url,
                "FROGNANO_STATE_DIR": str(tmp_path / "state"), "GITHUB_APP_ID": "1",
                "GITHUB_PRIVATE_KEY": _pem(), "FROGNANO_MODEL": f"scripted:{script}",
                "FROGNANO_WORK_DIR": str(tmp_path / "work"),
                "PATH": _path_with_smi(tmp_path), **extra})
    with log.open("wb") as sink:
        worker = subprocess.Popen([sys.executable, "-m", "frognano", "worker"], env=env,
                                  cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT)
    return worker, log


def test_a_worker_runs_the_setting_s_models_and_warns_when_it_sees_several_gpus(
        tmp_path: Path, redis_server: RedisServer) -> None:
    for extra, warned in [({"FROGNANO_RUN_WORKERS_PER_GPU": "3"}, True),
                          ({"FROGNANO_RUN_WORKERS_PER_GPU": "2", "CUDA_VISIBLE_DEVICES": "1"},
                           False)]:
        worker, log = _start_worker(tmp_path, redis_server.url, extra)
        try:
            deadline = time.monotonic() + 60
            while b"ready." not in log.read_bytes() and time.monotonic() < deadline:
                assert worker.poll() is None, log.read_text()
                time.sleep(0.2)
            assert b"ready." in log.read_bytes(), log.read_text()
            # One pool process per model: the setting, not the old fixed 1.
            assert _pool_size(worker.pid) == int(extra["FROGNANO_RUN_WORKERS_PER_GPU"])
            text = log.read_text()
            assert ("this worker sees 2 GPUs (GPU 0 (NVIDIA H200, 143,771 MiB), GPU 1 "
                    "(NVIDIA L4, 23,034 MiB)), and llama.cpp splits" in text) is warned, text
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                raise
