"""The operator's word for every run, built once by the composition root (frognano/: the
worker's from the one settings model, `solve`'s from it with its flags over it) and handed
whole to each `RunRequest`, so a setting is not re-packed on its way to the sandbox:
`BotSettings` → `RunDefaults` → the run's `HostRepo`, `SandboxRecipe` and plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sandbox.services import ServiceSpec
from solver.hostgit import DEFAULT_MAX_DIFF_BYTES
from solver.limits import PRESETS, Limits
from solver.models.base import ModelClient
from solver.sandbox_recipe import SandboxRecipe
from solver.setup.package_index import NO_INDEX, PackageIndex


@dataclass(frozen=True, kw_only=True)
class RunDefaults:
    # A client sampling with this seed (None: the backend's own draw): solver.models.
    # ModelMaker. Cheap to call: an in-process GGUF is loaded once per process.
    model_for: Callable[[int | None], ModelClient]
    # The operator's preset (FROGNANO_LIMITS), its context the model's (FROGNANO_N_CTX, or
    # cut to the model host's memory: solver/limits.py).
    limits: Limits = PRESETS["evaluation"]
    max_run_seconds: float | None = None  # the worker's ceiling (FROGNANO_MAX_RUN_SECONDS)
    max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES  # a bigger change is never published
    # Best of N: the most candidates a run may make (FROGNANO_MAX_CANDIDATES), how many the
    # model serves at once (FROGNANO_MODEL_SLOTS), the first one's seed (FROGNANO_SEED;
    # None: drawn per run).
    max_candidates: int = 1
    model_slots: int = 1
    seed: int | None = None
    sandbox_backend: str = "bubblewrap"
    package_index: PackageIndex = NO_INDEX  # the setup phase's pip (FROGNANO_PIP_*)

    def recipe(self, services: tuple[ServiceSpec, ...]) -> SandboxRecipe:
        """The one recipe of a run's sandboxes, with the services its repository asks
        for."""
        return SandboxRecipe(self.sandbox_backend, services, self.package_index)
