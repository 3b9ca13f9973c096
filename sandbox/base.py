"""The sandbox seam: what the agent loop and the harness may ask of an isolation backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sandbox.egress import OutboundProxy
from sandbox.index_endpoint import PackageSources

if TYPE_CHECKING:
    from sandbox.services import ServiceSpec


# The setup phase's uv cache, in the private area: the setup's own, on disk (uv links
# the venv's files from it), removed by the host once the setup ends (runner_client.py),
# so no run's cache reaches another and nothing of it is copied into the test runs.
UV_CACHE_NAME = "uv-cache"


def setup_tool_env(private_inside: str) -> dict[str, str]:
    """uv's variables in the setup phase besides its indexes (PackageSources.sandbox_env):
    its per-setup cache, no Python downloads, no progress bars in the captured output."""
    return {"UV_CACHE_DIR": f"{private_inside}/{UV_CACHE_NAME}", "UV_PYTHON_DOWNLOADS": "never",
            "UV_NO_PROGRESS": "1"}


class SandboxError(Exception):
    """Infrastructure failure of the sandbox itself (not a failing tool call)."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot run on this host (e.g. bubblewrap missing)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to everything run inside the sandbox.

    Which of them bind the sandbox as a whole on a given host: sandbox/enforcement.py.
    """

    # The whole sandbox (cgroup memory.max, else a host-side watch); also RLIMIT_AS.
    memory_bytes: int = 8 * 1024**3
    # The whole sandbox (cgroup pids.max, else the watch); also RLIMIT_NPROC per uid.
    max_processes: int = 512
    max_file_bytes: int = 1024**3  # RLIMIT_FSIZE
    cpu_seconds: int = 3600  # RLIMIT_CPU, per process
    max_output_chars: int = 30_000  # captured output per stream, after which it is cut
    tmp_bytes: int = 1024**3  # size of the private /tmp tmpfs (counted as memory too)
    shm_bytes: int = 256 * 1024**2  # size of the private /dev/shm tmpfs (likewise)
    # Workspace plus private dir (HOME, venv), on the host's disk; see disk_quota.py.
    disk_bytes: int = 16 * 1024**3  # room for a setup that installs ML wheels
    default_timeout: float = 120.0  # Bash default (docs/LEAF_CONTRACT.md §3)
    max_timeout: float = 1800.0  # ceiling on any single command


@dataclass(frozen=True)
class ExecResult:
    """Outcome of a harness command (`Sandbox.exec`)."""

    exit_code: int | None  # None when killed on timeout
    stdout: str
    stderr: str
    timed_out: bool = False
    seconds: float = 0.0
    truncated: bool = False
    # What the setup phase's network helpers refused or could not fetch (a NetworkLog's
    # lines): for the transcript and the setup's failure message.
    network_log: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class ToolResult:
    """One tool call's outcome: the text the model reads, and whether the call failed
    (the runner says so; a failing Bash command is not a failed call, its exit code is
    in the text)."""

    output: str
    error: bool = False


@dataclass
class SandboxConfig:
    """How a sandbox is built for one run."""

    workspace: Path  # host path of the repository checkout, mounted read-write
    private_dir: Path  # host path for HOME, the per-run venv and other run state (outside the diff)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    env: dict[str, str] = field(default_factory=dict)  # extra allow-listed variables
    extra_ro_binds: list[Path] = field(default_factory=list)
    # Unprivileged uid/gid the bubblewrap sandbox runs as when the worker is root
    # (the kernel does not apply RLIMIT_NPROC to uid 0); workspace and private_dir are
    # chowned to it. None: a uid of its own from a pool (sandbox/uid_pool.py), so that
    # concurrent sandboxes do not share one process limit.
    sandbox_uid: int | None = None
    sandbox_gid: int | None = None
    # The setup phase's way out (sandbox/egress.py): the hosts a CONNECT may name besides
    # the package indexes' (FROGNANO_SETUP_EGRESS_HOSTS), networks their addresses may lie
    # in besides public ones (CIDRs, FROGNANO_SETUP_EGRESS_ALLOW), and the host's own
    # outbound proxy (HTTPS_PROXY, NO_PROXY), which the proxy and the index endpoint use.
    egress_hosts: tuple[str, ...] = ()
    egress_allow: tuple[str, ...] = ()
    outbound_proxy: OutboundProxy = field(default_factory=OutboundProxy)
    # Where the setup phase's pip finds packages: reached by the host-side index endpoint
    # (sandbox/index_endpoint.py), so the URLs and their credentials stay on the host.
    package_sources: PackageSources = field(default_factory=PackageSources)
    # The setup phase's alone (`exec(network=True)`), never the agent's or the tests':
    # variables, and host directories bound read-only for them, so the agent cannot read
    # what setup was given. Never a secret: setup runs the repository's code.
    setup_env: dict[str, str] = field(default_factory=dict)
    setup_ro_binds: list[Path] = field(default_factory=list)
    # Programs the setup phase alone finds on its PATH, right after the venv's (uv, for
    # the inferred setup: solver/setup/installer.py): host files, bound read-only.
    setup_tools: tuple[Path, ...] = ()
    # A host-owned venv bound read-only over the private area's `venv` (the harness's
    # test runs: the venv as setup left it, with no copy of its thousands of files per
    # run, and nothing the code under test can change in it); None: the private area's.
    venv_ro: Path | None = None
    # Test services every runner of this sandbox starts fresh before its first command
    # (sandbox/services.py): `.github/frognano.yml`'s `services:`.
    services: tuple[ServiceSpec, ...] = ()


class Sandbox(Protocol):
    """An isolated place to run the five tools and the harness's commands."""

    workdir: str  # the workspace path as seen inside the sandbox

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...

    def run_tool(self, name: str, args: dict[str, Any]) -> str:
        """Run one of the five tools; tool failures come back as text, never raised."""
        ...

    def call_tool(self, name: str, args: dict[str, Any]) -> ToolResult:
        """`run_tool` with the runner's verdict on whether the call failed."""
        ...

    def exec(self, command: str, *, network: bool = False,
             timeout: float | None = None) -> ExecResult:
        """Run a harness command (setup, tests) with `/bin/bash -lc` in the workdir."""
        ...

    def stop(self) -> None:
        """Kill every process in the sandbox; the next call starts a fresh runner. The
        host stops the sandbox before it snapshots the work tree (solver/hostgit.py)."""
        ...
