"""The setup phase's package index: a host-side endpoint that alone holds the real indexes.

pip in the setup sandbox is given `http://127.0.0.1:INDEX_PORT/...` (the runner relays that
port to this endpoint's unix socket, as it does the egress proxy's), never the operator's
index URLs: those may carry a token (`https://user:TOKEN@pypi.corp/simple`) that the
repository's setup.py could read and send out. The endpoint fetches from the real indexes
(http(s) with the credentials, which go to their own origin only, through the host's
outbound proxy; or `file://` directories, which are then never bound into the sandbox)
and serves their project pages rebuilt: every file link points back here, to an entry of
a table that only pages it served fill, so the sandbox fetches what an index links and
nothing else (no URL of its choosing, no path outside a project's page).

A file whose link gives a sha256 goes through a download cache that runs share
(`cache_dir`: written here only, never bound into a sandbox), named by that hash and
stored only once its bytes matched it. An index that fails (401, DNS, a timeout) gives pip
a 502 whose reason names it, credentials left out, and a line in the run's NetworkLog.

What an index hands over is not followed blindly (`follow_problem`): from an http(s) index
a link or a redirect leads only to http(s), and, off the index's own origin, only to
addresses the egress proxy's own check allows (`address_problem`: no loopback service, no
cloud metadata, no LAN), checked where the endpoint connects, the address it checked
dialled; `file:` only from a `file:` entry and only inside its directory (`file_root`).
urllib's redirect handler refuses other schemes for this reason (CVE-2011-1521); the loop
here follows redirects itself, so it checks each one. Each setup's fetches have a budget
of bytes, and the disk they take is the cap's and the spool's (sandbox/download_cache.py).

Written here rather than taken from PyPI: proxpi (Flask) reads its configuration from
the environment at import and has no `file://` upstream; devpi-server is a server with a
database of its own; pypiserver serves local directories only. And sandbox/ imports
the standard library alone.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import html
import http.client
import os
import re
import socket
import ssl
import threading
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from sandbox.download_cache import DownloadCache, FetchBudget, SpoolFull
from sandbox.egress import (
    ALLOW_SETTING,
    Network,
    NetworkLog,
    OutboundProxy,
    SocketService,
    address_problem,
    printable,
    redact,
)

PYPI_SIMPLE = "https://pypi.org/simple/"
INDEX_PORT = 3141  # inside the setup sandbox's own network namespace: nobody else's
SOCKET_NAME = "index.sock"
FETCH_TIMEOUT_SECONDS = 30.0
FETCH_TRIES = 2  # a second try for a dropped connection or a 5xx, then pip hears a 502
MAX_REDIRECTS = 5
PAGE_MAX_BYTES = 64 * 1024**2
MAX_LINKS = 200_000  # entries a setup's pages may add to the table (memory bound)
CHUNK_BYTES = 1 << 20
# The fetch budget when the sandbox names no disk quota: SandboxLimits.disk_bytes's default.
DEFAULT_BUDGET_BYTES = 16 * 1024**3
BUDGET_SETTING = "FROGNANO_SETUP_FETCH_MAX_GB"
HTML_ACCEPT = "application/vnd.pypi.simple.v1+html, text/html;q=0.9"
# What pip reads from an anchor besides its href (PEP 503, 592, 658, 714).
ANCHOR_ATTRIBUTES = ("data-requires-python", "data-yanked", "data-dist-info-metadata",
                     "data-core-metadata")
ARCHIVES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar")
CANONICAL = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
SHA256 = re.compile(r"sha256=([0-9a-fA-F]{64})")


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def as_url(entry: str) -> str:
    """A pip index or find-links entry as a URL (pip also takes plain paths)."""
    return Path(entry).resolve().as_uri() if entry.startswith("/") else entry


def without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True, repr=False)
class PackageSources:
    """Where the setup phase's pip finds packages, as the host reaches them."""

    index_url: str = PYPI_SIMPLE
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    cache_dir: Path | None = None  # the shared download cache; None: no cache
    # The venv cache (solver/setup/venv_cache.py) and the cap both caches share (0: none).
    venv_cache_dir: Path | None = None
    cache_max_bytes: int = 0
    # The bytes one setup may fetch through the endpoint; 0: the sandbox's disk quota.
    fetch_max_bytes: int = 0

    def urls(self) -> tuple[str, ...]:
        return (self.index_url or PYPI_SIMPLE, *self.extra_index_urls, *self.find_links)

    def __repr__(self) -> str:  # a URL may hold a token: never in a log line or a trace
        return redact(f"PackageSources({self.urls()!r}, cache_dir={self.cache_dir!r})")

    def hosts(self) -> tuple[str, ...]:
        """The hosts of the http(s) entries, for the egress proxy's list (PyPI's two
        when PyPI is among them: its files live on files.pythonhosted.org)."""
        hosts = [urlsplit(url).hostname or "" for url in self.urls()
                 if url.startswith(("http://", "https://"))]
        if "pypi.org" in hosts:
            hosts.append("files.pythonhosted.org")
        return tuple(dict.fromkeys(host for host in hosts if host))

    def sandbox_env(self, base: str) -> dict[str, str]:
        """pip's and uv's variables inside the sandbox: this endpoint's paths only. uv
        takes pip's view of several indexes (the best version among all of them, not the
        first index that has the project), and gives up on a failing one where pip goes
        on: the inferred setup's fallback is pip (solver/setup/installer.py)."""
        extra = " ".join(f"{base}/i/{k}/" for k in range(1, len(self.extra_index_urls) + 1))
        links = [f"{base}/l/{k}/" for k in range(len(self.find_links))]
        env = {"PIP_INDEX_URL": f"{base}/i/0/", "UV_DEFAULT_INDEX": f"{base}/i/0/",
               "UV_INDEX_STRATEGY": "unsafe-best-match",
               # The endpoint already tries each upstream fetch twice; at most 16
               # downloads at once, well within its MAX_CONNECTIONS.
               "UV_HTTP_RETRIES": "1", "UV_CONCURRENT_DOWNLOADS": "16"}
        if extra:
            env["PIP_EXTRA_INDEX_URL"] = env["UV_INDEX"] = extra
        if links:
            env["PIP_FIND_LINKS"] = " ".join(links)
            env["UV_FIND_LINKS"] = ",".join(links)
        return env


class UpstreamError(Exception):
    """What pip is told (`status`: 403, 404, or 502 with `reason`), credentials left out."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, redact(reason)


class AddressRefused(OSError):
    """A destination the egress proxy's address check refuses (raised where it connects)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # followed by hand: urllib would carry Authorization to any host


def file_root(entry: str) -> Path | None:
    """The directory a `file:` entry's links may lead into: the entry's own directory
    (a find-links HTML file: the one holding it), or the one above a PEP 503 `simple/`
    directory, where a mirror keeps its files (`../../files/…`, bandersnatch's
    `../../packages/…`); resolved. None for an entry that is not `file:`."""
    parts = urlsplit(entry)
    if parts.scheme != "file":
        return None
    path = Path(os.path.realpath(unquote(parts.path)))
    if not path.is_dir():
        return path.parent
    return path.parent if path.name == "simple" else path


def follow_problem(url: str, entry: str) -> str | None:
    """Why a link or redirect that the configured `entry`'s pages lead to may not be
    fetched, or None when it may (its addresses are checked when connecting)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return None
    if scheme != "file":
        return "only http(s) and file URLs are followed"
    try:
        local_target(url, entry)
    except UpstreamError as exc:
        return exc.reason
    return None


def refuse_unfollowable(url: str, entry: str) -> None:
    """UpstreamError (403) when `follow_problem` finds one, naming it."""
    why = follow_problem(url, entry)
    if why:
        raise UpstreamError(403, f"refused {printable(url)}: {why}")


def local_target(url: str, entry: str) -> Path:
    """The host file a `file:` URL that `entry`'s pages lead to names, resolved: only
    from a `file:` entry, only inside its `file_root`; UpstreamError otherwise."""
    root = file_root(entry)
    if root is None:
        raise UpstreamError(403, "a file: URL from an index that is not a file: directory")
    return local_file(url, root)


def local_file(url: str, root: Path) -> Path:
    """`url`'s path, resolved, when it lies inside `root` (no `..`, no link leading
    out); UpstreamError otherwise."""
    path = unquote(urlsplit(url).path)
    if ".." in path.split("/"):
        raise UpstreamError(403, f"{printable(path)}: a path with '..' in it")
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise UpstreamError(403, f"{printable(path)} lies outside {root}")
    return real


def _origin_of(url: str) -> tuple[str, str, int | None]:  # scheme, host, port
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        return "", "", None
    return scheme, (parts.hostname or "").lower(), port


# PyPI keeps its files on a second host of its own (as `PackageSources.hosts` says).
Origin = tuple[str, str, int | None]
PYPI_FILES_ORIGIN: Origin = ("https", "files.pythonhosted.org", 443)
COMPANION_ORIGINS: dict[Origin, Origin] = {("https", "pypi.org", 443): PYPI_FILES_ORIGIN}


def same_origin(url: str, entry: str) -> bool:
    """Whether `url` is on the http(s) `entry`'s own scheme, host and port (PyPI's
    files host counting as PyPI's)."""
    mine, theirs = _origin_of(entry), _origin_of(url)
    return mine[0] in ("http", "https") and theirs in (mine, COMPANION_ORIGINS.get(mine))


def checked_addresses(host: str, port: int, allow: tuple[Network, ...]
                      ) -> list[tuple[Any, ...]]:
    """`host`'s addresses (getaddrinfo's), every one allowed by the egress proxy's own
    check; AddressRefused naming the first that is not, and the setting that allows it."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for info in infos:
        address = str(info[4][0])
        why = address_problem(address, allow)
        if why:
            width = 128 if ":" in address else 32
            raise AddressRefused(f"{printable(host, 200)} resolves to {address}, {why} "
                                 f"({ALLOW_SETTING}={address}/{width} would allow it)")
    return infos


def _dial_checked(allow: tuple[Network, ...], address: tuple[str, int],
                  timeout: Any = None, source_address: Any = None) -> socket.socket:
    """http.client's `_create_connection`, checked: the address that passed is the one
    dialled (no second lookup: no DNS rebinding between the check and the connect)."""
    family, kind, proto, _, target = checked_addresses(*address, allow)[0]
    sock = socket.socket(family, kind, proto)
    try:
        if timeout is not None and timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
            sock.settimeout(timeout)
        sock.connect(target)
    except OSError:
        sock.close()
        raise
    return sock


class _CheckedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, *, allow: tuple[Network, ...], **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._create_connection = functools.partial(_dial_checked, allow)


class _CheckedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, *, allow: tuple[Network, ...], **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._create_connection = functools.partial(_dial_checked, allow)


class _CheckedHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """Direct connections that dial only addresses `checked_addresses` allows."""

    def __init__(self, context: ssl.SSLContext, allow: tuple[Network, ...]) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self, context=context)
        self.context, self.allow = context, allow

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_CheckedHTTP, allow=self.allow), req)  # type: ignore[arg-type]

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_CheckedHTTPS, allow=self.allow), req,  # type: ignore[arg-type]
                            context=self.context)


class Upstream:
    """The endpoint's fetches: credentials for their own origin only, the host's outbound
    proxy unless NO_PROXY names the host, redirects followed here, each hop checked
    (`follow_problem`; off the entry's own origin, `checked_addresses`)."""

    def __init__(self, urls: tuple[str, ...], proxy: OutboundProxy,
                 allow: tuple[Network, ...] = ()) -> None:
        self.proxy, self.allow = proxy, allow
        self.credentials: dict[tuple[str, str], str] = {}
        for url in urls:
            parts = urlsplit(url)
            if parts.username is not None:
                pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
                self.credentials[_origin(url)] = "Basic " + b64encode(pair.encode()).decode()
        context = ssl.create_default_context()
        self.direct = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _NoRedirect,
            urllib.request.HTTPSHandler(context=context))
        self.checked = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _NoRedirect, _CheckedHandler(context, allow))
        self.proxied = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": proxy.url, "https": proxy.url}),
            _NoRedirect, urllib.request.HTTPSHandler(context=context))

    def open(self, url: str, accept: str, entry: str) -> tuple[str, IO[bytes]]:
        """The final URL and its body, reached from the configured `entry` (a page of it,
        a link on one, and every redirect on the way checked); UpstreamError when it
        cannot or may not be had."""
        for _ in range(MAX_REDIRECTS + 1):
            refuse_unfollowable(url, entry)
            if urlsplit(url).scheme.lower() == "file":
                return url, _open_local(local_target(url, entry))
            location = self._get(url, accept, checked=not same_origin(url, entry))
            if isinstance(location, str):
                url = urljoin(url, location)
                continue
            return url, location
        raise UpstreamError(502, f"{url}: more than {MAX_REDIRECTS} redirects")

    def _opener(self, url: str, checked: bool) -> urllib.request.OpenerDirector:
        """Direct, checked where it connects, or through the host's outbound proxy
        (which resolves itself: the addresses this host sees are checked first)."""
        parts = urlsplit(url)
        if not self.proxy.for_host(parts.hostname or ""):
            return self.checked if checked else self.direct
        if checked:
            port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
            with contextlib.suppress(socket.gaierror):  # a name only the proxy resolves
                checked_addresses(parts.hostname or "", port, self.allow)
        return self.proxied

    def _get(self, url: str, accept: str, *, checked: bool) -> str | IO[bytes]:
        """The body, or where a redirect points."""
        request = urllib.request.Request(url, headers={"Accept": accept,
                                                       "User-Agent": "frognano-index"})
        if _origin(url) in self.credentials:
            request.add_header("Authorization", self.credentials[_origin(url)])
        for try_number in range(FETCH_TRIES):
            last = try_number == FETCH_TRIES - 1
            try:
                opener = self._opener(url, checked)
                return opener.open(request, timeout=FETCH_TIMEOUT_SECONDS)  # type: ignore[no-any-return]
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code in (301, 302, 303, 307, 308) and exc.headers.get("Location"):
                    return str(exc.headers["Location"])
                if exc.code in (404, 410):
                    raise UpstreamError(404, f"{url}: {exc.code}") from None
                if exc.code < 500 or last:
                    raise UpstreamError(502, f"{url} answered {exc.code} {exc.reason}") \
                        from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                why = getattr(exc, "reason", exc)
                if isinstance(why, AddressRefused):
                    raise UpstreamError(403, f"refused {printable(url)}: {why}") from None
                if last:
                    raise UpstreamError(502, f"cannot fetch {url}: {why}") from None
        raise AssertionError("unreachable")


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.rpartition("@")[2].lower()


def _open_local(target: Path) -> IO[bytes]:
    """A file, or a directory's index.html (as pip reads a file:// index); the last
    component never a link (`local_file` resolved the rest)."""
    if target.is_dir():
        target = target / "index.html"
    try:
        return os.fdopen(os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")
    except OSError as exc:
        raise UpstreamError(404, f"{target}: {exc.strerror}") from None


@dataclass(frozen=True)
class Link:
    url: str  # upstream, without credentials
    filename: str
    sha256: str  # from the link's #sha256=…, "" when it gives none
    metadata_sha256: str  # PEP 658's, likewise
    entry: str  # the configured index or find-links entry whose page gave it


class LinkTable:
    """The files pages served so far link to, by an id that names nothing upstream."""

    def __init__(self) -> None:
        self._links: dict[str, Link] = {}
        self._lock = threading.Lock()

    def add(self, link: Link) -> str | None:
        link_id = hashlib.sha256(link.url.encode()).hexdigest()[:32]
        with self._lock:
            if link_id not in self._links and len(self._links) >= MAX_LINKS:
                return None
            self._links[link_id] = link
        return link_id

    def get(self, link_id: str) -> Link | None:
        with self._lock:
            return self._links.get(link_id)


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.anchors: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "base" and values.get("href") and self.base is None:
            self.base = values["href"]
        elif tag == "a" and values.get("href"):
            self.anchors.append(values)


def _sha256(text: str) -> str:
    found = SHA256.search(text)
    return found.group(1).lower() if found else ""


def render_page(page_url: str, text: str, links: LinkTable, entry: str) -> bytes:
    """The page pip reads: the upstream page's file links, each pointing back here
    (fetched, when asked for, as a link of the configured `entry`)."""
    parser = _Anchors()
    parser.feed(text)
    base = urljoin(page_url, parser.base) if parser.base else page_url
    rows = []
    for anchor in parser.anchors:
        url, _, fragment = urljoin(base, anchor["href"]).partition("#")
        filename = unquote(urlsplit(url).path.rpartition("/")[2])
        if filename in ("", ".", ".."):
            continue
        metadata = anchor.get("data-core-metadata") or anchor.get("data-dist-info-metadata")
        link_id = links.add(Link(url, filename, _sha256(fragment), _sha256(metadata or ""),
                                 entry))
        if link_id is None:
            break
        href = f"/f/{link_id}/{quote(filename)}" + (f"#{fragment}" if fragment else "")
        extra = "".join(f' {name}="{html.escape(anchor[name])}"'
                        for name in ANCHOR_ATTRIBUTES if name in anchor)
        rows.append(f'<a href="{html.escape(href)}"{extra}>{html.escape(filename)}</a><br>')
    return ("<!DOCTYPE html><html><body>\n" + "\n".join(rows)
            + "\n</body></html>\n").encode()


def directory_page(directory: Path) -> str:
    """A find-links directory as a page of links to its archives."""
    names = sorted(entry.name for entry in os.scandir(directory)
                   if entry.is_file() and entry.name.endswith(ARCHIVES))
    return "".join(f'<a href="{quote(name)}">{html.escape(name)}</a>\n' for name in names)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: pip fetches many pages per connection
    timeout = 120  # an idle connection is closed
    server_version = "frognano-index"
    endpoint: IndexEndpoint

    def do_GET(self) -> None:  # http.server calls it by this name
        try:
            self.endpoint.respond(self)
        except UpstreamError as exc:
            if exc.status != 404:  # a project one of several indexes lacks is normal
                self.endpoint.log.add(f"package index: {exc.reason}")
            self.answer(exc.status, exc.reason.encode(), "text/plain", reason=exc.reason)
        except Exception as exc:  # a fault of ours must not leave pip hanging
            why = redact(f"{type(exc).__name__}: {exc}")
            self.endpoint.log.add(f"package index endpoint failed: {why}")
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.answer(502, why.encode(), "text/plain", reason="index endpoint failed")

    def do_HEAD(self) -> None:  # uv's probe before it reads a wheel's metadata by ranges
        """A file link's headers, no Accept-Ranges among them: uv then fetches the whole
        file by GET, as pip does (a 501 here failed its install). Nothing is fetched for a
        HEAD, and only a link a served page holds is a 200; no body either way."""
        self.send_response(200 if self.endpoint.knows_file(self.path) else 404)
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()

    def answer(self, status: int, body: bytes, content_type: str, *,
               reason: str | None = None) -> None:
        phrase = printable(reason, 200).encode("latin-1", "replace").decode("latin-1") \
            if reason else None
        self.send_response(status, phrase)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # failures go to the NetworkLog; every request would be noise


class IndexEndpoint(SocketService):
    """One endpoint per setup sandbox, over `sources`; `allow`: the networks the egress
    proxy allows besides public addresses (FROGNANO_SETUP_EGRESS_ALLOW); `quota_bytes`:
    the sandbox's disk quota, the fetch budget unless `sources` names one; `tcp` for the
    unsafe-local backend (which has the host's network: a unix socket would need no
    relay, but pip needs a URL)."""

    def __init__(self, sources: PackageSources, uid: int, gid: int, *,
                 proxy: OutboundProxy | None = None, network_log: NetworkLog | None = None,
                 allow: tuple[Network, ...] = (), quota_bytes: int = DEFAULT_BUDGET_BYTES,
                 tcp: bool = False) -> None:
        self.sources = sources
        self.log = network_log or NetworkLog()
        self.upstream = Upstream(sources.urls(), proxy or OutboundProxy(), allow)
        self.indexes = [without_userinfo(as_url(url)).rstrip("/") + "/"
                        for url in (sources.index_url or PYPI_SIMPLE,
                                    *sources.extra_index_urls)]
        self.find_links = [without_userinfo(as_url(url)) for url in sources.find_links]
        self.links = LinkTable()
        self.budget = FetchBudget(sources.fetch_max_bytes or quota_bytes)
        self.disk = DownloadCache(sources)
        try:
            super().__init__(uid, gid, "frognano-index-", SOCKET_NAME, tcp=tcp)
        except BaseException:
            self.disk.close()
            raise

    def close(self) -> None:
        super().close()
        self.disk.close()

    def serve(self, client: socket.socket) -> None:
        handler = type("Handler", (_Handler,), {"endpoint": self})
        handler(client, ("sandbox", 0), None)  # type: ignore[arg-type]

    def respond(self, handler: _Handler) -> None:
        kind, _, rest = urlsplit(handler.path).path.lstrip("/").partition("/")
        number, _, name = rest.partition("/")
        if kind == "i" and number.isdigit() and int(number) < len(self.indexes):
            body = self._project_page(self.indexes[int(number)], name.rstrip("/"))
            handler.answer(200, body, "text/html; charset=utf-8")
        elif kind == "l" and number.isdigit() and int(number) < len(self.find_links):
            body = self._links_page(self.find_links[int(number)])
            handler.answer(200, body, "text/html; charset=utf-8")
        elif kind == "f":
            self._send_file(handler, number, name)
        else:
            raise UpstreamError(404, "no such page")

    def knows_file(self, path: str) -> bool:
        """Whether `path` names a file (or its metadata) that a served page links to."""
        kind, _, rest = urlsplit(path).path.lstrip("/").partition("/")
        link_id, _, name = rest.partition("/")
        link = self.links.get(link_id) if kind == "f" else None
        return link is not None and unquote(name) in (link.filename,
                                                      link.filename + ".metadata")

    def _project_page(self, index: str, name: str) -> bytes:
        project = canonical_name(name)
        if not CANONICAL.fullmatch(project):  # one path segment, nothing else upstream
            raise UpstreamError(404, "not a project name")
        url, body = self.upstream.open(f"{index}{project}/", HTML_ACCEPT, index)
        with body:
            text = body.read(PAGE_MAX_BYTES).decode("utf-8", "replace")
        return render_page(url, text, self.links, index)

    def _links_page(self, url: str) -> bytes:
        parts = urlsplit(url)
        if parts.scheme == "file" and Path(unquote(parts.path)).is_dir():
            return render_page(url.rstrip("/") + "/",
                               directory_page(Path(unquote(parts.path))), self.links, url)
        final, body = self.upstream.open(url, HTML_ACCEPT, url)
        with body:
            text = body.read(PAGE_MAX_BYTES).decode("utf-8", "replace")
        return render_page(final, text, self.links, url)

    def _send_file(self, handler: _Handler, link_id: str, name: str) -> None:
        link = self.links.get(link_id)
        name = unquote(name)
        if link is None or name not in (link.filename, link.filename + ".metadata"):
            raise UpstreamError(404, "no such file")
        metadata = name != link.filename
        url = link.url + ".metadata" if metadata else link.url
        path, temporary = self._local_copy(url, link.metadata_sha256 if metadata
                                           else link.sha256, link.entry)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                handler.send_response(200)
                handler.send_header("Content-Type", "application/octet-stream")
                handler.send_header("Content-Length", str(size))
                handler.end_headers()
                handler.connection.sendfile(handle)
        finally:
            if temporary:
                self.disk.release(path)

    def _charge(self, size: int, url: str) -> None:
        """`size` more bytes fetched by this setup; UpstreamError naming the budget
        when they do not fit in it."""
        if not self.budget.charge(size):
            name = printable(unquote(urlsplit(url).path.rpartition("/")[2]), 200)
            raise UpstreamError(403, f"refused {name}: past this setup's budget of "
                                     f"{self.budget.limit / 1024**2:.0f} MiB fetched "
                                     f"through the package index ({BUDGET_SETTING} sets "
                                     "it; the sandbox's disk quota by default)")

    def _local_copy(self, url: str, sha256: str, entry: str) -> tuple[Path, bool]:
        """A host file holding `url`'s bytes, and whether it is the spool's, to release
        after. From the cache when it holds the hash; else fetched (and cached when
        hashed and the cap leaves room). Its bytes charged to the budget."""
        cached = self.disk.hit(sha256)
        if cached is not None:
            self._charge(cached.stat().st_size, url)
            return cached, False
        if urlsplit(url).scheme.lower() == "file" and not sha256:
            refuse_unfollowable(url, entry)  # nothing to check, nothing to keep
            path = local_target(url, entry)
            self._charge(path.stat().st_size, url)
            return path, False
        return self._download(url, sha256, entry)

    def _download(self, url: str, sha256: str, entry: str) -> tuple[Path, bool]:
        """Into the spool, charged as it comes and checked against its sha256; then into
        the cache when the cap leaves room."""
        try:
            part = self.disk.spool_file()
        except SpoolFull as exc:
            raise UpstreamError(503, str(exc)) from None
        try:
            _, body = self.upstream.open(url, "*/*", entry)
            digest = hashlib.sha256()
            with body, open(part, "wb") as out:
                while chunk := body.read(CHUNK_BYTES):
                    self._charge(len(chunk), url)
                    digest.update(chunk)
                    out.write(chunk)
            if sha256 and digest.hexdigest() != sha256:
                raise UpstreamError(502, f"{url} does not match the sha256 its index "
                                         "gives")
            stored = self.disk.store(part, sha256) if sha256 else None
        except BaseException:
            self.disk.release(part)
            raise
        return (stored, False) if stored is not None else (part, True)
