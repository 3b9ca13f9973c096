"""What the setup phase may reach (FROGNANO_PIP_*, FROGNANO_SETUP_EGRESS_*, HTTPS_PROXY),
as the sandbox is configured for it.

The index URLs go to the host-side index endpoint (sandbox/index_endpoint.py), never into
the sandbox: a URL may hold a token, and setup runs the repository's code. The endpoint's
download cache lives in the state directory, shared by every run and written by the host
alone, under the cap both setup caches share even while a setup runs, and each setup may
fetch at most FROGNANO_SETUP_FETCH_MAX_GB through the endpoint (the sandbox's disk quota
by default). The egress proxy's host list is the indexes' hosts plus the operator's.
The inferred setup's installer (FROGNANO_SETUP_INSTALLER, solver/setup/installer.py): uv,
whose binary the setup phase gets read-only, with pip as its fallback; or pip alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sandbox.egress import OutboundProxy
from sandbox.index_endpoint import PYPI_SIMPLE, PackageSources, redact
from solver.setup.installer import uv_binary

CACHE_DIR_NAME = "package-cache"
VENV_CACHE_DIR_NAME = "venv-cache"  # solver/setup/venv_cache.py


class IndexSettings(Protocol):
    """The settings `PackageIndex.from_settings` reads (bot/settings.py's BotSettings)."""

    pip_index_url: str | None
    pip_extra_index_url: str | None
    pip_find_links: str | None
    setup_egress_hosts: str | None
    setup_egress_allow: str | None
    https_proxy: str | None
    no_proxy: str | None
    state_dir: Path
    setup_venv_cache: bool
    setup_cache_max_gb: float
    setup_fetch_max_gb: float

    @property
    def setup_installer(self) -> str: ...  # "uv" or "pip" (read only: a Literal fits)


def _items(text: str | None) -> tuple[str, ...]:
    return tuple(item for item in re.split(r"[\s,]+", text or "") if item)


@dataclass(frozen=True, repr=False)
class PackageIndex:
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    egress_hosts: tuple[str, ...] = ()
    egress_allow: tuple[str, ...] = ()
    https_proxy: str = ""
    no_proxy: tuple[str, ...] = ()
    cache_dir: Path | None = None
    venv_cache_dir: Path | None = None
    cache_max_bytes: int = 0  # both caches together; 0: no cap
    fetch_max_bytes: int = 0  # what one setup may fetch; 0: the sandbox's disk quota
    installer: str = "pip"  # the inferred setup's: "uv" (pip its fallback) or "pip"
    tools: tuple[Path, ...] = ()  # programs the setup phase finds on its PATH (uv)

    @classmethod
    def from_settings(cls, settings: IndexSettings) -> PackageIndex:
        """The settings' values; pip separates several entries with spaces."""
        state = settings.state_dir.expanduser().resolve()
        return cls((settings.pip_index_url or "").strip(),
                   tuple((settings.pip_extra_index_url or "").split()),
                   tuple((settings.pip_find_links or "").split()),
                   egress_hosts=_items(settings.setup_egress_hosts),
                   egress_allow=_items(settings.setup_egress_allow),
                   https_proxy=(settings.https_proxy or "").strip(),
                   no_proxy=_items(settings.no_proxy),
                   cache_dir=state / CACHE_DIR_NAME,
                   venv_cache_dir=state / VENV_CACHE_DIR_NAME if settings.setup_venv_cache
                   else None,
                   cache_max_bytes=int(settings.setup_cache_max_gb * 1024**3),
                   fetch_max_bytes=int(settings.setup_fetch_max_gb * 1024**3),
                   installer=settings.setup_installer,
                   tools=tuple(found for found in (uv_binary(),) if found is not None))

    def setup_installer(self) -> str:
        """The inferred setup's installer: uv when asked for and its binary is there."""
        has_uv = any(tool.name == "uv" for tool in self.tools)
        return "uv" if self.installer == "uv" and has_uv else "pip"

    def __repr__(self) -> str:  # a URL may hold a token: never in a log line or a trace
        return redact(f"PackageIndex({self.index_url!r}, {self.extra_index_urls!r}, "
                      f"{self.find_links!r}, proxy={self.https_proxy!r})")

    def sources(self) -> PackageSources:
        return PackageSources(self.index_url or PYPI_SIMPLE, self.extra_index_urls,
                              self.find_links, self.cache_dir, self.venv_cache_dir,
                              self.cache_max_bytes, self.fetch_max_bytes)

    def sandbox_fields(self) -> dict[str, Any]:
        """The SandboxConfig fields for the setup phase's network."""
        return {"package_sources": self.sources(), "egress_hosts": self.egress_hosts,
                "egress_allow": self.egress_allow,
                "outbound_proxy": OutboundProxy(self.https_proxy, self.no_proxy),
                "setup_tools": self.tools}


NO_INDEX = PackageIndex()  # PyPI through the index endpoint, no cache
