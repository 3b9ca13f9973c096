"""A private PostgreSQL cluster for the tests: `initdb` + `pg_ctl` from Debian's `postgresql`
package, on a free port in a temporary directory, as tests/support/redis_server.py does for Redis.

One cluster per test session (initdb takes a second or two); every test gets a database of
its own. PostgreSQL refuses to run as root, so as root the cluster runs as `nobody` in a
directory that user owns. Load the fixtures with
`pytest_plugins = ["tests.support.postgres_server"]`.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 30.0
SUPERUSER = "frognano"
# Durability is not what these tests are about; skipping fsync keeps them quick.
FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


def find_binaries() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres: on PATH, else Debian's
    /usr/lib/postgresql/<version>/bin (newest version first)."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parent.parent.name) if
                      Path(p).parent.parent.name.isdigit() else 0, reverse=True)
    return Path(versions[0]).parent if versions else None


BIN_DIR = find_binaries()
SKIP_REASON = ("no PostgreSQL binaries (initdb, pg_ctl) on PATH or under "
               "/usr/lib/postgresql/*/bin: apt-get install postgresql")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    directory: Path
    port: int
    password: str
    user: str | None  # the OS user the server runs as; None: this process's user

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert BIN_DIR is not None
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": str(self.directory)}
        return subprocess.run([str(BIN_DIR / args[0]), *args[1:]], env=env, check=check,
                              capture_output=True, text=True, timeout=START_TIMEOUT_S,
                              cwd=self.directory, user=self.user,
                              group=_group_of(self.user) if self.user else None)

    def init(self) -> None:
        pwfile = self.directory / "pwfile"
        pwfile.write_text(self.password + "\n")
        self._chown(pwfile)
        self._run("initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--pwfile", str(pwfile),
                  "--auth=scram-sha-256", "--no-locale", "--encoding=UTF8", "--no-sync")
        pwfile.unlink()

    def start(self) -> None:
        options = " ".join([f"-p {self.port}", "-c listen_addresses=127.0.0.1",
                            "-c unix_socket_directories=''",  # TCP only, no /run/postgresql
                            *(f"-c {setting}" for setting in FAST_SETTINGS)])
        done = self._run("pg_ctl", "-D", str(self.data_dir), "-l",
                         str(self.directory / "postgres.log"), "-o", options, "-w",
                         "-t", str(int(START_TIMEOUT_S)), "start", check=False)
        if done.returncode != 0:
            log = (self.directory / "postgres.log")
            raise RuntimeError(f"pg_ctl start failed ({done.returncode}): {done.stderr}\n"
                               f"{log.read_text() if log.exists() else ''}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop", check=False)

    def create_database(self, name: str) -> str:
        """A fresh database; its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _chown(self, path: Path) -> None:
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)


def _group_of(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def start_postgres(directory: Path | None = None) -> PostgresServer:
    """initdb and start a cluster on a free port; the caller stops it."""
    if BIN_DIR is None:
        raise RuntimeError(SKIP_REASON)
    # /tmp itself, not pytest's tmp_path: that lives under a 0700 root directory the
    # unprivileged server user could not enter.
    directory = directory or Path(tempfile.mkdtemp(prefix="frognano-pg-"))
    user = "nobody" if os.geteuid() == 0 else None
    server = PostgresServer(directory, _free_port(), secrets.token_hex(12), user)
    server._chown(directory)
    server.init()
    for try_number in range(3):
        try:
            server.start()
            return server
        except RuntimeError:
            if try_number == 2:  # another process may have taken the port in between
                raise
            server.port = _free_port()
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    if BIN_DIR is None:
        pytest.skip(SKIP_REASON)
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of an empty database of this test's own."""
    return postgres_server.create_database(f"test_{secrets.token_hex(6)}")



@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty run database on each backend the project supports: a SQLite file, and a
    database on the private PostgreSQL cluster (skipped, with the reason, without one)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return str(request.getfixturevalue("postgres_url"))
