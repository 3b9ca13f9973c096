"""The one recipe for a run's sandboxes: the agent's, setup's, every verdict run's and a
replay's after the run (solver/replay.py) are built from it, so a test re-run after the
run has returned sees what the run's own did: its test services, its package index.

A recipe is chosen once per run (`BestOf` builds it from the request and the repository's
config) and handed back in the `RunOutcome`; nobody outside the solver builds a
`SandboxConfig` for a run."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox import Sandbox, SandboxConfig, open_sandbox
from sandbox.services import ServiceSpec
from solver.hostgit import HostRepo
from solver.setup.package_index import NO_INDEX, PackageIndex


@dataclass(frozen=True)
class SandboxRecipe:
    """Which backend, which test services start in every sandbox, and the setup phase's
    network (its host-side index endpoint and the hosts its proxy may reach: the URLs
    themselves never enter the sandbox)."""

    backend: str = "bubblewrap"
    services: tuple[ServiceSpec, ...] = ()
    package_index: PackageIndex = NO_INDEX

    def config(self, host: HostRepo) -> SandboxConfig:
        """The sandbox over `host`'s workspace, its private area (HOME, the venv) beside
        it in the run directory."""
        private = host.work_tree.parent / "private"
        private.mkdir(parents=True, exist_ok=True)
        return SandboxConfig(workspace=host.work_tree, private_dir=private,
                             services=self.services, **self.package_index.sandbox_fields())

    def open(self, config: SandboxConfig) -> Sandbox:
        return open_sandbox(self.backend, config)
