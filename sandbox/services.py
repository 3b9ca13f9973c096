"""Test services (PostgreSQL, Redis) inside a run's sandbox, from the worker host's packages.

A repository's `.github/frognano.yml` may ask for `services: [postgresql, redis]`. Each
runner the sandbox starts (the agent's, setup's one-shot, every verdict run's) starts its
own fresh instances before it answers anything: the host sends the script below as an
`exec` that leaves its daemons running (`detach`), and the runner spares them and their
children when it reaps a command's leftovers (sandbox/runner.py). So the daemons:

- run as the sandbox's uid, inside its namespaces, on its loopback only (bubblewrap: the
  sandbox's own network namespace, where the usual ports are free; unsafe-local: free
  ports on the host's loopback);
- keep their data in the run's private area (`<private>/services/<spawn>/`), under the
  disk quota, and count against the sandbox's memory and process limits;
- die with the runner: a verdict run's sandbox is new, so it never sees what the agent
  or an earlier verdict run left in a database.

Stdlib only, like the rest of sandbox/.
"""

from __future__ import annotations

import glob
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sandbox.base import SandboxError, SandboxUnavailable

SERVICE_NAMES = ("postgresql", "redis")
DEFAULT_DATABASE = "app"
PG_USER = "postgres"
PG_PASSWORD = "postgres"  # trust authentication on loopback: said for clients that want one
FAILED_MARKER = "frognano-service-failed:"
START_SECONDS = 60.0  # initdb, start and readiness of every service, on a busy host
LOG_TAIL_CHARS = 1500
POSTGRES_ROOT = "/usr/lib/postgresql"  # Debian's: one <major>/bin per installed version
REDIS_PATH = "/usr/bin:/usr/local/bin:/bin"


class ServiceUnavailable(SandboxUnavailable):
    """A service the repository asks for cannot run on this worker (no such binary)."""


class ServiceFailed(SandboxError):
    """A service did not start inside the sandbox; the message names it and its log."""


@dataclass(frozen=True)
class ServiceSpec:
    """One service a repository asks for: `version` is PostgreSQL's major version (None:
    the newest installed), `database` the database created for the tests."""

    name: str
    version: int | None = None
    database: str = DEFAULT_DATABASE


@dataclass(frozen=True)
class ServicePorts:
    postgresql: int = 5432
    redis: int = 6379


@dataclass(frozen=True)
class ServiceBinaries:
    """Where a resolved service's programs live on the host (bound read-only under /usr)."""

    spec: ServiceSpec
    programs: dict[str, str]  # program name -> absolute path
    version: str  # the release that runs (`postgres --version`: 15.18), for the run record

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables that say where it listens (`service_env`), for the model's task."""
        return tuple(service_env((self.spec,), ServicePorts()))


def postgres_versions(root: str = POSTGRES_ROOT) -> dict[int, Path]:
    """Debian's PostgreSQL clusters' binaries: major version -> its bin directory."""
    found: dict[int, Path] = {}
    for initdb in glob.glob(f"{glob.escape(root)}/*/bin/initdb"):
        bin_dir = Path(initdb).parent
        major = bin_dir.parent.name
        if major.isdigit() and all((bin_dir / p).is_file() for p in ("postgres", "pg_isready")):
            found[int(major)] = bin_dir
    return found


def _resolve_postgres(spec: ServiceSpec, root: str) -> ServiceBinaries:
    versions = postgres_versions(root)
    if not versions:
        raise ServiceUnavailable(
            "service `postgresql` is not available on this worker: no PostgreSQL binaries "
            f"under {root}/*/bin (install Debian's `postgresql` package)")
    major = spec.version if spec.version is not None else max(versions)
    if major not in versions:
        installed = ", ".join(str(v) for v in sorted(versions))
        raise ServiceUnavailable(
            f"service `postgresql` version {major} is not available on this worker "
            f"(installed: {installed}); ask for one of those or install "
            f"`postgresql-{major}`")
    bin_dir = versions[major]
    programs = {p: str(bin_dir / p) for p in ("initdb", "postgres", "pg_isready", "createdb")}
    return ServiceBinaries(spec, programs, _postgres_release(programs["postgres"], major))


def _postgres_release(server: str, major: int) -> str:
    """"postgres (PostgreSQL) 15.18 (Debian …)" -> "15.18"; the major when it says no more."""
    try:
        words = subprocess.run([server, "--version"], capture_output=True, text=True,
                               timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return str(major)
    release = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "(PostgreSQL)"),
                   "")
    return release if release.split(".")[0] == str(major) else str(major)


def _resolve_redis(spec: ServiceSpec, path: str) -> ServiceBinaries:
    server = shutil.which("redis-server", path=path)
    if server is None:
        raise ServiceUnavailable(
            "service `redis` is not available on this worker: no `redis-server` binary "
            "(install Debian's `redis-server` package)")
    # Not its real path: redis-server is a link to redis-check-rdb, which reads argv[0].
    return ServiceBinaries(spec, {"redis-server": server},
                           _redis_version(server))


def _redis_version(server: str) -> str:
    try:
        out = subprocess.run([server, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    word = next((w for w in out.split() if w.startswith("v=")), "v=unknown")
    return word[2:]


def resolve(specs: tuple[ServiceSpec, ...], *, postgres_root: str = POSTGRES_ROOT,
            redis_path: str = REDIS_PATH) -> tuple[ServiceBinaries, ...]:
    """The host binaries of each service asked for; `ServiceUnavailable` naming the first
    one that is unknown or not installed."""
    resolved = []
    for spec in specs:
        if spec.name == "postgresql":
            resolved.append(_resolve_postgres(spec, postgres_root))
        elif spec.name == "redis":
            resolved.append(_resolve_redis(spec, redis_path))
        else:
            raise ServiceUnavailable(f"unknown service `{spec.name}`; the services are: "
                                     + ", ".join(SERVICE_NAMES))
    return tuple(resolved)


def available(*, postgres_root: str = POSTGRES_ROOT,
              redis_path: str = REDIS_PATH) -> dict[str, tuple[bool, str]]:
    """For doctor: each service -> whether it can run here, and what runs it or why not."""
    report = {}
    for name in SERVICE_NAMES:
        try:
            found = resolve((ServiceSpec(name),), postgres_root=postgres_root,
                            redis_path=redis_path)[0]
        except ServiceUnavailable as exc:
            report[name] = (False, str(exc))
            continue
        if name == "postgresql":
            versions = ", ".join(str(v) for v in sorted(postgres_versions(postgres_root)))
            report[name] = (True, f"PostgreSQL {versions} ({found.programs['postgres']})")
        else:
            report[name] = (True, f"Redis {found.version} ({found.programs['redis-server']})")
    return report


def service_env(specs: tuple[ServiceSpec, ...], ports: ServicePorts) -> dict[str, str]:
    """The usual variables clients read, for setup, the agent's tools and every test run."""
    env: dict[str, str] = {}
    for spec in specs:
        if spec.name == "postgresql":
            env.update({
                "DATABASE_URL": f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:"
                                f"{ports.postgresql}/{spec.database}",
                "PGHOST": "127.0.0.1", "PGPORT": str(ports.postgresql), "PGUSER": PG_USER,
                "PGPASSWORD": PG_PASSWORD, "PGDATABASE": spec.database})
        elif spec.name == "redis":
            env["REDIS_URL"] = f"redis://127.0.0.1:{ports.redis}/0"
    return env


_FAIL = f"""fail() {{  # name, log
  echo "{FAILED_MARKER} $1"; tail -c {LOG_TAIL_CHARS} "$2" 2>/dev/null; exit 1; }}
wait_ready() {{  # name, pid, log, readiness command...
  local name=$1 pid=$2 log=$3; shift 3
  for _ in $(seq 1 {int(START_SECONDS * 5)}); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || fail "$name" "$log"
    sleep 0.2
  done
  fail "$name" "$log"
}}
redis_ping() {{ exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1; printf 'PING\\r\\n' >&3
  local reply; read -r -t 2 reply <&3; exec 3>&-; [[ $reply == +PONG* ]]; }}
"""


def _postgres_lines(found: ServiceBinaries, root: str, port: int) -> list[str]:
    p, q = found.programs, shlex.quote
    data, log = f"{root}/postgresql/data", f"{root}/postgresql/server.log"
    # fsync off: the data lives as long as the sandbox; loopback only, no Unix socket
    # (its default directory is not in the sandbox).
    options = [f"-p {port}", "-c listen_addresses=127.0.0.1", "-c unix_socket_directories=",
               "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
    return [
        f"mkdir -p {q(root)}/postgresql",
        f"{q(p['initdb'])} -D {q(data)} -U {PG_USER} --auth=trust --no-locale -E UTF8 "
        f"--no-sync >{q(root)}/postgresql/initdb.log 2>&1 "
        f"|| fail postgresql {q(root)}/postgresql/initdb.log",
        f"{q(p['postgres'])} -D {q(data)} {' '.join(options)} >{q(log)} 2>&1 </dev/null &",
        f"wait_ready postgresql $! {q(log)} {q(p['pg_isready'])} -q -h 127.0.0.1 -p {port}",
        f"{q(p['createdb'])} -h 127.0.0.1 -p {port} -U {PG_USER} {q(found.spec.database)} "
        f">>{q(log)} 2>&1 || fail postgresql {q(log)}",
    ]


def _redis_lines(found: ServiceBinaries, root: str, port: int) -> list[str]:
    q = shlex.quote
    log = f"{root}/redis/server.log"
    return [
        f"mkdir -p {q(root)}/redis",
        f"{q(found.programs['redis-server'])} --port {port} --bind 127.0.0.1 "
        f"--protected-mode no --save '' --appendonly no --daemonize no "
        f"--dir {q(root)}/redis >{q(log)} 2>&1 </dev/null &",
        f"wait_ready redis $! {q(log)} redis_ping {port}",
    ]


def start_script(services: tuple[ServiceBinaries, ...], root: str,
                 ports: ServicePorts) -> str:
    """The bash script that starts every service under `root` (a fresh directory of the
    private area, as the sandbox sees it) and returns once each answers on loopback."""
    lines = ["set -u", _FAIL]
    for found in services:
        if found.spec.name == "postgresql":
            lines += _postgres_lines(found, root, ports.postgresql)
        else:
            lines += _redis_lines(found, root, ports.redis)
    lines.append("echo frognano-services-ready")
    return "\n".join(lines) + "\n"


def failure(stdout: str, stderr: str, exit_code: int | None, timed_out: bool) -> ServiceFailed:
    """The error for a start script that did not end ready, naming the service."""
    name, _, log = stdout.partition(FAILED_MARKER)[2].partition("\n")
    if not name.strip():
        how = "timed out" if timed_out else f"exited with {exit_code}"
        return ServiceFailed(f"the services did not start (the start script {how}): "
                             f"{(stdout + stderr).strip()[-LOG_TAIL_CHARS:]}")
    return ServiceFailed(f"service `{name.strip()}` did not start in the sandbox; its log "
                         f"ends:\n{log.strip()[-LOG_TAIL_CHARS:]}")
