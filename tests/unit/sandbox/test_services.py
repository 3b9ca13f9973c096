"""Test services in the sandbox (sandbox/services.py): real PostgreSQL and Redis from this
host's packages, started inside real bubblewrap, reached through the usual variables; each
sandbox (every verdict run) gets fresh instances; missing or broken services are named."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import SandboxConfig, SandboxLimits, open_sandbox
from sandbox.base import Sandbox
from sandbox.services import (
    ServiceFailed,
    ServiceSpec,
    ServiceUnavailable,
    postgres_versions,
    resolve,
)
from solver.verdict.verdict_run import VerdictRunner
from tests.support.sandbox_support import (
    HAVE_BWRAP,
    host_pids_with,
    make_host_repo,
    reachable_dir,
    wait_gone,
)

HAVE_SERVICES = bool(postgres_versions()) and os.path.exists("/usr/bin/redis-server")
pytestmark = [pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(not HAVE_SERVICES, reason="postgresql or redis-server "
                                 "is not installed (scripts/install.sh installs both)")]
BOTH = (ServiceSpec("postgresql", database="shop"), ServiceSpec("redis"))
# A row and a key, then what each holds: a fresh pair of services prints "rows=1 hits=1".
TOUCH = ("psql -q -c 'CREATE TABLE IF NOT EXISTS seen (x int)' -c 'INSERT INTO seen VALUES (1)'"
         " && echo rows=$(psql -tA -c 'SELECT count(*) FROM seen')"
         " hits=$(redis-cli -u \"$REDIS_URL\" INCR hits)")


@pytest.fixture
def root() -> Iterator[Path]:
    with reachable_dir() as directory:
        yield directory


def _sandbox(root: Path, services: tuple[ServiceSpec, ...] = BOTH,
             limits: SandboxLimits | None = None) -> Sandbox:
    host = make_host_repo(root, {"README.md": "shop\n"})
    return open_sandbox("bubblewrap", SandboxConfig(
        workspace=host.work_tree, private_dir=root / "private", services=services,
        limits=limits or SandboxLimits()))


def test_a_command_reaches_postgres_and_redis_through_the_usual_variables(root: Path) -> None:
    with _sandbox(root) as sandbox:
        env = sandbox.exec("env").stdout
        assert "DATABASE_URL=postgresql://postgres:postgres@127.0.0.1:5432/shop" in env
        assert {"PGHOST=127.0.0.1", "PGPORT=5432", "PGUSER=postgres", "PGDATABASE=shop",
                "REDIS_URL=redis://127.0.0.1:6379/0"} <= set(env.splitlines())
        # Python clients too (the worker's venv is on the sandbox's PATH), by the URLs alone.
        client = sandbox.exec(
            "python3 -c 'import os, psycopg, redis\n"
            "with psycopg.connect(os.environ[\"DATABASE_URL\"]) as db:\n"
            "    print(db.execute(\"SELECT current_database(), current_user, "
            "inet_server_addr()\").fetchone())\n"
            "print(redis.Redis.from_url(os.environ[\"REDIS_URL\"]).ping())'")
        assert client.ok, (client.stderr, "the sandbox runs", sandbox.python, sandbox.prefixes)
        assert "('shop', 'postgres', IPv4Address('127.0.0.1'))" in client.stdout
        assert "True" in client.stdout
        first = sandbox.exec(TOUCH)
        assert first.ok and "rows=1 hits=1" in first.stdout, first.stderr
        # The same instances serve the agent's tools for the sandbox's whole life.
        assert "rows=2 hits=2" in sandbox.run_tool("Bash", {"command": TOUCH})
        # As the sandbox's uid, in its own namespaces, with data in the private area.
        ps = sandbox.exec("ps -o user=,args= -C postgres,redis-server").stdout
        assert re.search(r"^sandbox +\S*postgres -D /frognano/services/\w+/postgresql/data "
                         r"-p 5432 -c listen_addresses=127.0.0.1", ps, re.M), ps
        assert re.search(r"^sandbox +\S*redis-server 127\.0\.0\.1:6379", ps, re.M), ps
    data = list((root / "private" / "services").glob("*"))
    assert data == [], f"a stopped sandbox's service data stays behind: {data}"


def test_services_outlive_a_timed_out_command_and_its_reaping(root: Path) -> None:
    """A Bash call that times out mid-query is reaped, its session's processes killed; the
    PostgreSQL backend serving it is the server's, and must not be SIGKILLed with it (the
    postmaster would restart every connection and lose what the WAL had not written)."""
    with _sandbox(root) as sandbox:
        slow = sandbox.run_tool("Bash", {"command": "psql -c 'SELECT pg_sleep(30)'",
                                         "timeout": 3})
        assert slow.startswith("Timed out after 3.0s"), slow
        after = sandbox.exec(TOUCH + " && redis-cli -u \"$REDIS_URL\" PING")
        assert after.ok and "rows=1 hits=1" in after.stdout and "PONG" in after.stdout
        log = next((root / "private" / "services").glob("*/postgresql/server.log"))
        assert "terminated by signal 9" not in log.read_text(), log.read_text()[-2000:]


def test_every_verdict_run_gets_fresh_instances(root: Path) -> None:
    """The agent's sandbox writes a row and a key; each verdict run, in its own sandbox,
    sees only its own: none of the agent's, none of the previous verdict run's."""
    with _sandbox(root) as sandbox:
        assert "rows=1 hits=1" in sandbox.run_tool("Bash", {"command": TOUCH})
        assert "rows=2 hits=2" in sandbox.run_tool("Bash", {"command": TOUCH})
        repo = make_host_repo(root / "verdict", {"touch.sh": TOUCH + "\n"})
        runner = VerdictRunner(sandbox, repo, "bash touch.sh", root / "harness")
        runner.capture_setup()
        runs = [runner.run(repo.test_base, "verdict", 120) for _ in range(2)]
    for run in runs:
        assert run.exit_code == 0, run.output
        assert "rows=1 hits=1" in run.output, run.output


def test_unknown_and_missing_services_are_named() -> None:
    with pytest.raises(ServiceUnavailable, match=r"unknown service `mysql`; the services "
                                                 r"are: postgresql, redis"):
        resolve((ServiceSpec("mysql"),))
    installed = ", ".join(str(v) for v in sorted(postgres_versions()))
    with pytest.raises(ServiceUnavailable,
                       match=rf"service `postgresql` version 99 is not available on this "
                             rf"worker \(installed: {installed}\)"):
        resolve((ServiceSpec("postgresql", version=99),))


def test_a_missing_version_stops_the_sandbox_before_any_command(root: Path) -> None:
    sandbox = _sandbox(root, (ServiceSpec("redis"), ServiceSpec("postgresql", version=99)))
    with pytest.raises(ServiceUnavailable, match="`postgresql` version 99"):
        sandbox.__enter__()
    sandbox.__exit__(None, None, None)


def test_a_service_that_does_not_start_is_named_with_its_log(root: Path) -> None:
    """Under the run's memory limit: 96 MiB of address space per process leaves no room
    for PostgreSQL's 128 MB of shared buffers, so the server itself refuses to start."""
    limits = SandboxLimits(memory_bytes=96 * 1024**2)
    sandbox = _sandbox(root, (ServiceSpec("postgresql"),), limits)
    with pytest.raises(ServiceFailed) as raised:
        sandbox.__enter__()
    sandbox.__exit__(None, None, None)
    message = str(raised.value)
    assert message.startswith("service `postgresql` did not start in the sandbox"), message
    assert "memory" in message, message


def test_unsafe_local_gives_redis_a_port_of_its_own_and_stops_it_with_the_sandbox(
        root: Path) -> None:
    """The host's loopback is shared there: a free port, said in REDIS_URL; the server
    stays in the runner's process group, so a timed-out call spares it and closing the
    sandbox leaves no server behind."""
    host = make_host_repo(root, {"README.md": "shop\n"})
    config = SandboxConfig(workspace=host.work_tree, private_dir=root / "private",
                           services=(ServiceSpec("redis"),))
    with open_sandbox("unsafe-local", config) as sandbox:
        url = sandbox.exec("echo $REDIS_URL").stdout.strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert port != 6379 and url == f"redis://127.0.0.1:{port}/0"
        slow = sandbox.run_tool("Bash", {"command": "sleep 30", "timeout": 1})
        assert slow.startswith("Timed out"), slow
        assert "PONG" in sandbox.exec('redis-cli -u "$REDIS_URL" PING').stdout
        assert host_pids_with(f"redis-server 127.0.0.1:{port}")
    assert wait_gone(f"redis-server 127.0.0.1:{port}") == []


def test_setup_has_an_instance_of_its_own(root: Path) -> None:
    """Setup's one-shot sandbox (the phase with network) starts its own services: a
    migration there works, and is not in the agent's instance."""
    with _sandbox(root) as sandbox:
        setup = sandbox.exec(TOUCH, network=True)
        assert setup.ok and "rows=1 hits=1" in setup.stdout, setup.stdout + setup.stderr
        assert "rows=1 hits=1" in sandbox.run_tool("Bash", {"command": TOUCH})


def test_the_sandbox_says_which_releases_it_started(root: Path) -> None:
    """What the run record, the PR body and the model's task name (issue 23 §1): the
    releases the servers in the sandbox report themselves."""
    with _sandbox(root) as sandbox:
        started = {found.spec.name: found for found in sandbox.started_services}
        asked = sandbox.exec("psql -tA -c 'SHOW server_version' && redis-cli -u "
                             "\"$REDIS_URL\" INFO server | grep '^redis_version:'")
    assert asked.ok, asked.stderr
    server_version, redis_version = asked.stdout.split()[0], asked.stdout.split()[-1]
    assert started["postgresql"].version == server_version, asked.stdout
    assert re.fullmatch(r"\d+\.\d+", server_version)
    assert redis_version == f"redis_version:{started['redis'].version}", asked.stdout
    assert started["postgresql"].variables == ("DATABASE_URL", "PGHOST", "PGPORT", "PGUSER",
                                               "PGPASSWORD", "PGDATABASE")
    assert started["redis"].variables == ("REDIS_URL",)
