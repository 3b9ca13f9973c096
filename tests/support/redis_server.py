"""A real `redis-server` on a free port in a temporary directory, for tests and benchmarks.

Load the fixture with `pytest_plugins = ["tests.support.redis_server"]`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

REDIS_BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"
START_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """One redis-server process; `stop()` saves to its directory so `restart()` keeps data,
    as a real server restart would."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=5)

    def start(self) -> None:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [REDIS_BINARY, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}; "
                                   f"see {self.directory / 'redis.log'}")
            try:
                with self.client() as probe:
                    probe.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("redis-server did not answer PING") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.process = None
            return
        try:
            with self.client() as admin:
                admin.shutdown(save=True)
        except redis.RedisError:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def start_redis(directory: Path | None = None) -> RedisServer:
    """Start a server on a free port; the caller stops it."""
    directory = directory or Path(tempfile.mkdtemp(prefix="frognano-redis-"))
    directory.mkdir(parents=True, exist_ok=True)
    for try_number in range(3):
        server = RedisServer(directory, _free_port())
        try:
            server.start()
            return server
        except RuntimeError:
            if try_number == 2:  # another process may have taken the port in between
                raise
    raise AssertionError("unreachable")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[[], RedisServer]]:
    """Start more servers (e.g. a separate broker); all are stopped at teardown."""
    started: list[RedisServer] = []

    def start() -> RedisServer:
        server = start_redis(tmp_path / f"redis-extra-{len(started)}")
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
