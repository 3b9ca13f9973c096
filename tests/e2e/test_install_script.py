"""scripts/install.sh's CUDA branch, with `nvidia-smi` and `nvcc` faked on PATH (no GPU
here): the build arguments it derives, and the pip calls it makes with them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
SCRIPT = ROOT / "scripts" / "install.sh"
BASIC_TOOLS = ("bash", "env", "tr", "grep", "sort", "paste", "head", "dirname", "cat")


def _tool_dir(tmp_path: Path, *, smi_output: str | None, nvcc: bool) -> Path:
    """A PATH of the basic tools only, plus the fakes asked for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in BASIC_TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    if smi_output is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\nprintf '{smi_output}'\n")
        smi.chmod(0o755)
    if nvcc:
        compiler = bin_dir / "nvcc"
        compiler.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0'\n")
        compiler.chmod(0o755)
    return bin_dir


def _cuda_args(tmp_path: Path, **fakes: object) -> subprocess.CompletedProcess[str]:
    bin_dir = _tool_dir(tmp_path, **fakes)  # type: ignore[arg-type]
    return subprocess.run(["bash", str(SCRIPT), "--cuda-args"], capture_output=True,
                          text=True, timeout=30, check=True,
                          env={"PATH": str(bin_dir), "CUDA_HOME": str(tmp_path / "none")})


def test_one_gpu_and_nvcc_build_for_its_architecture(tmp_path: Path) -> None:
    done = _cuda_args(tmp_path, smi_output="9.0\\n9.0\\n", nvcc=True)
    assert done.stdout.strip() == (f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 "
                                   f"-DCMAKE_CUDA_COMPILER={tmp_path}/bin/nvcc")
    assert "CUDA architectures 90" in done.stderr


def test_two_kinds_of_gpu_build_for_both(tmp_path: Path) -> None:
    done = _cuda_args(tmp_path, smi_output="8.0\\n9.0\\n8.0\\n", nvcc=True)
    assert "-DCMAKE_CUDA_ARCHITECTURES=80;90 " in done.stdout


def test_a_gpu_that_does_not_say_its_capability_builds_for_native(tmp_path: Path) -> None:
    done = _cuda_args(tmp_path, smi_output="Field compute_cap is not a valid field\\n",
                      nvcc=True)
    assert "-DCMAKE_CUDA_ARCHITECTURES=native " in done.stdout


def test_a_gpu_without_nvcc_says_how_to_get_it_and_builds_for_the_cpu(tmp_path: Path
                                                                      ) -> None:
    done = _cuda_args(tmp_path, smi_output="9.0\\n", nvcc=False)
    assert done.stdout == ""
    assert "CUDA toolkit" in done.stderr and "building for the CPU" in done.stderr


def test_no_gpu_builds_for_the_cpu(tmp_path: Path) -> None:
    done = _cuda_args(tmp_path, smi_output=None, nvcc=True)
    assert done.stdout == "" and "built for the CPU" in done.stderr


@pytest.mark.skipif(not all(Path(p).exists() for p in ("/usr/bin/bwrap", "/usr/bin/git",
                                                         "/usr/bin/redis-server")),
                    reason="the script would run apt-get first")
def test_install_rebuilds_a_cpu_llama_cpp_with_cuda_before_the_project(tmp_path: Path
                                                                       ) -> None:
    """The whole script on a fake venv whose python logs its pip calls: a CPU build is
    found, so llama-cpp-python is rebuilt from source with the CUDA arguments, never from
    pip's cache, before the project's own install."""
    bin_dir = _tool_dir(tmp_path, smi_output="9.0\\n", nvcc=True)
    for tool in ("mkdir", "ln", "id", "chmod", "stat"):
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    os.symlink("/usr/bin/python3", bin_dir / "python3")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    (venv / "bin" / "python").write_text(f"""#!/bin/sh
case "$*" in
  *llama_supports_gpu_offload*) exit 1 ;;        # the installed build is a CPU one
  "-c import llama_cpp") exit 0 ;;
  "-m pip"*) echo "CMAKE_ARGS=$CMAKE_ARGS ARGS=$*" >> {log}; exit 0 ;;
esac
exit 3
""")
    (venv / "bin" / "python").chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_dir), "VIRTUAL_ENV": str(venv),
                               "HOME": str(tmp_path), "CUDA_HOME": str(tmp_path / "none")})
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 2, calls
    cuda, project = calls
    assert cuda.startswith("CMAKE_ARGS=-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 ")
    for flag in ("--no-cache-dir", "--no-binary llama-cpp-python", "--force-reinstall",
                 "--no-deps", "llama-cpp-python==0.3.36"):
        assert flag in cuda
    assert project.startswith("CMAKE_ARGS= ") and "-e ." in project
    assert "building llama-cpp-python with CUDA" in done.stdout
