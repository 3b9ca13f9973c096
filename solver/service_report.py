"""The test services a run used (`.github/frognano.yml`'s `services:`), as plain data for
the model's task, the PR body, the failure comment, the run page and `frognano solve`
(stdlib only: the receiver imports it through bot/messages.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.services import ServiceBinaries, ServiceSpec

PRODUCTS = {"postgresql": "PostgreSQL", "redis": "Redis"}


@dataclass(frozen=True)
class ServiceLine:
    """One service of a run: the release that ran, or, for one that never started, the
    version asked for ("" when the config left it to the newest installed)."""

    name: str  # postgresql, redis
    version: str  # "15.18", "7.0.15"
    database: str = ""  # PostgreSQL's database for the tests
    variables: tuple[str, ...] = ()  # DATABASE_URL, PGHOST, …: where it listens
    started: bool = True

    def label(self) -> str:
        """"PostgreSQL 15.18 (database app)", "Redis 7.0.15"."""
        version = f" {self.version}" if self.version else ""
        database = f" (database {self.database})" if self.database else ""
        return f"{PRODUCTS.get(self.name, self.name)}{version}{database}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "database": self.database,
                "variables": list(self.variables), "started": self.started,
                "label": self.label()}


def started(binaries: Iterable[ServiceBinaries]) -> list[ServiceLine]:
    """The services a sandbox started (RunnerBackedSandbox.started_services)."""
    return [ServiceLine(found.spec.name, found.version,
                        found.spec.database if found.spec.name == "postgresql" else "",
                        found.variables) for found in binaries]


def asked(specs: Iterable[ServiceSpec]) -> list[ServiceLine]:
    """The services a run asked for and never started (`services_failed`)."""
    return [ServiceLine(spec.name, str(spec.version) if spec.version is not None else "",
                        spec.database if spec.name == "postgresql" else "", started=False)
            for spec in specs]


def services_text(lines: Sequence[ServiceLine]) -> str:
    """"PostgreSQL 15.18 (database app), Redis 7.0.15"."""
    return ", ".join(line.label() for line in lines)
