"""Hostile issue, red team (issue 9): what a shell in the sandbox could still reach of the
host after the sealing. Each attack runs in a real bubblewrap sandbox with the
attacker's own moves, the worker as root and as a non-root user (tests/support/sandbox_attack.py):
the worker's kernel keyring, the host's services during the setup phase (a real
redis-server on 127.0.0.1, an abstract unix socket, the cloud metadata address) and hard
links to host files that a root worker's chown would then hand over."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.conftest import Recorder
from tests.support.redis_server import start_redis
from tests.support.sandbox_attack import WORKERS, run_steps, worker_home
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(os.geteuid() != 0, reason="runs workers as root and not")]

READ_KEY = ("python3 - <<'PY'\nimport ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "buf = ctypes.create_string_buffer(4096)\n"
            "for ring in ({ids}):\n"
            "    n = libc.syscall(250, 11, ring, buf, 4096)  # KEYCTL_READ\n"
            "    print('key', ring, n, ctypes.get_errno(), buf.raw[:max(n, 0)])\n"
            "for ring in (-3, -4, -5):  # the session, user and user-session keyrings\n"
            "    n = libc.syscall(250, 11, ring, buf, 4096)\n"
            "    print('ring', ring, n, ctypes.get_errno())\nPY")


@pytest.mark.parametrize("worker", WORKERS)
def test_the_kernel_keyring_is_closed(worker: str, scorecard: Recorder) -> None:
    record = scorecard(f"6j-sandbox-keyring-{worker}",
                       f"Hostile issue: read the worker's kernel keyring ({worker} worker)",
                       "keys the worker holds in its session and user keyrings are never "
                       "readable from a tool call or the setup phase (keyctl, add_key "
                       "and request_key are refused by a seccomp filter)")
    secret = f"KEYRING-SECRET-{uuid.uuid4().hex}"
    with worker_home(worker) as (root, uid):
        outcome = run_steps(worker, root, uid, [
            ("addkey", f"session:{secret}"), ("addkey", f"user:{secret}"),
            ("Bash", "true")])
        ids = ", ".join(a for a in outcome.answers[:2] if a.lstrip("-").isdigit())
        outcome = run_steps(worker, root, uid, [
            ("addkey", f"session:{secret}"), ("Bash", READ_KEY.format(ids=ids + ", ")),
            ("setup", READ_KEY.format(ids=ids + ", "))])
    tool, setup = outcome.answers[1], outcome.answers[2]
    record.observed = {"keys added by the worker": ids, "read in a tool call":
                       secret in tool, "read in the setup phase": secret in setup,
                       "keyctl errno (1 = EPERM)": tool.split("ring -3 -1 ")[-1][:1]}
    assert int(outcome.answers[0]) > 0, outcome.answers  # the worker really holds one
    assert secret not in tool and secret not in setup, (tool, setup)
    assert "ring -3 -1 1" in tool and "ring -4 -1 1" in tool, tool


@pytest.fixture
def host_abstract_socket() -> Iterator[tuple[str, list[str]]]:
    """An abstract unix socket in the host's network namespace, as D-Bus, X11 or
    containerd keep them; it records who got through."""
    name = f"frognano-host-{uuid.uuid4().hex[:12]}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(4)
    hits: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            hits.append("connected")
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield name, hits
    finally:
        server.close()


REDIS_DIRECT = ("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}),"
                " timeout=3); s.sendall(b'SET pwned-direct 1\\r\\n'); print(s.recv(64))\"")
VIA_PROXY = ("python3 -c \"import socket, os; s = socket.create_connection(('127.0.0.1', 3128),"
             " timeout=5); s.sendall(b'CONNECT {target} HTTP/1.1\\r\\n\\r\\n'); "
             "head = s.recv(300); print(head.splitlines()[0]); "
             "s.sendall(b'SET pwned-proxy 1\\r\\n'); print(s.recv(64))\"")
ABSTRACT = ("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
            "s.connect('\\0{name}'); print('reached the host socket')\"")


@pytest.mark.parametrize("worker", WORKERS)
def test_setup_phase_cannot_reach_host_services(
        worker: str, host_abstract_socket: tuple[str, list[str]],
        scorecard: Recorder) -> None:
    record = scorecard(f"6k-setup-network-{worker}",
                       f"Hostile issue: the setup phase talks to the host ({worker} worker)",
                       "a hostile setup.py (network on) cannot write to the host's Redis "
                       "on 127.0.0.1, directly or through the egress proxy, nor reach a "
                       "host abstract unix socket or the cloud metadata address")
    name, hits = host_abstract_socket
    redis_server = start_redis()
    try:
        port = redis_server.port
        with worker_home(worker) as (root, uid):
            outcome = run_steps(worker, root, uid, [
                ("setup", REDIS_DIRECT.format(port=port)),
                ("setup", VIA_PROXY.format(target=f"127.0.0.1:{port}")),
                ("setup", VIA_PROXY.format(target=f"localhost:{port}")),
                ("setup", VIA_PROXY.format(target="169.254.169.254:80")),
                ("setup", VIA_PROXY.format(target=f"[::ffff:127.0.0.1]:{port}")),
                ("setup", ABSTRACT.format(name=name)),
            ])
        with redis_server.client() as client:
            written = sorted(k.decode() for k in client.keys("pwned*"))
    finally:
        redis_server.stop()
    answers = outcome.answers
    record.observed = {"redis keys written": written, "abstract socket reached": bool(hits),
                       "proxy answers": [a.split("STDOUT:")[1][:30].strip() for a in
                                         answers[1:5]]}
    assert written == [], answers
    assert hits == [], answers
    assert "ConnectionRefusedError" in answers[0], answers[0]
    for answer in answers[1:5]:
        assert "HTTP/1.1 403" in answer, answer
    assert "reached the host socket" not in answers[5], answers[5]


def test_setup_phase_reaches_what_the_operator_allows(scorecard: Recorder) -> None:
    """The egress proxy is a working way out: curl through it (CONNECT, as pip and git
    use it) reaches a server on a host the operator listed, at an address they allowed
    (127.0.0.2 standing in for a private mirror), and nothing else on that host's
    loopback."""
    record = scorecard("6l-setup-network-allowed",
                       "Setup phase: the egress proxy carries allowed traffic",
                       "through the proxy, curl reaches a listed host on an allowed "
                       "network; without it, "
                       "nothing: the sandbox's network namespace is its own")
    import http.server

    # The sandbox sees the host's /usr: without curl there, both steps would fail alike.
    assert Path("/usr/bin/curl").exists(), "no /usr/bin/curl: scripts/install.sh --dev " \
        "installs it (apt-get install curl)"
    server = http.server.HTTPServer(("127.0.0.2", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with worker_home("root") as (root, uid):
            outcome = run_steps("root", root, uid, [
                ("setup", f"curl -sS -m 10 -p -o /dev/null -w '%{{http_code}}' "
                          f"http://127.0.0.2:{port}/"),
                ("setup", f"curl -sS -m 5 --noproxy '*' http://127.0.0.2:{port}/; echo $?"),
            ], egress_allow=("127.0.0.2/32",), egress_hosts=(f"127.0.0.2:{port}",))
    finally:
        server.shutdown()
        server.server_close()
    record.observed = {"through the proxy": outcome.answers[0].split("STDOUT:")[1][:3],
                       "bypassing it": outcome.answers[1].split("STDOUT:")[1].strip()[:3]}
    assert "exit=0\nSTDOUT:200" in outcome.answers[0], outcome.answers[0]
    assert "STDOUT:7" in outcome.answers[1], outcome.answers[1]  # curl: cannot connect


@pytest.mark.parametrize("worker", WORKERS)
def test_hard_links_to_host_files_are_refused(worker: str, scorecard: Recorder) -> None:
    """A root worker chowns the workspace to the sandbox uid before each sandbox: a hard
    link to a host file would hand that file over. Every host file the sandbox sees is
    on another mount than /workspace and /frognano, so link(2) fails with EXDEV."""
    record = scorecard(f"6m-sandbox-hard-link-{worker}",
                       f"Hostile issue: hard-link host files into the workspace ({worker} "
                       "worker)",
                       "ln /usr/bin/env, /etc/ssl/... or the runner into /workspace or "
                       "/frognano fails (another mount); the host files keep their owner")
    targets = ["/usr/bin/env", "/etc/ssl/certs/ca-certificates.crt", "/etc/passwd",
               "/run/frognano/runner.py"]
    links = "; ".join(f"ln {t} /workspace/l{i} 2>&1; ln {t} /frognano/l{i} 2>&1"
                      for i, t in enumerate(targets))
    before = {t: os.stat(t).st_uid for t in targets if os.path.exists(t)}
    with worker_home(worker) as (root, uid):
        outcome = run_steps(worker, root, uid, [("Bash", links), ("Bash", "true"),
                                                ("Bash", "ls /workspace /frognano")])
    after = {t: os.stat(t).st_uid for t in before}
    record.observed = {"links made": outcome.answers[2].count(" l"),
                       "cross-device refusals": outcome.answers[0].count("cross-device"),
                       "host owners changed": before != after}
    assert outcome.answers[0].count("Invalid cross-device link") == 2 * len(targets), \
        outcome.answers[0]
    assert not any(f"l{i}" in outcome.answers[2] for i in range(len(targets)))
    assert before == after


REDIS_VIA_PROXY = ("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', "
                   "3128), timeout=5); s.sendall(b'CONNECT {target} HTTP/1.1\\r\\n\\r\\n'); "
                   "head = s.recv(300); print(head.splitlines()[0]); "
                   "s.sendall(b'PING\\r\\nSET pwned-port 1\\r\\n'); print(s.recv(64))\"")


def test_setup_phase_reaches_only_the_indexs_port_of_its_host(scorecard: Recorder) -> None:
    """An index on a box that runs other services (here 127.0.0.1, an http server as the
    index and a real redis-server beside it), its address allowed as the proxy's refusal
    line suggests: setup reaches the index's port through the proxy, never Redis's."""
    record = scorecard("6zk-hostile-egress-other-port",
                       "Hostile issue: setup CONNECTs to another port (a real Redis) of the "
                       "index's host, whose address the operator allowed "
                       "(`FROGNANO_SETUP_EGRESS_ALLOW`) for the index",
                       "refused and named (`not a package index port`): Redis gets "
                       "nothing; curl through the proxy still reaches the index's own port")
    import http.server

    assert Path("/usr/bin/curl").exists(), "no /usr/bin/curl: scripts/install.sh --dev " \
        "installs it (apt-get install curl)"
    class Index(http.server.BaseHTTPRequestHandler):
        """An index page whatever the path (a file server would list the test's cwd,
        which an earlier scenario may have removed)."""

        def do_GET(self) -> None:
            body = b"<html><body>the index</body></html>\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=index.serve_forever, daemon=True).start()
    index_port = index.server_address[1]
    redis_server = start_redis()
    try:
        with worker_home("root") as (root, uid):
            outcome = run_steps("root", root, uid, [
                ("setup", REDIS_VIA_PROXY.format(target=f"127.0.0.1:{redis_server.port}")),
                # The setup's NO_PROXY names 127.0.0.1 (the index endpoint): not here.
                ("setup", f"curl -sS -m 30 -p --noproxy '' -o /dev/null -w '%{{http_code}}' "
                          f"http://127.0.0.1:{index_port}/"),
            ], egress_allow=("127.0.0.1/32",),
                index_url=f"http://127.0.0.1:{index_port}/simple/")
        with redis_server.client() as client:
            written = sorted(k.decode() for k in client.keys("pwned*"))
    finally:
        redis_server.stop()
        index.shutdown()
        index.server_close()
    redis_answer, index_answer = outcome.answers
    record.observed = {"redis port": redis_answer.split("STDOUT:")[1][:60].strip(),
                       "redis keys written": written,
                       "index port": index_answer.split("STDOUT:")[1][:3]}
    assert "PONG" not in redis_answer and written == [], redis_answer
    assert "HTTP/1.1 403" in redis_answer, redis_answer
    assert "exit=0\nSTDOUT:200" in index_answer, index_answer
