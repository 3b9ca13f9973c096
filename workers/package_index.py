"""Where the setup phase's pip finds packages (FROGNANO_PIP_*), as that phase sees it.

Given to `exec(network=True)` only (SandboxConfig.setup_env and setup_ro_binds): pip's own
variables, and the local directories among them bound read-only, so a machine without
internet (or with a private index) can still run the inferred `pip install`. The agent
phase and the tests never see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class PackageIndex:
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, index_url: str | None, extra_index_url: str | None,
                      find_links: str | None) -> PackageIndex:
        """The settings' values; pip separates several entries with spaces."""
        return cls((index_url or "").strip(), tuple((extra_index_url or "").split()),
                   tuple((find_links or "").split()))

    def env(self) -> dict[str, str]:
        values = {"PIP_INDEX_URL": self.index_url,
                  "PIP_EXTRA_INDEX_URL": " ".join(self.extra_index_urls),
                  "PIP_FIND_LINKS": " ".join(self.find_links)}
        return {name: value for name, value in values.items() if value}

    def local_paths(self) -> list[Path]:
        """Host directories the entries name. A PEP 503 index `<root>/simple` links to
        its files by relative URLs (`../../files/…`), so its root is bound with it."""
        paths: list[Path] = []
        for entry in (self.index_url, *self.extra_index_urls, *self.find_links):
            path = _local(entry)
            if path is None:
                continue
            if path.name == "simple" and entry not in self.find_links:
                path = path.parent
            if path.exists() and path not in paths:
                paths.append(path)
        return paths


NO_INDEX = PackageIndex()  # pip's defaults: PyPI through the egress proxy


def _local(entry: str) -> Path | None:
    if entry.startswith("file:"):
        return Path(unquote(urlparse(entry).path)).resolve()
    if entry.startswith("/"):
        return Path(entry).resolve()
    return None
