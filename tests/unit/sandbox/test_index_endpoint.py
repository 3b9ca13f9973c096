"""The host-side package index endpoint (sandbox/index_endpoint.py) against a real private
index (HTTP with basic auth on 127.0.0.1, tests/support/private_index.py), over real HTTP: pages
rebuilt with links back to it, credentials only to their own origin, the shared download
cache keyed by the verified sha256, and a failing index answered 502 without its token."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sandbox.egress import NetworkLog, OutboundProxy
from sandbox.index_endpoint import (
    AddressRefused,
    IndexEndpoint,
    PackageSources,
    checked_addresses,
    file_root,
    follow_problem,
    redact,
    same_origin,
)
from tests.support.private_index import make_wheel, private_index

TOKEN = "tok-3f1a9c"  # what must never leave the host


# The operator's FROGNANO_SETUP_EGRESS_ALLOW for loopback: here another origin on 127.0.0.1
# stands for another public host (a link off the index's origin is address-checked).
LOOPBACK = (ipaddress.ip_network("127.0.0.1/32"),)


@contextmanager
def endpoint(sources: PackageSources, **options: Any) -> Iterator[tuple[str, NetworkLog]]:
    log = NetworkLog()
    service = IndexEndpoint(sources, os.getuid(), os.getgid(), network_log=log, tcp=True,
                            **options)
    try:
        yield f"http://127.0.0.1:{service.port}", log
    finally:
        service.close()


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read(), answer.reason
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.reason


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return make_wheel(tmp_path, "corp-helper", "1.0", "VALUE = 42\n")


def test_pages_and_files_come_through_with_the_credentials_on_the_host(
        wheel: Path, tmp_path: Path) -> None:
    with private_index(TOKEN, [wheel]) as index, \
            endpoint(PackageSources(index.url, cache_dir=tmp_path / "cache")) as (base, _):
        status, page, _ = get(f"{base}/i/0/Corp_Helper/")
        href = re.search(rb'href="([^"]+)"', page).group(1).decode()  # type: ignore[union-attr]
        status_file, body, _ = get(base + href.split("#")[0])
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert status == 200 and TOKEN.encode() not in page and b"127.0.0.1:" not in page
    assert href.startswith("/f/") and href.endswith(f"corp_helper-1.0-py3-none-any.whl"
                                                    f"#sha256={digest}")
    assert status_file == 200 and body == wheel.read_bytes()
    assert [r["path"] for r in index.requests] == ["/simple/corp-helper/",
                                                   f"/files/{wheel.name}"]
    assert all(r["authorized"] and r["agent"] == "frognano-index" for r in index.requests)
    assert (tmp_path / "cache" / "sha256" / digest).read_bytes() == wheel.read_bytes()


def test_a_second_run_is_served_from_the_cache(wheel: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with private_index(TOKEN, [wheel]) as index:
        with endpoint(PackageSources(index.url, cache_dir=cache)) as (base, _):
            page = get(f"{base}/i/0/corp-helper/")[1]
            href = re.search(rb'href="([^"#]+)', page).group(1).decode()  # type: ignore[union-attr]
            get(base + href)
        with endpoint(PackageSources(index.url, cache_dir=cache)) as (base, _):
            page = get(f"{base}/i/0/corp-helper/")[1]
            href = re.search(rb'href="([^"#]+)', page).group(1).decode()  # type: ignore[union-attr]
            status, body, _ = get(base + href)
    assert status == 200 and body == wheel.read_bytes()
    files = [r for r in index.requests if r["path"].startswith("/files/")]
    assert len(files) == 1, index.requests  # the second run's file came from the cache


def test_a_file_that_does_not_match_its_hash_is_not_served_nor_cached(
        wheel: Path, tmp_path: Path) -> None:
    listed = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with private_index(TOKEN, [wheel]) as index, \
            endpoint(PackageSources(index.url, cache_dir=tmp_path / "cache")) as (base, log):
        page = get(f"{base}/i/0/corp-helper/")[1]
        wheel.write_bytes(wheel.read_bytes() + b"tampered")  # after the page listed it
        href = re.search(rb'href="([^"#]+)', page).group(1).decode()  # type: ignore[union-attr]
        status, _body, reason = get(base + href)
    assert status == 502 and "does not match the sha256" in reason
    assert not (tmp_path / "cache" / "sha256" / listed).exists()
    # No partial file left, in the cache or in the endpoint's spool.
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    assert "does not match" in log.lines()[0] and TOKEN not in log.lines()[0]
    assert index.requests[-1]["authorized"]


def test_a_failing_index_is_a_502_with_a_reason_and_no_token(wheel: Path) -> None:
    with private_index("the-right-one", [wheel]) as index:
        wrong = index.url.replace("the-right-one", TOKEN)
        with endpoint(PackageSources(wrong)) as (base, log):
            status, body, reason = get(f"{base}/i/0/corp-helper/")
    assert status == 502
    shown = f"http://127.0.0.1:{index.port}/simple/corp-helper/ answered 401 Unauthorized"
    assert reason == shown and TOKEN.encode() not in body
    assert log.lines() == (f"package index: {shown}",)


def test_an_unreachable_index_is_a_502_naming_it() -> None:
    url = f"https://ci:{TOKEN}@pypi.corp.invalid/simple/"
    with endpoint(PackageSources(url)) as (base, log):
        status, _, reason = get(f"{base}/i/0/requests/")
    assert status == 502 and reason.startswith(
        "cannot fetch https://pypi.corp.invalid/simple/requests/: "), reason
    assert TOKEN not in "".join(log.lines())


def test_the_sandbox_cannot_choose_what_the_endpoint_fetches(wheel: Path) -> None:
    with private_index(TOKEN, [wheel]) as index, endpoint(PackageSources(index.url)) as \
            (base, _):
        answers = [get(base + path)[0] for path in (
            "/i/0/../files/x/", "/i/0/%2e%2e/", "/i/0/a%2fb/", "/i/1/corp-helper/",
            "/f/0123456789abcdef0123456789abcdef/x.whl", f"/x/{index.url}",
            "/i/0/no-such-project/")]
    assert answers == [404] * 7
    assert all(r["path"].startswith("/simple/") for r in index.requests), index.requests


def test_credentials_go_to_their_own_origin_only(wheel: Path, tmp_path: Path) -> None:
    """The index links a file on another host (as PyPI links files.pythonhosted.org):
    that host gets the request, not the index's token."""
    other_wheel = make_wheel(tmp_path, "elsewhere", "2.0", "")
    with private_index("other-token", [other_wheel]) as other:
        page = tmp_path / "simple" / "elsewhere"
        page.mkdir(parents=True)
        location = f"http://127.0.0.1:{other.port}/files/{other_wheel.name}"
        (page / "index.html").write_text(f'<a href="{location}">{other_wheel.name}</a>')
        with private_index(TOKEN, []) as index:
            sources = PackageSources(index.url, (f"file://{tmp_path}/simple",))
            with endpoint(sources, allow=LOOPBACK) as (base, _):
                listed = get(f"{base}/i/1/elsewhere/")[1]
                href = re.search(rb'href="([^"#]+)', listed).group(1).decode()  # type: ignore[union-attr]
                status = get(base + href)[0]
    assert status == 502  # the other host wants its own token, which nobody sent
    assert other.requests == [{"path": f"/files/{other_wheel.name}", "authorized": False,
                               "agent": "frognano-index", "sent": None}]


def head(url: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_uvs_head_probe_gets_headers_and_no_range_and_fetches_nothing(wheel: Path) -> None:
    """uv asks for a wheel's headers before reading its metadata by ranges (a 501 failed
    its install): a file a served page links to gets a 200 without Accept-Ranges, so uv
    fetches it whole by GET, as pip does; nothing is read or charged to the setup's
    budget for a HEAD; any other path is a 404."""
    sources = PackageSources("http://127.0.0.1:9/unused/", find_links=(str(wheel.parent),))
    with endpoint(sources, quota_bytes=wheel.stat().st_size) as (base, log):
        page = get(f"{base}/l/0/")[1]
        href = re.search(rb'href="([^"#]+)', page).group(1).decode()  # type: ignore[union-attr]
        found = [head(base + href), head(base + href + ".metadata")]
        unknown = [head(f"{base}/f/{'0' * 32}/{wheel.name}"), head(f"{base}/i/0/x/"),
                   head(base + href.replace(wheel.name, "other-1.0-py3-none-any.whl"))]
        # The budget is the wheel's size: a HEAD that charged it would leave no room.
        status, body, _ = get(base + href)
    for status_head, headers, content in found:
        assert status_head == 200 and content == b"", headers
        assert "Accept-Ranges" not in headers
    assert [status_head for status_head, _, _ in unknown] == [404, 404, 404]
    assert status == 200 and body == wheel.read_bytes()
    assert log.lines() == ()


def test_find_links_directories_are_listed(tmp_path: Path, wheel: Path) -> None:
    with endpoint(PackageSources(find_links=(str(tmp_path),))) as (base, _):
        page = get(f"{base}/l/0/")[1]
        href = re.search(rb'href="([^"#]+)', page).group(1).decode()  # type: ignore[union-attr]
        body = get(base + href)[1]
    assert body == wheel.read_bytes()


def test_sandbox_variables_name_the_endpoint_only() -> None:
    sources = PackageSources(f"https://ci:{TOKEN}@pypi.corp/simple",
                             ("file:///opt/pypi/simple", "https://x.example/simple"),
                             ("/opt/wheels",))
    assert sources.sandbox_env("http://127.0.0.1:3141") == {
        "PIP_INDEX_URL": "http://127.0.0.1:3141/i/0/",
        "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:3141/i/1/ http://127.0.0.1:3141/i/2/",
        "PIP_FIND_LINKS": "http://127.0.0.1:3141/l/0/",
        # uv (the inferred setup's installer) the same paths, and pip's view of them.
        "UV_DEFAULT_INDEX": "http://127.0.0.1:3141/i/0/",
        "UV_INDEX": "http://127.0.0.1:3141/i/1/ http://127.0.0.1:3141/i/2/",
        "UV_FIND_LINKS": "http://127.0.0.1:3141/l/0/", "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_HTTP_RETRIES": "1", "UV_CONCURRENT_DOWNLOADS": "16"}
    assert sources.hosts() == ("pypi.corp", "x.example")
    assert PackageSources().hosts() == ("pypi.org", "files.pythonhosted.org")
    assert redact(f"see https://ci:{TOKEN}@pypi.corp/simple and http://a@b/") == \
        "see https://***@pypi.corp/simple and http://***@b/"


# -- what an index's links and redirects may lead to (issue 30 §1) ------------------------
def test_an_http_index_leads_to_http_only() -> None:
    index = "https://pypi.corp/simple/"
    assert follow_problem("https://files.example/x.whl", index) is None
    assert follow_problem("http://files.example/x.whl", index) is None
    assert follow_problem("file:///etc/frognano/github-app.pem", index) == \
        "a file: URL from an index that is not a file: directory"
    for url in ("ftp://x/y.whl", "gopher://127.0.0.1:6379/_INFO", "data:,hi", "jar:x"):
        assert follow_problem(url, index) == "only http(s) and file URLs are followed", url


def test_a_file_index_leads_only_inside_its_own_folder(tmp_path: Path) -> None:
    """The folder above `simple/` is the index's (mirrors link `../../files/…`); nothing
    outside it, by `..` or by a link, is followed."""
    (tmp_path / "mirror" / "simple" / "p").mkdir(parents=True)
    (tmp_path / "mirror" / "files").mkdir()
    (tmp_path / "mirror" / "files" / "p-1.0.tar.gz").write_text("sdist")
    (tmp_path / "secret.pem").write_text("key")
    (tmp_path / "mirror" / "files" / "q-1.0.tar.gz").symlink_to(tmp_path / "secret.pem")
    index = f"file://{tmp_path}/mirror/simple/"
    assert file_root(index) == (tmp_path / "mirror").resolve()
    assert follow_problem(f"file://{tmp_path}/mirror/files/p-1.0.tar.gz", index) is None
    assert "lies outside" in str(follow_problem(f"file://{tmp_path}/secret.pem", index))
    assert "lies outside" in str(follow_problem(
        f"file://{tmp_path}/mirror/files/q-1.0.tar.gz", index)), "a link leading out"
    assert "'..'" in str(follow_problem(
        f"file://{tmp_path}/mirror/files/%2e%2e/%2e%2e/secret.pem", index))
    assert file_root(f"file://{tmp_path}/mirror/files") == (tmp_path / "mirror" / "files"
                                                            ).resolve()  # find-links
    assert file_root("https://pypi.org/simple/") is None


def test_the_index_origin_is_its_scheme_host_and_port() -> None:
    index = "http://ci:tok@127.0.0.1:8080/simple/"
    assert same_origin("http://127.0.0.1:8080/files/x.whl", index)
    assert not same_origin("http://127.0.0.1:6379/", index)
    assert not same_origin("https://127.0.0.1:8080/files/x.whl", index)
    assert same_origin("https://pypi.org:443/x", "https://pypi.org/simple/")
    assert same_origin("https://files.pythonhosted.org/packages/x.whl",
                       "https://pypi.org/simple/"), "PyPI's own files host"
    assert not same_origin("https://files.pythonhosted.org/x.whl", "https://corp/simple/")
    assert not same_origin("http://127.0.0.1:8080/x", f"file://{index}")


def test_addresses_off_the_index_origin_pass_the_egress_proxys_check() -> None:
    """Literals, so no DNS: what the proxy refuses, the endpoint refuses, with the
    setting that would allow it."""
    assert checked_addresses("1.1.1.1", 443, ())
    for host in ("127.0.0.1", "169.254.169.254", "10.0.0.5", "::1", "::ffff:127.0.0.1"):
        with pytest.raises(AddressRefused, match="FROGNANO_SETUP_EGRESS_ALLOW="):
            checked_addresses(host, 80, ())
    assert checked_addresses("10.0.0.5", 80, (ipaddress.ip_network("10.0.0.0/8"),))


@contextmanager
def hostile_index(pages: dict[str, str], redirects: dict[str, str]) -> Iterator[str]:
    with private_index(TOKEN, [], pages=pages, redirects=redirects) as index:
        yield index.url


def test_redirects_and_links_to_loopback_and_files_are_refused_and_logged(
        tmp_path: Path) -> None:
    """Over real HTTP: the index's own origin serves, a redirect off it to another
    loopback port, to a file or to a scheme urllib would open (data:), or a link to one,
    is refused (403) and logged; the loopback server is never reached."""
    key = tmp_path / "app.pem"
    key.write_text("APP KEY")
    with private_index("other", []) as other:
        other_url = f"http://127.0.0.1:{other.port}/files/p.whl"
        page = (f'<a href="file://{key}">app.pem</a><a href="/go/file">f.whl</a>'
                f'<a href="/go/other">o.whl</a><a href="{other_url}">p.whl</a>'
                '<a href="/go/data">d.whl</a>')
        with hostile_index({"evil": page}, {"/go/file": f"file://{key}",
                                            "/go/other": other_url,
                                            "/go/data": "data:;base64,TEVBS0VE"}) as url, \
                endpoint(PackageSources(url)) as (base, log):
            listed = get(f"{base}/i/0/evil/")[1].decode()
            answers = [get(base + href) for href in re.findall(r'href="([^"#]+)', listed)]
    assert [status for status, _, _ in answers] == [403] * 5, answers
    assert all(b"APP KEY" not in body and b"LEAKED" not in body for _, body, _ in answers)
    assert other.requests == [], "a loopback service off the index's origin"
    assert any("127.0.0.1 resolves to 127.0.0.1, not a public address" in line
               for line in log.lines()), log.lines()
    assert any("not a file: directory" in line for line in log.lines()), log.lines()


def test_through_the_hosts_proxy_the_addresses_are_checked_first(tmp_path: Path) -> None:
    """HTTPS_PROXY resolves names itself; what this host resolves is checked before the
    proxy is asked (the proxy here answers nothing: asking it would be a 502)."""
    page = tmp_path / "simple" / "evil"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        '<a href="http://169.254.169.254/latest/meta-data/x.whl">x.whl</a>')
    with endpoint(PackageSources(f"file://{tmp_path}/simple/"),
                  proxy=OutboundProxy("http://127.0.0.1:9")) as (base, _):
        listed = get(f"{base}/i/0/evil/")[1].decode()
        href = re.findall(r'href="([^"#]+)', listed)[0]
        status, _, reason = get(base + href)
    assert status == 403 and "169.254.169.254 resolves to 169.254.169.254" in reason, reason
