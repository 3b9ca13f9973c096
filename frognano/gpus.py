"""The GPUs of this host, and how `frognano up` spreads its run workers over them.

A run worker holds its own in-process model (one decode stream); one model leaves most of
a large GPU idle, so `up` starts N of them per GPU, each pinned to its GPU with
CUDA_VISIBLE_DEVICES (docs/BENCHMARKS.md, "Runs per GPU", measures which N pays).

Which GPUs: an operator's CUDA_VISIBLE_DEVICES list when there is one (used as given, in
their CUDA_DEVICE_ORDER), else every GPU `nvidia-smi` lists. nvidia-smi numbers GPUs in PCI
bus order while CUDA by default numbers the fastest first, so children pinned by
nvidia-smi's index also get CUDA_DEVICE_ORDER=PCI_BUS_ID: index 1 is then the same card
for both. No GPU: the workers run on the CPU, N in all.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

NVIDIA_SMI_TIMEOUT_S = 15
QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class Gpu:
    device: str  # what the worker's CUDA_VISIBLE_DEVICES gets: an index or a UUID
    name: str | None = None
    memory_mib: int | None = None

    def describe(self) -> str:
        facts = ", ".join(filter(None, [self.name, f"{self.memory_mib:,} MiB"
                                        if self.memory_mib is not None else None]))
        return f"GPU {self.device}" + (f" ({facts})" if facts else "")


@dataclass(frozen=True)
class GpuScan:
    gpus: tuple[Gpu, ...]
    source: str  # where they came from, or why there are none
    pci_order: bool = False  # the devices are nvidia-smi's indices


def _nvidia_smi(environ: Mapping[str, str]) -> tuple[list[Gpu], list[str], str | None]:
    """nvidia-smi's GPUs, their UUIDs, and what went wrong (None when nothing did)."""
    binary = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if binary is None:
        return [], [], "nvidia-smi is not installed"
    try:
        done = subprocess.run([binary, *QUERY], capture_output=True, text=True, check=False,
                              timeout=NVIDIA_SMI_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env=dict(environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], [], f"nvidia-smi did not answer: {exc}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return [], [], f"nvidia-smi failed: {why[0] if why else f'status {done.returncode}'}"
    gpus, uuids = [], []
    for line in done.stdout.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        memory = parts[-1]
        gpus.append(Gpu(parts[0], ", ".join(parts[2:-1]) or None,
                        int(memory) if memory.isdigit() else None))
        uuids.append(parts[1])
    return gpus, uuids, None


def scan_gpus(environ: Mapping[str, str]) -> GpuScan:
    listed, uuids, problem = _nvidia_smi(environ)
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        if problem:
            return GpuScan((), problem)
        if not listed:
            return GpuScan((), "nvidia-smi lists no GPU")
        return GpuScan(tuple(listed), "nvidia-smi", pci_order=True)
    # As CUDA reads it: the list ends at the first entry that is not a device.
    devices: list[str] = []
    for entry in (part.strip() for part in visible.split(",")):
        if not entry or entry.startswith("-"):
            break
        devices.append(entry)
    if not devices:
        return GpuScan((), f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU")
    # Names only where the entry surely is that card: its UUID, or its index in PCI order.
    by_uuid = dict(zip(uuids, listed, strict=True))
    by_index = ({gpu.device: gpu for gpu in listed}
                if environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" else {})
    gpus = []
    for device in devices:
        known = by_uuid.get(device) or by_index.get(device)
        gpus.append(Gpu(device, known.name, known.memory_mib) if known else Gpu(device))
    return GpuScan(tuple(gpus), "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class RunWorker:
    name: str
    env: dict[str, str] = field(default_factory=dict)  # laid over `up`'s environment


def plan_run_workers(per_gpu: int, scan: GpuScan | None) -> tuple[list[RunWorker], str]:
    """The run workers and the banner's words for them. `scan` is None when the model is a
    server of its own (it holds the GPUs; the workers only wait on it): `per_gpu` in all."""
    if scan is None:
        workers = [RunWorker(f"worker-{i}") for i in range(1, per_gpu + 1)]
        return workers, f"{per_gpu} run worker(s), not pinned (the model server holds the GPUs)"
    if not scan.gpus:
        workers = [RunWorker(f"worker-{i}") for i in range(1, per_gpu + 1)]
        return workers, f"{per_gpu} run worker(s) on the CPU ({scan.source})"
    workers, placed = [], []
    for gpu in scan.gpus:
        env = {"CUDA_VISIBLE_DEVICES": gpu.device}
        if scan.pci_order:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        names = []
        for _ in range(per_gpu):
            names.append(f"worker-{len(workers) + 1}")
            workers.append(RunWorker(names[-1], env))
        placed.append(f"{', '.join(names)} on {gpu.describe()}")
    text = (f"{len(workers)} run worker(s), {per_gpu} per GPU on {len(scan.gpus)} GPU(s) "
            f"from {scan.source}: " + "; ".join(placed))
    return workers, text
