"""The setup phase's only way out: an HTTPS (CONNECT) proxy to public addresses.

Setup runs repository code (`pip install -e .` runs setup.py) with network access. In
the host's network namespace it could reach everything the host reaches without a
password: Redis on 127.0.0.1 (the Celery broker: enqueue runs, read other runs' state),
the receiver, a local model server, PostgreSQL, the cloud metadata service
(169.254.169.254, the host's cloud credentials), the LAN, and every abstract unix socket
of the host. So the setup sandbox gets a network namespace of its own (loopback only)
and a unix socket, bound in, to this proxy on the host; the runner inside relays
127.0.0.1:EGRESS_PORT to it and `https_proxy`/`http_proxy` point there (pip, uv, git,
curl, npm, cargo and go honour them).

The proxy resolves the name itself and connects only to globally routable addresses
(`ipaddress.is_global`: no loopback, private, link-local, CGNAT or reserved ranges),
to the address it checked (no second lookup, so no DNS rebinding), plus networks the
operator allows in FROGNANO_SETUP_EGRESS_ALLOW (comma-separated CIDRs, e.g. a private
package index). Only CONNECT is served: plain-http requests get 405 (pip, npm and git
use https). Not covered: what public hosts the setup talks to (exfiltrating what the
sandbox holds, the repository, is possible; it holds no secret of the host's).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

ENV_ALLOW = "FROGNANO_SETUP_EGRESS_ALLOW"
SOCKET_NAME = "egress.sock"
HEAD_MAX_BYTES = 8192
CONNECT_TIMEOUT_SECONDS = 15.0
MAX_CONNECTIONS = 64
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def allowed_networks(extra: Iterable[str] = ()) -> list[Network]:
    """The operator's extra networks (FROGNANO_SETUP_EGRESS_ALLOW) and `extra`."""
    items = [*os.environ.get(ENV_ALLOW, "").split(","), *extra]
    return [ipaddress.ip_network(item.strip(), strict=False) for item in items if item.strip()]


def destination_allowed(address: str, allow: Iterable[Network]) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is loopback
    if any(ip in network for network in allow):
        return True
    return ip.is_global and not ip.is_multicast


class EgressProxy:
    """One proxy per setup sandbox, on a unix socket in a directory only the sandbox uid
    (and the host) can enter; `close()` stops it and removes the directory."""

    def __init__(self, uid: int, gid: int, allow: Iterable[str] = ()) -> None:
        self.allow = allowed_networks(allow)
        self.directory = Path(tempfile.mkdtemp(prefix="frognano-egress-"))
        self.path = self.directory / SOCKET_NAME
        self.refused: list[str] = []  # "host:port (why)", for the setup's log
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(str(self.path))
            self._server.listen(16)
            os.chmod(self.path, 0o666)  # connect() needs write; the 0700 directory guards
            if os.geteuid() == 0 and uid != 0:
                os.chown(self.directory, uid, gid)
            os.chmod(self.directory, 0o700)
        except OSError:
            self.close()
            raise
        self._thread = threading.Thread(target=self._accept, daemon=True, name="egress")
        self._thread.start()

    def check(self) -> None:
        """Before the bind: the socket is still ours, a socket, not a link."""
        info = os.lstat(self.path)
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(f"{self.path} is no longer the host's egress socket")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._server.close()
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
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(CONNECT_TIMEOUT_SECONDS)
            head = _read_head(client)
            upstream = self._open(client, head)
            if upstream is None:
                return
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            client.settimeout(None)
            upstream.settimeout(None)
            _relay(client, upstream)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
            self._slots.release()

    def _open(self, client: socket.socket, head: bytes) -> socket.socket | None:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3 or parts[0].upper() != "CONNECT":
            _answer(client, 405, "only CONNECT (https) is proxied for the setup phase")
            return None
        host, _, port_text = parts[1].rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            _answer(client, 400, "CONNECT needs host:port")
            return None
        port = int(port_text)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            _answer(client, 502, f"cannot resolve {host}: {exc}")
            return None
        addresses = [str(info[4][0]) for info in infos]  # typed str | int (IPv6 tuples)
        blocked = [a for a in addresses if not destination_allowed(a, self.allow)]
        if blocked or not addresses:
            self.refused.append(f"{host}:{port} ({', '.join(blocked)} is not public)")
            _answer(client, 403, f"{host} resolves to {', '.join(blocked)}, not a public "
                                 "address: the setup phase may reach public hosts only")
            return None
        family, kind, proto, _, address = infos[0]
        upstream = socket.socket(family, kind, proto)
        upstream.settimeout(CONNECT_TIMEOUT_SECONDS)
        try:
            upstream.connect(address)  # the address just checked: no second lookup
        except OSError as exc:
            upstream.close()
            _answer(client, 502, f"cannot connect to {host}:{port}: {exc}")
            return None
        return upstream


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1024)
        if not chunk or len(data) + len(chunk) > HEAD_MAX_BYTES:
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
