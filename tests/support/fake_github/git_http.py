"""git smart HTTP for the fake, through `git http-backend` run as a CGI program."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path


def run_http_backend(project_root: Path, *, method: str, path: str, query: str,
                     headers: Mapping[str, str], body: bytes,
                     remote_user: str, extra_env: Mapping[str, str] | None = None,
                     ) -> tuple[int, list[tuple[str, str]], bytes]:
    """One smart-HTTP exchange: returns status, headers and body of the CGI's answer.
    `extra_env` reaches the repository's hooks (receive-pack runs them in this env)."""
    env = {
        **(extra_env or {}),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(project_root),  # keep the user's git config out of the server side
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_PROJECT_ROOT": str(project_root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "REMOTE_USER": remote_user,  # with a user set, receive-pack (push) is allowed
        "REMOTE_ADDR": "127.0.0.1",
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_TYPE": headers.get("content-type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "GATEWAY_INTERFACE": "CGI/1.1",
    }
    # Request headers the backend reads: gzip'ed upload-pack bodies and protocol v2.
    for name in ("content-encoding", "git-protocol"):
        if name in headers:
            env["HTTP_" + name.upper().replace("-", "_")] = headers[name]
    completed = subprocess.run(["git", "http-backend"], input=body, env=env,
                               capture_output=True, timeout=120, check=False)
    return _parse_cgi(completed.stdout, completed.stderr)


def _parse_cgi(output: bytes, stderr: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
    head, found, rest = output.partition(separator)
    if not found:
        return 500, [("content-type", "text/plain")], b"http-backend failed: " + stderr[-2000:]
    status = 200
    headers: list[tuple[str, str]] = []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        elif name:
            headers.append((name.strip().lower(), value.strip()))
    return status, headers, rest
