"""`frognano doctor`'s service lines: what this worker can start for `services:`, and the
fix when a package is missing (the real binaries here; an empty root for a host without)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from frognano.doctor import check_services
from sandbox.services import postgres_versions


@pytest.mark.skipif(not postgres_versions() or shutil.which("redis-server") is None,
                    reason="postgresql or redis-server is not installed")
def test_installed_services_are_listed_with_their_versions() -> None:
    lines = {check.name: check for check in check_services()}
    assert set(lines) == {"service postgresql", "service redis"}
    assert all(check.status == "ok" for check in lines.values())
    newest = max(postgres_versions())
    assert lines["service postgresql"].detail.startswith("PostgreSQL ")
    assert f"/usr/lib/postgresql/{newest}/bin/postgres" in lines["service postgresql"].detail
    assert lines["service redis"].detail.startswith("Redis ")


def test_missing_services_warn_with_the_package_to_install(tmp_path: Path) -> None:
    lines = {check.name: check for check in check_services(postgres_root=str(tmp_path),
                                                           redis_path=str(tmp_path))}
    assert [check.status for check in lines.values()] == ["warn", "warn"]
    assert "no PostgreSQL binaries under" in lines["service postgresql"].detail
    assert lines["service postgresql"].fix.startswith("apt-get install postgresql ")
    assert "no `redis-server` binary" in lines["service redis"].detail
    assert lines["service redis"].fix.startswith("apt-get install redis-server ")
