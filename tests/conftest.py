"""Shared fixtures: small real git repositories and helpers to run the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
collect_ignore = ["fixtures"]
pytest_plugins = ("tests.support.conftest_gguf", "tests.support.redis_server",
                  "tests.support.postgres_server", "tests.support.fake_github.fixtures")


def unpack(tarball: Path, dest: Path) -> None:
    """Extract one of tests/data's archives as plain data. Python before 3.11.4 (Debian
    12's own 3.11.2 among them) has no extraction filters: check the members instead."""
    with tarfile.open(tarball) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, filter="data")
            return
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if not (member.isfile() or member.isdir()) or member.name.startswith("/") \
                    or ".." in parts:
                raise ValueError(f"{tarball.name}: refusing the member {member.name!r}")
        archive.extractall(dest)  # every member checked above


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout


def make_repo(path: Path, files: dict[str, str] | None = None,
              template: str | None = None) -> Path:
    """A git repository with one commit on `main`, from a fixture folder and/or files."""
    if template:
        # A developer's pytest run in the fixture leaves byte code there: never a repo file.
        shutil.copytree(FIXTURES / template, path,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    path.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    """The calculator repository whose `add` is broken (one failing test, one passing)."""
    return make_repo(tmp_path / "calc", template="calc_repo")


E2E_DIR = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """tests/e2e/ is the `e2e` marker: `-m e2e` runs the whole product end to end,
    `-m "not e2e and not reliability"` the unit tests alone."""
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure's report as it happens, not only in the summary at the end: a CI run cut
    off by its time limit (its last output is all that is kept) still says what failed.
    Under pytest-xdist the controller prints it (a worker's report reaches it too)."""
    if not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    lines = report.longreprtext.splitlines()
    print(f"\nFAILED {report.nodeid} ({report.when}):\n" + "\n".join(lines[-40:]),
          file=sys.__stderr__, flush=True)
