"""The setup phase's egress rules (sandbox/egress.py): which hosts a CONNECT may name, which
addresses it may reach, the host's outbound proxy, and what a refusal leaves behind.
The proxy itself is driven over its real unix socket; the host's-own-address rule runs in
a network namespace of its own where a public address is put on lo."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sandbox.egress import (
    MAX_LOG_LINES,
    EgressPolicy,
    EgressProxy,
    NetworkLog,
    OutboundProxy,
    address_problem,
    bypasses,
    describe_refusals,
    host_allowed,
    index_targets,
    join_target,
    split_target,
)
from tests.support.paths import REPO_ROOT

REPO = str(REPO_ROOT)


@pytest.mark.parametrize("address", [
    "64:ff9b::808:808", "64:ff9b:1::a00:1", "2002:808:808::1", "2001:0:4136:e378::1",
    "::ffff:8.8.8.8", "::ffff:0:808:808", "::8.8.8.8", "::ffff:127.0.0.1"])
def test_ipv6_forms_of_ipv4_are_refused_whatever_they_embed(address: str) -> None:
    # 8.8.8.8 itself would pass: a translator in front of it could lead anywhere.
    assert address_problem(address) is not None
    assert "IPv4" in str(address_problem(address))


@pytest.mark.parametrize("address, why", [
    ("8.8.8.8", None), ("2606:4700:4700::1111", None),
    ("10.1.2.3", "not a public address"), ("169.254.169.254", "not a public address"),
    ("100.64.0.1", "not a public address"), ("224.0.0.1", "not a public address"),
    ("127.0.0.1", "not a public address"), ("127.9.9.9", "not a public address"),
    ("0.0.0.0", "an address of this host"), ("::", "an IPv6 form of an IPv4 address "
                                                   "(NAT64, 6to4, Teredo, mapped)"),
    ("::1", "an IPv6 form of an IPv4 address (NAT64, 6to4, Teredo, mapped)")])
def test_addresses(address: str, why: str | None) -> None:
    assert address_problem(address) == why


def test_an_allowed_network_is_the_operators_word() -> None:
    allow = EgressPolicy.build([], ["10.0.0.0/8", "127.0.0.2/32"]).allow
    assert address_problem("10.1.2.3", allow) is None
    assert address_problem("127.0.0.2", allow) is None
    assert address_problem("127.0.0.1", allow) == "not a public address"


OWN_ADDRESS_PROBE = """
import json, sys
sys.path.insert(0, {repo!r})
from sandbox.egress import address_problem
print(json.dumps([address_problem("8.8.8.8"), address_problem("8.8.4.4")]))
"""


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs unshare and ip")
def test_the_hosts_own_public_address_is_refused() -> None:
    """A host whose interface holds a public address (8.8.8.8 here, in a network
    namespace of the test's own): that address passes is_global, but it reaches every
    service the host binds to 0.0.0.0."""
    script = OWN_ADDRESS_PROBE.format(repo=REPO)
    done = subprocess.run(
        ["unshare", "--net", "--map-root-user", "sh", "-c",
         'ip link set lo up && ip addr add 8.8.8.8/32 dev lo && exec "$0" -c "$1"',
         sys.executable, script], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no network namespace here: {done.stderr.strip()}")
    assert done.stdout.strip() == '["an address of this host", null]', done


@pytest.mark.parametrize("host, allowed", [
    ("pypi.org", True), ("PyPI.org.", True), ("files.pythonhosted.org", True),
    ("pypi.org.evil.example", False), ("evilpypi.org", False), ("example.com", False),
    ("mirror.corp.example", True), ("corp.example", False), ("a.b.corp.example", True),
    ("10.0.0.5", True), ("[::ffff:a00:5]", False), ("10.0.0.6", False)])
def test_host_list(host: str, allowed: bool) -> None:
    hosts = ["pypi.org", "files.pythonhosted.org", ".corp.example", "10.0.0.5"]
    assert host_allowed(host, hosts) is allowed


def test_no_proxy_rules() -> None:
    rules = ["localhost", ".corp.example", "10.0.0.0/8", ""]
    assert bypasses("localhost", rules) and bypasses("pypi.corp.example", rules)
    assert bypasses("corp.example", rules) and bypasses("10.2.3.4", rules)
    assert not bypasses("pypi.org", rules) and not bypasses("11.0.0.1", rules)
    assert bypasses("anything", ["*"])
    assert OutboundProxy("http://proxy:3128", ("pypi.org",)).for_host("pypi.org") == ""
    assert OutboundProxy("http://proxy:3128").for_host("pypi.org") == "http://proxy:3128"


def test_network_log_is_bounded_and_printable() -> None:
    log = NetworkLog()
    for n in range(MAX_LOG_LINES + 10):
        log.add(f"refused CONNECT host{n}:443\x1b[2K")
        log.add(f"refused CONNECT host{n}:443\x1b[2K")  # the same line once
    lines = log.lines()
    assert len(lines) == MAX_LOG_LINES + 1 and lines[-1] == "... and 10 more"
    assert "\x1b" not in "".join(lines)
    assert describe_refusals(()) == ""
    assert describe_refusals(["a", "b"]) == "; the setup's network: a; b"


def _connect(proxy: EgressProxy, target: str, payload: bytes = b"") -> bytes:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(proxy.path))
        client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = client.recv(4096)
        if payload and answer.startswith(b"HTTP/1.1 200"):
            client.sendall(payload)
            answer += client.recv(4096)
        return answer


def test_a_host_not_on_the_list_is_refused_and_named() -> None:
    log = NetworkLog()
    proxy = EgressProxy(os.getuid(), os.getgid(), EgressPolicy.build(["pypi.org"]), log)
    try:
        answer = _connect(proxy, "exfil.example:443")
    finally:
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 403"), answer
    assert b"FROGNANO_SETUP_EGRESS_HOSTS=exfil.example" in answer
    assert log.lines() == ("refused CONNECT exfil.example:443: not a package index host "
                           "(FROGNANO_SETUP_EGRESS_HOSTS=exfil.example would allow it)",)
    assert proxy.refused == ["exfil.example:443 (not a package index host)"]


def test_an_allowed_name_on_a_loopback_address_is_refused() -> None:
    log = NetworkLog()
    proxy = EgressProxy(os.getuid(), os.getgid(), EgressPolicy.build(["localhost:6379"]),
                        log)
    try:
        answer = _connect(proxy, "localhost:6379")
    finally:
        proxy.close()
    assert answer.startswith(b"HTTP/1.1 403"), answer
    assert "resolves to 127.0.0.1, not a public address" in log.lines()[0]
    assert "FROGNANO_SETUP_EGRESS_ALLOW=" in log.lines()[0]
    assert "on the listed port 6379 only" in log.lines()[0]


@pytest.mark.parametrize("entry, target", [
    ("pypi.org", ("pypi.org", 443)), ("Mirror.Corp:8443", ("mirror.corp", 8443)),
    (".corp.example:3141", (".corp.example", 3141)), ("10.0.0.5", ("10.0.0.5", 443)),
    ("[2001:db8::1]:8080", ("2001:db8::1", 8080)), ("2001:db8::1", ("2001:db8::1", 443)),
    ("[2001:db8::1]", ("2001:db8::1", 443))])
def test_an_entry_names_a_port_or_means_443(entry: str, target: tuple[str, int]) -> None:
    assert split_target(entry) == target


@pytest.mark.parametrize("entry", ["host:0", "host:65536", "host:https", "[::1]:x"])
def test_an_entry_whose_port_is_none_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="FROGNANO_SETUP_EGRESS_HOSTS"):
        EgressPolicy.build([entry])


def test_each_index_url_allows_its_own_port() -> None:
    assert index_targets([
        "http://10.77.0.1:3141/root/pypi/+simple/", "https://user:tok@pypi.org/simple/",
        "http://mirror.corp/simple/", "https://[2001:db8::2]/simple/",
        "file:///srv/wheels", "https://bad.port:99999/simple/"]) == (
        "10.77.0.1:3141", "pypi.org:443", "files.pythonhosted.org:443", "mirror.corp:80",
        "[2001:db8::2]:443")
    policy = EgressPolicy.build([*index_targets(["http://10.77.0.1:3141/simple/"]),
                                 "extra.corp", "[2001:db8::3]:8443"])
    assert policy.hosts_on(3141) == ("10.77.0.1",)
    assert policy.hosts_on(443) == ("extra.corp",)
    assert policy.hosts_on(8443) == ("2001:db8::3",)
    assert policy.hosts_on(6379) == ()
    assert [join_target(h, p) for h, p in policy.targets] == [
        "10.77.0.1:3141", "extra.corp", "[2001:db8::3]:8443"]


def test_another_port_of_an_allowed_host_is_refused_and_named() -> None:
    """An index on 127.0.0.1 (its address allowed, as the refusal line suggests): the
    index's own port is reached, every other service of that box is not."""
    listening = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    index_port, other_port = (server.getsockname()[1] for server in listening)
    log = NetworkLog()
    proxy = EgressProxy(os.getuid(), os.getgid(), EgressPolicy.build(
        index_targets([f"http://127.0.0.1:{index_port}/simple/"]), ["127.0.0.1/32"]), log)
    try:
        reached = _connect(proxy, f"127.0.0.1:{index_port}")
        refused = _connect(proxy, f"127.0.0.1:{other_port}")
    finally:
        proxy.close()
        for server in listening:
            server.close()
    assert reached.startswith(b"HTTP/1.1 200"), reached
    assert refused.startswith(b"HTTP/1.1 403"), refused
    assert log.lines() == (f"refused CONNECT 127.0.0.1:{other_port}: not a package index "
                           f"port (FROGNANO_SETUP_EGRESS_HOSTS=127.0.0.1:{other_port} would "
                           "allow it)",)


@contextmanager
def fake_outbound_proxy() -> Iterator[tuple[int, list[bytes]]]:
    """An HTTP proxy that answers any CONNECT with 200 and then echoes what it gets."""
    server = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(1)
                heads.append(head)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                conn.sendall(b"echo:" + conn.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1], heads
    finally:
        server.close()


def test_connect_chains_through_the_hosts_outbound_proxy() -> None:
    """Behind a company proxy the index's name may not even resolve here: the CONNECT
    goes to the proxy, with the proxy's credentials added on the host."""
    with fake_outbound_proxy() as (port, heads):
        upstream = OutboundProxy(f"http://me:s%40cret@127.0.0.1:{port}")
        proxy = EgressProxy(os.getuid(), os.getgid(),
                            EgressPolicy.build(["pypi.corp.invalid"], proxy=upstream))
        try:
            answer = _connect(proxy, "pypi.corp.invalid:443", b"hello")
            refused = _connect(proxy, "elsewhere.invalid:443")
        finally:
            proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"echo:hello"), answer
    assert refused.startswith(b"HTTP/1.1 403"), refused
    assert len(heads) == 1, heads  # the refused one never reached the outbound proxy
    auth = base64.b64encode(b"me:s@cret").decode()
    assert heads[0].startswith(b"CONNECT pypi.corp.invalid:443 HTTP/1.1\r\n"), heads
    assert f"Proxy-Authorization: Basic {auth}".encode() in heads[0]
