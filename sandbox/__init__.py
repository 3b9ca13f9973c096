"""Isolation backends for the five tools and the harness's commands.

`open_sandbox("bubblewrap" | "unsafe-local", config)` returns a `Sandbox`; use it as a
context manager for the lifetime of one run.
"""

from __future__ import annotations

import shutil

from sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxLimits,
    SandboxUnavailable,
)

BACKENDS = ("bubblewrap", "unsafe-local")


def open_sandbox(backend: str, config: SandboxConfig) -> Sandbox:
    """Build (not yet start) the sandbox of one run; entering it starts it."""
    if backend == "bubblewrap":
        from sandbox.bubblewrap import INSTALL_HINT, BubblewrapSandbox

        if shutil.which("bwrap") is None:
            raise SandboxUnavailable(INSTALL_HINT)
        return BubblewrapSandbox(config)
    if backend == "unsafe-local":
        from sandbox.local import LocalSandbox

        return LocalSandbox(config)
    raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "ExecResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailable",
    "open_sandbox",
]
