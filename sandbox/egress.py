"""The setup phase's only way out: an HTTPS (CONNECT) proxy to the package indexes' hosts.

Setup runs repository code (`pip install -e .` runs setup.py) with network access. In
the host's network namespace it could reach everything the host reaches without a
password: Redis on 127.0.0.1 (the Celery broker: enqueue runs, read other runs' state),
the receiver, a local model server, PostgreSQL, the cloud metadata service
(169.254.169.254, the host's cloud credentials), the LAN, and every abstract unix socket
of the host. So the setup sandbox gets a network namespace of its own (loopback only)
and a unix socket, bound in, to this proxy on the host; the runner inside relays
127.0.0.1:EGRESS_PORT to it and `https_proxy`/`http_proxy` point there (pip, uv, git,
curl, npm, cargo and go honour them). pip itself talks to the host-side index endpoint
(sandbox/index_endpoint.py), which holds the index URLs and their credentials.

Any public address would be a way to send the repository (and whatever else setup can
read) anywhere, so a CONNECT must name an allowed host and port (`EgressPolicy.targets`:
each index URL's host and port, the scheme's when it names none; PyPI's two hosts on 443
by default; FROGNANO_SETUP_EGRESS_HOSTS, `host` for 443 or `host:port`): an allowed host
is one service, not every service of that box. Every address that name resolves to must
be public (`ipaddress.is_global`), not one this host
can bind (its own public address reaches every service listening on 0.0.0.0), and not an
IPv6 form that carries an IPv4 address (NAT64, 6to4, Teredo, mapped: they lead back to
private IPv4 space through a translator), unless it lies in a network the operator allows
(FROGNANO_SETUP_EGRESS_ALLOW). The proxy connects to the address it checked (no second
lookup, so no DNS rebinding), or, when the host must go through an outbound proxy of its
own (HTTPS_PROXY), asks that proxy for the same host:port. Only CONNECT is served:
plain-http requests get 405. Every refusal is kept in the run's `NetworkLog`, which the
setup's result and its failure message carry, and logged here.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import ipaddress
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

SOCKET_NAME = "egress.sock"
HEAD_MAX_BYTES = 8192
CONNECT_TIMEOUT_SECONDS = 15.0
MAX_CONNECTIONS = 64
MAX_LOG_LINES = 50
PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")
HTTPS_PORT = 443  # the port of a host named without one
SCHEME_PORTS = {"http": 80, "https": 443}
HOSTS_SETTING = "FROGNANO_SETUP_EGRESS_HOSTS"
ALLOW_SETTING = "FROGNANO_SETUP_EGRESS_ALLOW"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# IPv6 prefixes that embed an IPv4 address and lead to it through a translator or a
# tunnel: 64:ff9b::/96 and 64:ff9b:1::/48 (NAT64), 2002::/16 (6to4), 2001::/32 (Teredo),
# ::ffff:0:0/96 (mapped), ::ffff:0:0:0/96 (SIIT translated), ::/96 (IPv4-compatible).
TRANSITION_NETWORKS: tuple[ipaddress.IPv6Network, ...] = tuple(
    ipaddress.IPv6Network(text) for text in (
        "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "::ffff:0:0/96",
        "::ffff:0:0:0/96", "::/96"))
log = logging.getLogger(__name__)


class NetworkLog:
    """What the setup phase's network helpers refused or could not fetch, one line each,
    for the run's transcript and the setup's failure message: bounded, deduplicated."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._seen: set[str] = set()  # bounded too: a hostile setup can vary every name
        self._dropped = 0
        self._lock = threading.Lock()

    def add(self, line: str) -> None:
        line = printable(line)
        with self._lock:
            if line in self._seen:
                return
            if len(self._seen) < 20 * MAX_LOG_LINES:
                self._seen.add(line)
            if len(self._lines) >= MAX_LOG_LINES:
                self._dropped += 1
                return
            self._lines.append(line)
        log.warning("setup network: %s", line)

    def lines(self) -> tuple[str, ...]:
        with self._lock:
            more = (f"... and {self._dropped} more",) if self._dropped else ()
            return (*self._lines, *more)


USERINFO = re.compile(r"(?<=//)[^/@\s]*@")


def redact(text: str) -> str:
    """`text` with every URL's userinfo (`user:token@`) replaced by `***@`."""
    return USERINFO.sub("***@", text)


def printable(text: str, limit: int = 300) -> str:
    """A name the sandbox chose, safe for a log line and a terminal."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


@dataclass(frozen=True, repr=False)
class OutboundProxy:
    """The host's own outbound proxy (HTTPS_PROXY, NO_PROXY), for the index endpoint's
    fetches and the CONNECT proxy alike."""

    url: str = ""
    no_proxy: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the proxy's URL may hold its password
        return redact(f"OutboundProxy({self.url!r}, {self.no_proxy!r})")

    def for_host(self, host: str) -> str:
        """The proxy URL to reach `host` through, or "" to go direct."""
        return "" if not self.url or bypasses(host, self.no_proxy) else self.url


def bypasses(host: str, no_proxy: Iterable[str]) -> bool:
    """curl's NO_PROXY rules: `*`, a domain and its subdomains, an address or a CIDR."""
    host = host.lower().strip("[]").rstrip(".")
    for entry in (e.strip().lower().rstrip(".") for e in no_proxy):
        if not entry:
            continue
        if entry == "*" or host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
            return True
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                return True
    return False


@dataclass(frozen=True)
class EgressPolicy:
    """Where a CONNECT may go: `targets`, (host, port) pairs (exact names or IP literals;
    `.example.com` also matches its subdomains), whose addresses must pass
    `address_problem`."""

    targets: tuple[tuple[str, int], ...] = tuple((h, HTTPS_PORT) for h in PYPI_HOSTS)
    allow: tuple[Network, ...] = ()
    proxy: OutboundProxy = field(default_factory=OutboundProxy)

    @classmethod
    def build(cls, hosts: Iterable[str], allow: Iterable[str] = (),
              proxy: OutboundProxy | None = None) -> EgressPolicy:
        """`hosts`: `host` (port 443) or `host:port` entries (`[v6]:port`)."""
        networks = tuple(ipaddress.ip_network(item.strip(), strict=False)
                         for item in allow if item.strip())
        targets = tuple(dict.fromkeys(split_target(h) for h in hosts if h.strip()))
        return cls(targets, networks, proxy or OutboundProxy())

    def hosts_on(self, port: int) -> tuple[str, ...]:
        """The hosts a CONNECT to `port` may name."""
        return tuple(host for host, allowed in self.targets if allowed == port)


def split_target(entry: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address → (host, port); a host
    named without a port is allowed on 443 only. ValueError for a port that is none."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") if rest else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:  # a name, or an IPv6 address without brackets (no port can follow it)
        host, port = text, ""
    if not port:
        return host, HTTPS_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{HOSTS_SETTING}: {entry.strip()!r} is not `host` or `host:port`")
    return host, int(port)


def join_target(host: str, port: int) -> str:
    """What names (host, port) in FROGNANO_SETUP_EGRESS_HOSTS: `host` for 443."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port == HTTPS_PORT else f"{shown}:{port}"


def index_targets(urls: Iterable[str]) -> tuple[str, ...]:
    """`host:port` of each http(s) index URL, the scheme's port when it names none (a
    file: entry has none); PyPI's files host with pypi.org, where PyPI keeps its files."""
    found: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        try:
            port = parts.port or SCHEME_PORTS.get(parts.scheme)
        except ValueError:  # no port the endpoint could fetch from either
            continue
        if port and parts.hostname:
            shown = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            found.append(f"{shown}:{port}")
            if parts.hostname == "pypi.org":
                found.append(f"files.pythonhosted.org:{HTTPS_PORT}")
    return tuple(dict.fromkeys(found))


def host_allowed(host: str, hosts: Iterable[str]) -> bool:
    host = host.lower().strip("[]").rstrip(".")
    literal = _ip(host)
    for entry in hosts:
        entry = entry.lower().strip("[]").rstrip(".")
        if literal is not None:
            if literal == _ip(entry):
                return True
        elif host == entry or (entry.startswith(".") and host.endswith(entry)):
            return True
    return False


def _ip(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def host_can_bind(ip: Address) -> bool:
    """Whether `ip` is this host's own (bind succeeds only for local addresses: every
    interface's, 127.0.0.0/8, and routes of type local), read from the kernel itself."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError as exc:
            return exc.errno != errno.EADDRNOTAVAIL  # anything else: assume it is ours
    return True


def address_problem(address: str, allow: Iterable[Network] = ()) -> str | None:
    """Why the setup phase may not connect to `address`, or None when it may."""
    ip = _ip(address)
    if ip is None:
        return "not an IP address"
    if any(ip.version == network.version and ip in network for network in allow):
        return None  # the operator's word, for a network they named
    if isinstance(ip, ipaddress.IPv6Address) and any(ip in n for n in TRANSITION_NETWORKS):
        return "an IPv6 form of an IPv4 address (NAT64, 6to4, Teredo, mapped)"
    if ip.is_unspecified:
        return "an address of this host"
    if not ip.is_global or ip.is_multicast:
        return "not a public address"
    if host_can_bind(ip):  # a public address of this host's: its services listen there
        return "an address of this host"
    return None


def describe_refusals(lines: Iterable[str]) -> str:
    """The setup failure message's tail: what the network helpers refused, and how."""
    found = list(lines)
    return "; the setup's network: " + "; ".join(found) if found else ""


def private_socket(prefix: str, name: str, uid: int, gid: int
                   ) -> tuple[Path, Path, socket.socket]:
    """A listening unix socket in a directory only the sandbox uid (and the host) can
    enter: the directory, the socket's path, the socket."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    path = directory / name
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        server.listen(16)
        os.chmod(path, 0o666)  # connect() needs write; the 0700 directory guards
        if os.geteuid() == 0 and uid != 0:
            os.chown(directory, uid, gid)
        os.chmod(directory, 0o700)
    except OSError:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory, path, server


class SocketService:
    """A host-side service on a private unix socket (or, for the unsafe-local backend, on
    127.0.0.1), a thread per connection up to MAX_CONNECTIONS; `close()` stops it."""

    def __init__(self, uid: int, gid: int, prefix: str, name: str, *,
                 tcp: bool = False) -> None:
        self.directory: Path | None = None
        self.port = 0
        if tcp:
            self._server = socket.create_server(("127.0.0.1", 0))
            self.port = self._server.getsockname()[1]
            self.path = Path()
        else:
            self.directory, self.path, self._server = private_socket(prefix, name, uid, gid)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread = threading.Thread(target=self._accept, daemon=True, name=prefix)
        self._thread.start()

    def check(self) -> None:
        """Before the bind: the socket is still ours, a socket, not a link."""
        info = os.lstat(self.path)
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(f"{self.path} is no longer the host's socket")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._server.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=self._serve_one, args=(client,), daemon=True).start()

    def _serve_one(self, client: socket.socket) -> None:
        try:
            self.serve(client)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()
            self._slots.release()

    def serve(self, client: socket.socket) -> None:
        raise NotImplementedError


class EgressProxy(SocketService):
    """One proxy per setup sandbox; what it refused goes to `log` (and `refused`)."""

    def __init__(self, uid: int, gid: int, policy: EgressPolicy,
                 network_log: NetworkLog | None = None) -> None:
        self.policy = policy
        self.log = network_log or NetworkLog()
        self.refused: list[str] = []  # "host:port (why)"
        super().__init__(uid, gid, "frognano-egress-", SOCKET_NAME)

    def serve(self, client: socket.socket) -> None:
        client.settimeout(CONNECT_TIMEOUT_SECONDS)
        upstream = self._open(client, _read_head(client))
        if upstream is None:
            return
        with upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            client.settimeout(None)
            upstream.settimeout(None)
            _relay(client, upstream)

    def _refuse(self, client: socket.socket, target: str, why: str, setting: str,
                scope: str = "") -> None:
        line = f"refused CONNECT {target}: {why} ({setting} would allow it{scope})"
        self.refused.append(printable(f"{target} ({why})"))
        self.log.add(line)
        _answer(client, 403, line)

    def _open(self, client: socket.socket, head: bytes) -> socket.socket | None:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or parts[0].upper() != "CONNECT":
            _answer(client, 405, "only CONNECT (https) is proxied for the setup phase")
            return None
        host, _, port_text = parts[1].rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            _answer(client, 400, "CONNECT needs host:port")
            return None
        port, target = int(port_text), printable(parts[1], 200)
        if not host_allowed(host, self.policy.hosts_on(port)):
            # Another port of an allowed host is another service of that box (its Redis,
            # its admin page): refused the same way, and named so.
            known = host_allowed(host, (name for name, _ in self.policy.targets))
            self._refuse(client, target, f"not a package index {'port' if known else 'host'}",
                         f"{HOSTS_SETTING}={printable(join_target(host.lower(), port), 200)}")
            return None
        return self._connect(client, host, port, target)

    def _connect(self, client: socket.socket, host: str, port: int,
                 target: str) -> socket.socket | None:
        via = self.policy.proxy.for_host(host)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            if not via:  # behind an outbound proxy, names may resolve only there
                self.log.add(f"CONNECT {target}: cannot resolve {printable(host)}: {exc}")
                _answer(client, 502, f"cannot resolve {host}: {exc}")
                return None
            infos = []
        for info in infos:
            address = str(info[4][0])
            why = address_problem(address, self.policy.allow)
            if why:  # a network allows addresses; the ports stay the listed ones
                self._refuse(client, target, f"{host} resolves to {address}, {why}",
                             f"{ALLOW_SETTING}={address}/{128 if ':' in address else 32}",
                             f", on the listed port {port} only")
                return None
        try:
            if via:
                return _tunnel(via, host, port)
            return _dial(infos[0])
        except OSError as exc:
            self.log.add(f"CONNECT {target}: cannot connect: {exc}")
            _answer(client, 502, f"cannot connect to {target}: {exc}")
            return None


def _dial(info: tuple) -> socket.socket:  # type: ignore[type-arg]
    family, kind, proto, _, address = info
    upstream = socket.socket(family, kind, proto)
    upstream.settimeout(CONNECT_TIMEOUT_SECONDS)
    try:
        upstream.connect(address)  # the address just checked: no second lookup
    except OSError:
        upstream.close()
        raise
    return upstream


def _tunnel(proxy_url: str, host: str, port: int) -> socket.socket:
    """A CONNECT through the host's own outbound proxy (its credentials, if the URL
    holds them, stay here); the socket once the proxy said 200."""
    parts = urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
    upstream = socket.create_connection((parts.hostname or "", parts.port or 3128),
                                        timeout=CONNECT_TIMEOUT_SECONDS)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        head += f"Proxy-Authorization: Basic {base64.b64encode(pair.encode()).decode()}\r\n"
    try:
        upstream.sendall((head + "\r\n").encode())
        answer = _read_head(upstream)
    except OSError:
        upstream.close()
        raise
    status = answer.split(b"\r\n", 1)[0].decode("latin-1")
    if status.split()[1:2] != ["200"]:
        upstream.close()
        raise OSError(f"the outbound proxy answered {printable(status, 100)}")
    return upstream


def _read_head(sock: socket.socket) -> bytes:
    """Up to the blank line, one byte past it never: what follows belongs to the relay."""
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        if not chunk or len(data) >= HEAD_MAX_BYTES:
            raise OSError("no complete request head")
        data += chunk
    return data


def _answer(sock: socket.socket, code: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
              502: "Bad Gateway"}[code]
    body = (text + "\n").encode()
    with contextlib.suppress(OSError):
        sock.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                     + body)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side is done."""
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join()
