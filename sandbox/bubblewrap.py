"""The bubblewrap backend: the runner inside an unprivileged, network-less bwrap.

One long-lived bwrap per sandbox serves every tool call (a JSON round trip, not a
container start); `exec(network=True)` gets its own one-shot bwrap that shares the host
network, so the agent phase never has one.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import resource
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from sandbox import cgroup, seccomp
from sandbox.base import (
    SandboxConfig,
    SandboxError,
    SandboxLimits,
    SandboxUnavailable,
    setup_tool_env,
)
from sandbox.egress import (
    EgressPolicy,
    EgressProxy,
    NetworkLog,
    SocketService,
    index_targets,
)
from sandbox.enforcement import describe
from sandbox.index_endpoint import INDEX_PORT, IndexEndpoint
from sandbox.runner_client import RUNNER_PATH, RunnerBackedSandbox, RunnerProcess
from sandbox.services import service_env
from sandbox.uid_pool import POOL_BASE, UidLease, passwd_lines
from sandbox.usage_watch import UsageWatch

INSTALL_HINT = (
    "bubblewrap (bwrap) is not on PATH: install it (e.g. `apt-get install bubblewrap`), "
    "or choose `--sandbox unsafe-local` for development only"
)
WORKDIR = "/workspace"
PRIVATE = "/frognano"
RUNNER_INSIDE = "/run/frognano/runner.py"
EGRESS_INSIDE = "/run/frognano/egress.sock"
EGRESS_PORT = 3128  # inside the setup sandbox's own network namespace: nobody else's
INDEX_INSIDE = "/run/frognano/index.sock"
TOOLS_INSIDE = "/run/frognano/bin"  # the setup phase's tools (uv), on its PATH
TMPFS_INSIDE = ("/tmp", "/dev/shm")  # memory, not disk: counted against memory_bytes
log = logging.getLogger(__name__)
# Top-level system paths that are symlinks into /usr on merged-/usr distributions.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# /etc is never bound whole (shadow, ssh keys, credentials live there). /etc/profile is
# left out on purpose: Debian's resets PATH, which would hide the per-run venv.
ETC_ALLOWLIST = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
    "ca-certificates.conf", "nsswitch.conf", "hosts", "host.conf",
    "resolv.conf", "gai.conf", "services", "protocols", "localtime", "timezone",
    "bash.bashrc", "inputrc", "mime.types", "magic", "os-release", "debian_version",
    "xdg/pip", "pip.conf", "python3", "python3.11", "java-17-openjdk", "npmrc",
)


SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def interpreter() -> tuple[str, list[str]]:
    """The host's Python (real path) and the prefixes it needs, to run the runner inside."""
    prefixes = sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)})
    candidate = os.path.join(os.path.realpath(sys.base_prefix), "bin", "python3")
    python = os.path.realpath(candidate if os.path.exists(candidate) else sys.executable)
    return python, prefixes


def reachable(path: Path | str, uid: int, gid: int) -> bool:
    """Whether `uid` can reach `path` (search permission on every ancestor).

    bwrap runs as that uid and resolves bind sources itself, even for `--bind-fd`, so a
    source under a root-only directory (/root/.pyenv, pytest's tmp dirs) cannot be bound.
    """
    if uid == os.getuid():
        return os.access(path, os.F_OK)
    current = Path(os.path.realpath(path))
    for directory in [*reversed(current.parents), current]:
        try:
            info = os.stat(directory)
        except OSError:
            return False
        if not os.path.isdir(directory):
            continue
        if info.st_uid == uid:
            bit = 0o100
        elif info.st_gid == gid:
            bit = 0o010
        else:
            bit = 0o001
        if not info.st_mode & bit:
            return False
    return True


@functools.lru_cache(maxsize=8)  # once per uid: the answer (and its warning) does not change
def sandbox_interpreter(uid: int, gid: int) -> tuple[str, list[str]]:
    """The host's Python when the sandbox uid can reach it, else the system one."""
    python, prefixes = interpreter()
    if all(reachable(prefix, uid, gid) for prefix in prefixes):
        return python, prefixes
    for candidate in SYSTEM_PYTHONS:
        if os.path.exists(candidate) and reachable(candidate, uid, gid):
            log.warning("the sandbox uid %d cannot reach %s; the runner uses %s instead",
                     uid, ", ".join(prefixes), candidate)
            return candidate, []
    raise SandboxUnavailable(
        f"no Python interpreter reachable by the sandbox uid {uid}: {python} lies under a "
        "directory it cannot enter; install python3 under /usr or /usr/local")


def _rlimits(limits: SandboxLimits, *, processes: bool,
             join: Callable[[], None] | None = None,
             drop_to: tuple[int, int] | None = None) -> Callable[[], None]:
    def apply() -> None:  # runs in the child before exec
        if join is not None:  # into the sandbox's cgroup, while still allowed to
            join()
        if drop_to is not None:
            os.setgroups([])
            os.setgid(drop_to[1])
            os.setuid(drop_to[0])
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if processes:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes,) * 2)
    return apply


def chown_tree(root: Path, uid: int, gid: int, *, skip: set[str]) -> None:
    """Hand a tree to the sandbox uid without following symlinks (the content is untrusted)."""
    if os.lstat(root).st_uid != uid:
        os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if dirpath == str(root):
            dirnames[:] = [name for name in dirnames if name not in skip]
            filenames = [name for name in filenames if name not in skip]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            stat = os.lstat(path)
            if stat.st_uid != uid or stat.st_gid != gid:
                os.lchown(path, uid, gid)


def host_files(uid: int, gid: int) -> Path:
    """A host-owned directory (0755, files 0644) with the sandbox's passwd and group:
    bind sources the sandbox cannot write, so it cannot swap them for links."""
    directory = Path(tempfile.mkdtemp(prefix="frognano-etc-"))
    directory.chmod(0o755)
    passwd, group = passwd_lines(uid, gid, f"{PRIVATE}/home")
    for name, text in (("passwd", passwd), ("group", group)):
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(directory / name, 0o644)  # whatever the umask
    return directory


def check_host_owned(path: Path, *, directory: bool) -> None:
    """Refuse a bind source that is a link, not ours, or writable by anyone else."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SandboxError(f"bind source {path} cannot be opened safely: {exc}") from exc
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    kind_ok = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    if not kind_ok or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxError(f"bind source {path} is not a host-owned, host-only-writable "
                           f"{'directory' if directory else 'file'}; not binding it")


class BubblewrapSandbox(RunnerBackedSandbox):
    """`Sandbox` on bubblewrap. Run as root, bwrap itself runs as `config.sandbox_uid`."""

    workdir = WORKDIR

    def __init__(self, config: SandboxConfig, *, bwrap: str | None = None) -> None:
        super().__init__(config)
        found = bwrap or shutil.which("bwrap")
        if not found:
            raise SandboxUnavailable(INSTALL_HINT)
        self.bwrap = found
        # RLIMIT_NPROC does not bind real uid 0 (even in a user namespace): drop to a
        # plain uid so the process limit, and everything else, applies.
        self.as_root = os.geteuid() == 0
        self._lease: UidLease | None = None
        if not self.as_root:
            self.uid, self.gid = os.getuid(), os.getgid()
        elif config.sandbox_uid is not None:
            self.uid = config.sandbox_uid
            self.gid = config.sandbox_gid if config.sandbox_gid is not None else self.uid
        else:
            self._lease = UidLease()
            self.uid = self.gid = self._lease.uid
        # Every pool uid is "other" to the system's files: probe reachability once.
        probe = (POOL_BASE, POOL_BASE) if self._lease else (self.uid, self.gid)
        self.python, self.prefixes = sandbox_interpreter(*probe)
        self._host_files: Path | None = None  # passwd, group: host-owned, bound read-only
        self._cgroup: cgroup.SandboxCgroup | None = None

    def close(self) -> None:
        super().close()
        if self._cgroup is not None:
            self._cgroup.close()
            self._cgroup = None
        if self._host_files is not None:
            shutil.rmtree(self._host_files, ignore_errors=True)
            self._host_files = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _prepare(self) -> None:
        workspace, private = self.config.workspace, self.config.private_dir
        if not workspace.is_dir():
            raise SandboxUnavailable(f"workspace {workspace} is not a directory")
        private.mkdir(parents=True, exist_ok=True)
        for sub in ("home", "venv"):  # never through a link a previous sandbox left there
            if not os.path.lexists(private / sub):
                os.mkdir(private / sub)
        self._host_files = host_files(self.uid, self.gid)
        self._setup_cgroup()
        if self.as_root:
            # .git too: it is the sandbox's own writable copy, which the host never reads.
            chown_tree(workspace, self.uid, self.gid, skip=set())
            chown_tree(private, self.uid, self.gid, skip=set())
        venv_ro = [self.config.venv_ro] if self.config.venv_ro is not None else []
        for path in (workspace, private, RUNNER_PATH, self._host_files,
                     *self.config.extra_ro_binds, *self.config.setup_ro_binds,
                     *self.config.setup_tools, *venv_ro):
            if not reachable(path, self.uid, self.gid):
                raise SandboxUnavailable(
                    f"{path} is not reachable by the sandbox uid {self.uid}: every parent "
                    "directory needs search permission (o+x) for bubblewrap to bind it")

    def environment(self) -> dict[str, str]:
        path = [f"{PRIVATE}/venv/bin", *(f"{prefix}/bin" for prefix in self.prefixes),
                "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        env = {
            "PATH": ":".join(dict.fromkeys(path)), "HOME": f"{PRIVATE}/home", "TMPDIR": "/tmp",
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        # The services' usual ports: free in the sandbox's own network namespace.
        env.update(service_env(self.config.services, self.service_ports()))
        env.update(self.config.env)
        return env

    def _private_inside(self) -> str:
        return PRIVATE

    def setup_environment(self, index: Path | None) -> dict[str, str]:
        """The setup phase's own variables: the proxy, pip's index endpoint (its paths,
        never the indexes' URLs), then the config's."""
        proxy = f"http://127.0.0.1:{EGRESS_PORT}"
        env = dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"), proxy)
        env["no_proxy"] = env["NO_PROXY"] = "localhost,127.0.0.1,::1"
        if index is not None:
            env.update(self.config.package_sources.sandbox_env(
                f"http://127.0.0.1:{INDEX_PORT}"))
        env.update(setup_tool_env(PRIVATE))
        if self.config.setup_tools:  # found before the system's, after the venv's own
            path = self.environment()["PATH"].split(":")
            env["PATH"] = ":".join([*path[:1], TOOLS_INSIDE, *path[1:]])
        env.update(self.config.setup_env)
        return env

    def bwrap_argv(self, *, network: bool, seccomp_fd: int | None = None,
                   egress: Path | None = None, index: Path | None = None) -> list[str]:
        """`network`: the setup phase, in a network namespace of its own whose only ways
        out are the host's egress proxy at `egress` (sandbox/egress.py) and its package
        index endpoint at `index` (sandbox/index_endpoint.py), never the host's own
        network namespace (its loopback services and abstract sockets)."""
        limits = self.config.limits
        workspace = self.config.workspace.resolve()
        # --disable-userns: no nested user namespace, where the commands would get back
        # the capabilities (and the ptrace rights over the runner) dropped here.
        argv = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
        if seccomp_fd is not None:  # the kernel keyring closed (sandbox/seccomp.py)
            argv += ["--seccomp", str(seccomp_fd)]
        if network and egress is None:
            raise SandboxError("the setup phase needs its egress proxy")
        argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL",
                 "--hostname", "sandbox", "--clearenv"]
        env = {**self.environment(), **(self.setup_environment(index) if network else {})}
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += self._system_binds()
        # /dev is a tmpfs of bwrap's: read-only, with a sized /dev/shm of its own.
        argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
                 "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm",
                 "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
                 "--dir", "/var", "--symlink", "/tmp", "/var/tmp",
                 "--bind", str(workspace), WORKDIR]  # its .git with it: the model's own
        argv += ["--bind", str(self.config.private_dir.resolve()), PRIVATE,
                 "--ro-bind", str(RUNNER_PATH.resolve()), RUNNER_INSIDE]
        if self.config.venv_ro is not None:
            argv += ["--ro-bind", str(self.config.venv_ro.resolve()), f"{PRIVATE}/venv"]
        if egress is not None:
            argv += ["--ro-bind", str(egress), EGRESS_INSIDE]
        if index is not None:
            argv += ["--ro-bind", str(index), INDEX_INSIDE]
        for tool in self.config.setup_tools if network else ():
            argv += ["--ro-bind", os.path.realpath(tool), f"{TOOLS_INSIDE}/{tool.name}"]
        # After /tmp and /var/tmp exist: an extra bind may live under either. Inside,
        # /var/tmp is a link to /tmp, which bwrap does not create mount points through:
        # /var/tmp/x is bound at /tmp/x, where the link leads.
        setup_binds = self.config.setup_ro_binds if network else []
        for path in map(str, [*self.config.extra_ro_binds, *setup_binds]):
            inside = "/tmp/" + path[len("/var/tmp/"):] if path.startswith("/var/tmp/") \
                else path
            argv += ["--ro-bind", path, inside]
        # The root tmpfs holds only mount points: freeze it, so /etc and / are as
        # read-only as the system they stand for.
        argv += ["--remount-ro", "/",
                 "--chdir", WORKDIR, "--",
                 self.python, "-I", "-S", RUNNER_INSIDE, "serve", "--workdir", WORKDIR,
                 "--reap", "namespace",
                 "--default-timeout", str(limits.default_timeout),
                 "--max-timeout", str(limits.max_timeout),
                 "--bash-chars", str(limits.max_output_chars)]
        if egress is not None:
            argv += ["--egress-socket", EGRESS_INSIDE, "--egress-port", str(EGRESS_PORT)]
        if index is not None:
            argv += ["--index-socket", INDEX_INSIDE, "--index-port", str(INDEX_PORT)]
        return argv

    def _system_binds(self) -> list[str]:
        """The system, read-only: /usr and its siblings, an allow-list of /etc, the
        sandbox's own passwd and group, and the Python prefixes."""
        argv = ["--ro-bind", "/usr", "/usr"]
        for name in SYSTEM_DIRS:
            host = f"/{name}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        for name in ETC_ALLOWLIST:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        assert self._host_files is not None, "bind sources are made by _prepare"
        for name in ("passwd", "group"):  # the sandbox's own user, not the host's list
            argv += ["--ro-bind", str(self._host_files / name), f"/etc/{name}"]
        for path in self.prefixes:
            argv += ["--ro-bind", path, path]
        return argv

    def _spawn(self, *, network: bool) -> RunnerProcess:
        self._check_bind_sources()
        drop = (self.uid, self.gid) if self.as_root else None
        join = self._cgroup.join if self._cgroup is not None else None
        network_log = NetworkLog()
        proxy, endpoint = self._network_helpers(network_log) if network else (None, None)
        helpers: list[SocketService] = [h for h in (proxy, endpoint) if h is not None]
        filter_fd = seccomp.program_fd()
        try:
            if filter_fd is None:
                raise SandboxUnavailable(f"no seccomp filter for this machine "
                                         f"({platform.machine()}): the sandbox would share "
                                         "the worker's kernel keyring; not starting it")
            for helper in helpers:
                helper.check()
            runner = RunnerProcess(
                self.bwrap_argv(network=network, seccomp_fd=filter_fd,
                                egress=proxy.path if proxy else None,
                                index=endpoint.path if endpoint else None),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                cwd="/", pass_fds=(filter_fd,),
                preexec_fn=_rlimits(self.config.limits, processes=True, join=join,
                                    drop_to=drop),
            )
        except BaseException:
            for helper in helpers:
                helper.close()
            raise
        finally:
            if filter_fd is not None:
                os.close(filter_fd)
        runner.on_kill.extend(helper.close for helper in helpers)
        runner.network_log = network_log
        return runner

    def _network_helpers(self, network_log: NetworkLog
                         ) -> tuple[EgressProxy, IndexEndpoint]:
        """The setup phase's two ways out, on the host: the CONNECT proxy (the indexes'
        hosts on their ports, and the operator's) and the package index endpoint."""
        config = self.config
        policy = EgressPolicy.build([*index_targets(config.package_sources.urls()),
                                     *config.egress_hosts],
                                    config.egress_allow, config.outbound_proxy)
        proxy = EgressProxy(self.uid, self.gid, policy, network_log)
        try:
            endpoint = IndexEndpoint(config.package_sources, self.uid, self.gid,
                                     proxy=config.outbound_proxy, network_log=network_log,
                                     allow=policy.allow, quota_bytes=config.limits.disk_bytes)
        except BaseException:
            proxy.close()
            raise
        return proxy, endpoint

    def _check_bind_sources(self) -> None:
        """Before every spawn: the read-write binds are the host's real directories and
        every other bind source is a host file the sandbox never could write."""
        for path in (self.config.workspace, self.config.private_dir):
            try:
                info = os.lstat(path)
            except OSError as exc:  # removed under the run: the sandbox cannot come back
                raise SandboxError(f"{path} is gone ({exc.strerror}); not binding it") from None
            if not stat.S_ISDIR(info.st_mode):
                raise SandboxError(f"{path} is no longer a real directory; not binding it")
        writable = [self.config.workspace.resolve(), self.config.private_dir.resolve()]
        if self._host_files is None:  # used again after close()
            self._host_files = host_files(self.uid, self.gid)
        sources: list[str | Path] = [*self.prefixes, *self.config.extra_ro_binds,
                                     *self.config.setup_ro_binds, *self.config.setup_tools,
                                     RUNNER_PATH,
                                     *([self.config.venv_ro] if self.config.venv_ro else [])]
        for source in sources:
            real = Path(os.path.realpath(source))
            if any(real == root or root in real.parents for root in writable):
                raise SandboxError(f"{source} lies in a directory the sandbox can write; "
                                   "it cannot be bound read-only")
        check_host_owned(self._host_files, directory=True)
        for name in ("passwd", "group"):
            check_host_owned(self._host_files / name, directory=False)

    def _usage_watch(self, runner: RunnerProcess) -> UsageWatch | None:
        if self._cgroup is not None:
            return None  # the kernel enforces memory.max and pids.max
        limits = self.config.limits
        return UsageWatch(runner.proc.pid, memory_limit=limits.memory_bytes,
                          process_limit=limits.max_processes, tmpfs=TMPFS_INSIDE,
                          on_exceeded=runner.signal_kill)

    def _setup_cgroup(self) -> None:
        parent, why = cgroup.available()
        if parent is not None:
            limits = self.config.limits
            try:
                self._cgroup = cgroup.SandboxCgroup(parent, memory_bytes=limits.memory_bytes,
                                                    max_processes=limits.max_processes)
            except OSError as exc:
                parent, why = None, f"cannot create a cgroup under {parent}: {exc}"
        lines = describe(self.config.limits, cgroup=why if parent else None, why_not=why)
        log.info("sandbox limits: %s", "; ".join(lines))
