"""The index endpoint follows an index's redirects itself (`_NoRedirect`, issue 30 §6).

urllib's own redirect handler copies every header of the request to the redirect's
target, the index's `Authorization` among them. The endpoint turns that handler off and
follows redirects by hand, sending credentials to their own origin only. The attack here
is an index (a compromised one, or whoever answers a plain-http index) that answers its
project page with `302` to another origin it controls, over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import base64
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sandbox.index_endpoint import IndexEndpoint, PackageSources

TOKEN = "tok-5be17c"  # the index's: it must never reach another origin
PAGE = b'<a href="corp_helper-1.0-py3-none-any.whl">corp_helper-1.0-py3-none-any.whl</a>\n'


@dataclass
class Origin:
    """One HTTP server: the headers of each request it got."""

    port: int = 0
    seen: list[dict[str, str]] = field(default_factory=list)

    def heard_token(self) -> bool:
        needle = base64.b64encode(f"ci:{TOKEN}".encode()).decode()
        return any(needle in value or TOKEN in value
                   for headers in self.seen for value in headers.values())


@contextmanager
def origin(answer: Any) -> Iterator[Origin]:
    """A server that records every request and answers with `answer(handler)`."""
    state = Origin()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            state.seen.append({"path": self.path, **dict(self.headers.items())})
            answer(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"",
         location: str | None = None) -> None:
    handler.send_response(status)
    if location:
        handler.send_header("Location", location)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def test_an_index_that_redirects_to_another_origin_never_hands_it_the_credentials(
        ) -> None:
    """The attacker's origin answers the page, so nothing fails on the way: the only
    thing the test looks at is which origin heard the index's token."""
    with origin(lambda h: send(h, 200, PAGE)) as attacker:
        redirect = f"http://127.0.0.1:{attacker.port}/simple/corp-helper/"

        def index_answer(handler: BaseHTTPRequestHandler) -> None:
            send(handler, 302, location=redirect)  # every page: over there

        with origin(index_answer) as index:
            sources = PackageSources(f"http://ci:{TOKEN}@127.0.0.1:{index.port}/simple/")
            service = IndexEndpoint(sources, os.getuid(), os.getgid(), tcp=True)
            try:
                url = f"http://127.0.0.1:{service.port}/i/0/corp-helper/"
                try:
                    with urllib.request.urlopen(url, timeout=30) as answer:
                        answer.read()
                except urllib.error.HTTPError as exc:
                    exc.close()  # refused outright is fine too: the token is what counts
            finally:
                service.close()
    assert index.heard_token(), index.seen  # the index itself was sent its credentials
    assert not attacker.heard_token(), attacker.seen
