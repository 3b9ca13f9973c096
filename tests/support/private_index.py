"""A stand-in for a company's private package index: plain HTTP on 127.0.0.1 behind basic
auth, serving this machine's local index (/opt/pypi) plus wheels a test makes, and
recording every request (path, whether its credentials were right, its User-Agent).
A hostile one (issue 30) also answers project pages of its own (`pages`: project → HTML)
and redirects (`redirects`: path → Location).
"""

from __future__ import annotations

import base64
import hashlib
import html
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOCAL_INDEX = Path("/opt/pypi")


def make_wheel(directory: Path, name: str, version: str, module: str) -> Path:
    """A minimal pure-Python wheel holding one module `name` with `module` as its code."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    files = {f"{name.replace('-', '_')}.py": module,
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                           f"Version: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={_b64_sha(t.encode())},{len(t.encode())}\n"
                     for n, t in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def _b64_sha(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass
class PrivateIndex:
    url: str  # with the credentials, as an operator would configure it
    token: str
    port: int
    requests: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def private_index(token: str, wheels: list[Path], *, user: str = "ci",
                  host: str = "127.0.0.1", pages: dict[str, str] | None = None,
                  redirects: dict[str, str] | None = None) -> Iterator[PrivateIndex]:
    expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
    own = {path.name: path for path in wheels}
    state = PrivateIndex("", token, 0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            authorized = self.headers.get("Authorization") == expected
            state.requests.append({"path": self.path, "authorized": authorized,
                                   "agent": self.headers.get("User-Agent", ""),
                                   "sent": self.headers.get("Authorization")})
            if not authorized:
                self._send(401, b"credentials needed\n", "text/plain",
                           {"WWW-Authenticate": 'Basic realm="corp"'})
                return
            path = self.path.split("?")[0].split("#")[0]
            if path in (redirects or {}):
                self._send(302, b"", "text/plain", {"Location": (redirects or {})[path]})
                return
            found = self._find(path)
            if found is None:
                self._send(404, b"not found\n", "text/plain")
            else:
                self._send(200, *found)

        def _find(self, path: str) -> tuple[bytes, str] | None:
            parts = [p for p in path.split("/") if p]
            if len(parts) == 2 and parts[0] == "simple" and parts[1] in (pages or {}):
                return (pages or {})[parts[1]].encode(), "text/html"
            if len(parts) == 2 and parts[0] == "simple":
                return self._page(parts[1])
            if len(parts) == 2 and parts[0] == "files":
                file = own.get(parts[1]) or LOCAL_INDEX / "files" / parts[1]
                if ".." not in parts[1] and file.is_file():
                    return file.read_bytes(), "application/octet-stream"
            return None

        def _page(self, project: str) -> tuple[bytes, str] | None:
            links = [f'<a href="../../files/{w.name}#sha256='
                     f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a>'
                     for w in own.values() if w.name.split("-")[0].lower().replace("_", "-")
                     == project]
            page = LOCAL_INDEX / "simple" / project / "index.html"
            if not links and (".." in project or not page.is_file()):
                return None
            text = "\n".join(links) if links else page.read_text()
            return text.encode(), "text/html"

        def _send(self, code: int, body: bytes, kind: str,
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    state.port = server.server_address[1]
    state.url = f"http://{user}:{token}@{host}:{state.port}/simple/"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
