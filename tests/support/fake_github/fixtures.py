"""pytest fixtures for the fake GitHub; load with
`pytest_plugins = ("tests.support.fake_github.fixtures",)`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_github.server import FakeGitHub


@pytest.fixture
def fake_github(tmp_path: Path) -> Iterator[FakeGitHub]:
    """A started fake GitHub; fails the test if any exchange broke GitHub's OpenAPI."""
    fake = FakeGitHub(tmp_path / "fake-github").start()
    try:
        yield fake
    finally:
        fake.stop()
    assert not fake.violations, "requests or responses GitHub's OpenAPI rejects:\n" + \
        "\n".join(fake.violations)
