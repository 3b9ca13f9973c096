"""The `unsafe-local` backend: the same runner as a plain subprocess. Development only.

Nothing is isolated: the model's commands run with the worker's own rights, network and
file system. Only the environment is cleaned, and leftovers are killed by process group
(a command that calls setsid escapes that).
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from sandbox.base import SandboxConfig, SandboxLimits, setup_tool_env
from sandbox.bubblewrap import interpreter
from sandbox.egress import EgressPolicy, NetworkLog
from sandbox.index_endpoint import IndexEndpoint
from sandbox.runner_client import RUNNER_PATH, RunnerBackedSandbox, RunnerProcess
from sandbox.services import ServicePorts, service_env
from sandbox.trees import copy_tree, remove_tree

log = logging.getLogger(__name__)


def _rlimits(limits: SandboxLimits) -> Callable[[], None]:
    # No RLIMIT_NPROC: outside a user namespace it counts every process of the user.
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalSandbox(RunnerBackedSandbox):
    """`Sandbox` without isolation; `exec(network=...)` always has the host network."""

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.workdir = str(config.workspace.resolve())
        self.python, _ = interpreter()
        self._ports: ServicePorts | None = None
        self._tools: Path | None = None  # links to the setup tools, for its PATH
        log.warning(
            "UNSAFE sandbox backend 'unsafe-local': model-chosen commands run UNCONFINED "
            "as uid %d in %s, with network access. Use it for development only; use "
            "'bubblewrap' for anything real.", os.getuid(), self.workdir)

    def service_ports(self) -> ServicePorts:
        """The host's loopback is shared: ports of its own, chosen once per sandbox."""
        if self._ports is None:
            self._ports = ServicePorts(postgresql=_free_port(), redis=_free_port())
        return self._ports

    def close(self) -> None:
        super().close()
        if self._tools is not None:
            remove_tree(self._tools)
            self._tools = None

    def _tools_dir(self) -> Path:
        """A host directory holding a link to each setup tool (uv): its own place on the
        setup phase's PATH, which the directory the tool came from (a venv's bin, its
        python3 among them) would not be."""
        if self._tools is None:
            self._tools = Path(tempfile.mkdtemp(prefix="frognano-tools-"))
            for tool in self.config.setup_tools:
                os.symlink(os.path.realpath(tool), self._tools / tool.name)
        return self._tools

    def _prepare(self) -> None:
        for sub in ("home", "venv"):
            (self.config.private_dir / sub).mkdir(parents=True, exist_ok=True)
        if self.config.venv_ro is not None:  # no bind at host paths: a copy instead
            remove_tree(self.config.private_dir / "venv")
            copy_tree(self.config.venv_ro, self.config.private_dir / "venv")

    def environment(self, *, network: bool = False, index_port: int = 0) -> dict[str, str]:
        private = self.config.private_dir.resolve()
        host_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env = {
            "PATH": f"{private}/venv/bin:{host_path}", "HOME": f"{private}/home",
            "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "TERM": "dumb", "PYTHONDONTWRITEBYTECODE": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        env.update(service_env(self.config.services, self.service_ports()))
        env.update(self.config.env)
        if network:  # the setup phase's own; its paths are the host's already
            if index_port:
                env.update(self.config.package_sources.sandbox_env(
                    f"http://127.0.0.1:{index_port}"))
            env.update(setup_tool_env(str(private)))
            if self.config.setup_tools:
                env["PATH"] = f"{private}/venv/bin:{self._tools_dir()}:{host_path}"
            env.update(self.config.setup_env)
        return env

    def _spawn(self, *, network: bool) -> RunnerProcess:
        limits = self.config.limits
        # The same index endpoint as bubblewrap's, on a port of the host's loopback: the
        # index URLs stay out of the environment here too.
        network_log = NetworkLog()
        endpoint = IndexEndpoint(self.config.package_sources, os.getuid(), os.getgid(),
                                 proxy=self.config.outbound_proxy, network_log=network_log,
                                 allow=EgressPolicy.build([], self.config.egress_allow).allow,
                                 quota_bytes=limits.disk_bytes,
                                 tcp=True) if network else None
        try:
            runner = RunnerProcess(
                [self.python, "-I", "-S", str(RUNNER_PATH), "serve", "--workdir",
                 self.workdir, "--reap", "group",
                 "--default-timeout", str(limits.default_timeout),
                 "--max-timeout", str(limits.max_timeout),
                 "--bash-chars", str(limits.max_output_chars)],
                env=self.environment(network=network,
                                     index_port=endpoint.port if endpoint else 0),
                cwd=self.workdir, preexec_fn=_rlimits(limits))
        except BaseException:
            if endpoint is not None:
                endpoint.close()
            raise
        if endpoint is not None:
            runner.on_kill.append(endpoint.close)
            runner.network_log = network_log
        return runner
