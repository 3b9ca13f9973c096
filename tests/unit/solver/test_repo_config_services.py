"""`services:` in `.github/frognano.yml`: both forms, and errors that name the service."""

from __future__ import annotations

import pytest

from sandbox.services import ServiceSpec
from solver.repo_config import RepoConfigError, parse_repo_config


@pytest.mark.parametrize(("text", "expected"), [
    ("services: [postgresql, redis]\n",
     (ServiceSpec("postgresql", None, "app"), ServiceSpec("redis"))),
    ("services: {postgresql: {version: 16, database: app}}\n",
     (ServiceSpec("postgresql", 16, "app"),)),
    ("services: [redis, {postgresql: {database: shop}}]\n",
     (ServiceSpec("postgresql", None, "shop"), ServiceSpec("redis"))),
    ("services: {redis: null}\n", (ServiceSpec("redis"),)),
    ("services: postgresql\n", (ServiceSpec("postgresql"),)),
    ("test: pytest\n", ()),
])
def test_the_forms_give_the_services(text: str, expected: tuple[ServiceSpec, ...]) -> None:
    assert parse_repo_config(text).services.specs() == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("services: [mysql]\n",
     "`services.mysql`: unknown service; the services are: postgresql, redis"),
    ("services: {postgresql: {version: sixteen}}\n",
     "`services.postgresql.version`: Input should be a valid integer, not 'sixteen'"),
    ("services: {postgresql: {port: 5433}}\n", "`services.postgresql.port`: unknown setting"),
    ("services: {postgresql: {database: 'app; DROP'}}\n",
     "`services.postgresql.database`: String should match pattern"),
])
def test_bad_services_are_named(text: str, expected: str) -> None:
    with pytest.raises(RepoConfigError) as raised:
        parse_repo_config(text)
    assert expected in str(raised.value)
