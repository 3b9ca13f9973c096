"""`frognano doctor`'s service lines: what this worker can start for `services:`, and the
fix when a package is missing (the real binaries here; an empty root for a host without)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from frognano.doctor import check_sandbox_python, check_services
from sandbox.services import postgres_versions
from tests.support.sandbox_support import reachable_dir


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


def test_the_sandbox_python_line_says_whether_the_sandbox_can_use_the_worker_venv() -> None:
    """CI's failure (session 20): a venv the sandbox's uid could not enter, found only when
    repositories' tests missed its packages. Doctor now says so, with the fix."""
    with reachable_dir() as root:
        opened, closed = root / "opened" / "venv", root / "closed" / "venv"
        for venv in (opened, closed):
            venv.mkdir(parents=True)
        (root / "closed").chmod(0o700)
        ok, shut = check_sandbox_python([str(opened)]), check_sandbox_python([str(closed)])
    if os.geteuid() != 0:  # the sandbox then runs as this uid, which enters both
        assert (ok.status, shut.status) == ("ok", "ok")
        return
    assert ok.status == "ok" and str(opened) in ok.detail, ok.line()
    assert shut.status == "warn", shut.line()
    assert f"cannot enter {closed}" in shut.detail and "scripts/install.sh" in shut.fix
