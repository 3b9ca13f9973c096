"""Hostile issue (issue 30 §1, §2): an index the operator trusts, and the setup's own code,
against the host-side package index endpoint (sandbox/index_endpoint.py).

§1: the operator's index (plain HTTP on 127.0.0.1 with a token, tests/support/private_index.py)
has been taken over, or is answered by whoever sits on its path. Its page for `evil` links
the App key on the host (`file:///…/github-app.pem`), a loopback service of the host, and
paths of its own that redirect (`302`) to the key, to that service and to the cloud
metadata address; the operator's find-links directory holds a link to the key. The
repository's setup.py, run by the inferred `pip install -e .` in the real bubblewrap
sandbox, reads those pages from the endpoint and asks for every file they list. The key and
the service's answer must never reach the sandbox; each refusal is in the run's log.

§2: a setup.py asks the endpoint for every file of large projects (numpy's five wheels and
others, 232 MiB) and throws the bytes away, with a sandbox disk quota of 64 MiB and a cap
of 32 MiB on the setup caches. The setup gets no more than its quota, the refusal is named
in the run's log and its failure message, and the download cache stays under its cap while
setup runs (measured every 20 ms).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sandbox import SandboxConfig, SandboxLimits, open_sandbox
from sandbox.index_endpoint import PackageSources
from solver.agent.harness import solve
from solver.agent.transcript import Transcript, read_transcript
from solver.models.scripted import ScriptedModel, final_answer
from solver.run import open_workspace
from solver.setup.installer import FALLBACK_NOTE, FALLBACK_SAID, FUNCTION, uv_binary, uv_command
from solver.setup.python_setup import VENV, infer_python_setup
from solver.verdict.repo_tests import PYTEST_COMMAND
from tests.conftest import make_repo
from tests.reliability.conftest import Recorder
from tests.reliability.test_hostile_setup_egress import _solve as solve_calc
from tests.support.private_index import LOCAL_INDEX, make_wheel, private_index
from tests.support.sandbox_support import HAVE_BWRAP, make_git_workspace, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]
TOKEN = "corp-index-token-30a1"
KEY = "-----BEGIN RSA PRIVATE KEY-----\nAPP-KEY-3f9c2e1d\n-----END RSA PRIVATE KEY-----\n"
LOOPBACK_ANSWER = "loopback-service-answer-7d41"
ISSUE = "add() is wrong\n\nadd(2, 3) should be 5."
MiB = 1024**2

# The attacker's code: every link of the endpoint's pages for `evil` and of the
# find-links page, asked for; what came back goes to $HOME/attack.json.
SETUP_PY_LINKS = r'''
import json, os, re, urllib.error, urllib.request
from setuptools import setup

OUT = os.path.join(os.environ.get("HOME", "/tmp"), "attack.json")


def get(path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:3141" + path, timeout=200) as answer:
            return answer.status, answer.read(1 << 16).decode("latin-1")
    except urllib.error.HTTPError as exc:
        return exc.code, str(exc.reason)
    except OSError as exc:
        return 0, f"error: {exc}"


def attack():
    report = {}
    for page in ("/i/0/evil/", "/l/0/"):
        status, text = get(page)
        report[page] = {"page": status}
        for href in re.findall(r'href="([^"#]+)', text):
            report[page][href.rsplit("/", 1)[-1]] = get(href)
    with open(OUT, "w") as handle:
        json.dump(report, handle)


if not os.path.exists(OUT):  # pip runs setup.py more than once
    attack()
setup(name="calc", version="1.0", py_modules=["calc"], install_requires=["corp-helper"])
'''

# The attacker's code for §2: every file of large projects, read and thrown away.
SETUP_PY_FLOOD = r'''
import json, os, re, urllib.error, urllib.request
from setuptools import setup

OUT = os.path.join(os.environ.get("HOME", "/tmp"), "flood.json")
PROJECTS = %r


def fetch(path):
    """Bytes received, status, reason."""
    received = 0
    try:
        with urllib.request.urlopen("http://127.0.0.1:3141" + path, timeout=200) as answer:
            while chunk := answer.read(1 << 20):
                received += len(chunk)
            return received, answer.status, ""
    except urllib.error.HTTPError as exc:
        return received, exc.code, str(exc.reason)
    except OSError as exc:
        return received, 0, f"error: {exc}"


def attack():
    report = {"received": 0, "answers": []}
    for project in PROJECTS:
        page = urllib.request.urlopen(f"http://127.0.0.1:3141/i/0/{project}/").read().decode()
        for href in re.findall(r'href="([^"#]+)', page):
            received, status, reason = fetch(href)
            report["received"] += received
            report["answers"].append([href.rsplit("/", 1)[-1], status, reason])
    with open(OUT, "w") as handle:
        json.dump(report, handle)


if not os.path.exists(OUT):
    attack()
setup(name="calc", version="1.0", py_modules=["calc"], install_requires=["corp-helper"])
'''
FLOOD_PROJECTS = ["numpy", "duckdb", "onnxruntime", "libclang", "chemicals", "cvxopt",
                  "mysql-connector-python", "music21"]
CALC = {"calc.py": "def add(a, b):\n    return a - b\n",
        "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                              "    assert add(2, 3) == 5\n"}


@contextmanager
def loopback_service() -> Iterator[tuple[int, list[str]]]:
    """A service on the host's 127.0.0.1 (Redis, a model server, the receiver stand in
    for it): it answers every request with LOOPBACK_ANSWER and records it."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            hits.append(self.path)
            body = LOOPBACK_ANSWER.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()


def _evil_page(key: Path, service_port: int) -> tuple[str, dict[str, str]]:
    """The hostile index's page for `evil`, and its redirects."""
    links = [f"file://{key}", "/redirect/key", "/redirect/loopback",
             "/redirect/metadata", f"http://127.0.0.1:{service_port}/secret"]
    page = "\n".join(f'<a href="{href}">{href.rsplit("/", 1)[-1]}</a>' for href in links)
    return page, {"/redirect/key": f"file://{key}",
                  "/redirect/loopback": f"http://127.0.0.1:{service_port}/secret",
                  "/redirect/metadata": "http://169.254.169.254/latest/meta-data/"}


def test_an_index_cannot_hand_the_sandbox_host_files_or_loopback_answers(
        scorecard: Recorder) -> None:
    record = scorecard(
        "30-hostile-index-links",
        "Hostile issue: the index links and redirects to the App key, loopback and metadata",
        "the operator's (taken over) index links `file:///…/github-app.pem` and a loopback "
        "service, and redirects to the key, that service and 169.254.169.254; the "
        "find-links folder holds a link to the key; the setup.py asks the endpoint for "
        "each: every one is refused and logged, neither the key nor the service's answer "
        "reaches the sandbox, and the project still installs from that index")
    with reachable_dir() as root, loopback_service() as (service_port, hits):
        key = root / "state" / "github-app.pem"  # where the setup flow keeps the App key
        key.parent.mkdir()
        key.write_text(KEY)
        key.chmod(0o600)
        wheels = root / "wheels"  # the operator's find-links folder
        wheels.mkdir()
        (wheels / "evil-1.0-py3-none-any.whl").symlink_to(key)
        page, redirects = _evil_page(key, service_port)
        helper = make_wheel(root, "corp-helper", "1.0", "VALUE = 42\n")
        with private_index(TOKEN, [helper], pages={"evil": page},
                           redirects=redirects) as index:
            source = make_repo(root / "src", {"setup.py": SETUP_PY_LINKS, **CALC})
            proc, transcript = solve_calc(source, root, root / "state", {
                "FROGNANO_PIP_INDEX_URL": index.url, "FROGNANO_PIP_FIND_LINKS": str(wheels)})
        reports = list((root / "work").glob("*/private/home/attack.json"))
        found = json.loads(reports[0].read_text()) if reports else {}
        records = read_transcript(transcript)
    setup = next((r for r in records if r["kind"] == "setup"), {})
    refused = setup.get("network", [])
    answers = {name: answer for page in found.values() for name, answer in page.items()
               if name != "page"}
    record.observed = {"verdict": records[-1].get("exit_reason"),
                       "answers": sorted(f"{name}: {answer[0]}"
                                         for name, answer in answers.items()),
                       "loopback service requests": len(hits),
                       "refusals in the transcript": len(refused)}
    output = proc.stdout + proc.stderr
    assert found, f"setup.py left no report: {output[-3000:]}"
    leaked = json.dumps(found)
    assert "APP-KEY-3f9c2e1d" not in leaked and LOOPBACK_ANSWER not in leaked, found
    assert hits == [], "the endpoint reached the loopback service"
    assert answers.keys() == {"github-app.pem", "key", "loopback", "metadata", "secret",
                              "evil-1.0-py3-none-any.whl"}, found
    assert all(answer[0] == 403 for answer in answers.values()), answers
    for needle in ("github-app.pem: a file: URL from an index that is not a file: dir",
                   "127.0.0.1 resolves to 127.0.0.1, not a public address "
                   "(FROGNANO_SETUP_EGRESS_ALLOW=127.0.0.1/32 would allow it)",
                   "169.254.169.254 resolves to 169.254.169.254, not a public address",
                   f"evil-1.0-py3-none-any.whl lies outside {wheels}"):
        assert any(needle in line for line in refused), (needle, refused)
    assert "setup network: package index: refused" in proc.stderr
    assert proc.returncode == 0 and records[-1]["exit_reason"] == "tests_passed", \
        output[-3000:]


@contextmanager
def disk_sampler(folder: Path) -> Iterator[dict[str, int]]:
    """The most bytes `folder`'s files held at once, sampled every 20 ms."""
    peak = {"bytes": 0, "files": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            sizes = []
            for path in list(folder.glob("*")) if folder.is_dir() else []:
                try:
                    sizes.append(path.stat().st_blocks * 512)
                except OSError:
                    continue
            peak["bytes"] = max(peak["bytes"], sum(sizes))
            peak["files"] = max(peak["files"], len(sizes))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


def _listed_bytes(projects: list[str]) -> int:
    """What the flood asks for: every file the local index lists for `projects`."""
    total = 0
    for project in projects:
        page = (LOCAL_INDEX / "simple" / project / "index.html").read_text()
        for name in re.findall(r'href="\.\./\.\./files/([^"#]+)', page):
            total += (LOCAL_INDEX / "files" / name).stat().st_size
    return total


def test_a_setup_cannot_fill_the_hosts_disk_through_the_download_cache(
        scorecard: Recorder, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    record = scorecard(
        "30-hostile-index-disk",
        "Hostile issue: setup.py fetches every wheel of eight large projects (232 MiB) "
        "through the index endpoint",
        "with a sandbox disk quota of 64 MiB and a 32 MiB cap on the setup caches, a "
        "setup.py asks the endpoint for every file of eight large projects and throws the "
        "bytes away: it gets at most its quota, the refusal names the budget in the run's "
        "log and its failure message, and the download cache stays under its cap while "
        "setup runs")
    caplog.set_level(logging.WARNING, logger="sandbox.egress")
    listed = _listed_bytes(FLOOD_PROJECTS)
    assert listed > 200 * MiB, listed
    with reachable_dir() as root:
        helper = make_wheel(root, "corp-helper", "1.0", "VALUE = 42\n")
        source = make_repo(root / "src", {"setup.py": SETUP_PY_FLOOD % FLOOD_PROJECTS,
                                          **CALC})
        run_dir = root / "work"
        host = open_workspace(source, None, run_dir)
        inferred = infer_python_setup(host.work_tree)
        assert inferred is not None
        cache = tmp_path / "package-cache"  # the state dir: no sandbox uid reaches it
        with private_index(TOKEN, [helper]) as index:
            config = SandboxConfig(
                workspace=host.work_tree, private_dir=run_dir / "private",
                limits=SandboxLimits(disk_bytes=64 * MiB),
                package_sources=PackageSources(index.url, cache_dir=cache,
                                               cache_max_bytes=32 * MiB))
            model = ScriptedModel([final_answer("nothing to do")])
            with disk_sampler(cache / "sha256") as peak, \
                    open_sandbox("bubblewrap", config) as sandbox, \
                    Transcript(root / "run.jsonl") as out:
                result = solve(model, sandbox, ISSUE, PYTEST_COMMAND, out, repo=host,
                               setup_command=inferred.command)
        flood_file = run_dir / "private" / "home" / "flood.json"
        flood = json.loads(flood_file.read_text()) if flood_file.is_file() else {}
        setup = next(r for r in read_transcript(root / "run.jsonl") if r["kind"] == "setup")
    refused = [a for a in flood.get("answers", []) if a[1] == 403]
    record.observed = {"listed MiB": round(listed / MiB),
                       "received by setup MiB": round(flood.get("received", 0) / MiB, 1),
                       "cache peak MiB": round(peak["bytes"] / MiB, 1),
                       "files refused": len(refused), "exit": result.exit_reason}
    assert flood, f"setup.py left no report: {setup}"
    assert flood["received"] <= 64 * MiB, record.observed
    assert peak["bytes"] <= 32 * MiB, record.observed
    assert refused and all("budget of 64 MiB" in a[2] for a in refused), flood["answers"]
    budget = "past this setup's budget of 64 MiB fetched through the package index"
    assert any(budget in line for line in setup["network"]), setup["network"]
    assert any(budget in message for message in caplog.messages), caplog.messages
    # corp-helper, after the budget was spent, is refused too: setup fails, named.
    assert result.exit_reason == "setup_failed" and budget in result.error, result.error


# -- uv, the inferred setup's installer (issue 29 §2) ------------------------------------
# The taken-over index's pages as uv reads them: each project's one link named as a wheel
# (uv and pip ignore files that are not distributions), leading to the App key, the loopback
# service or the cloud metadata address (`evil-file` through a link beside the key). uv
# asks for a wheel's headers first (a HEAD, to read its metadata by ranges), then its bytes.
def _uv_pages(key: Path, service_port: int) -> tuple[dict[str, str], dict[str, str]]:
    links = {"evil-key": "/redirect/evil_key-1.0-py3-none-any.whl",
             "evil-loopback": f"http://127.0.0.1:{service_port}/evil_loopback-1.0-py3-none-any"
                              ".whl",
             "evil-metadata": "/redirect/evil_metadata-1.0-py3-none-any.whl",
             "evil-file": f"file://{key.parent}/evil_file-1.0-py3-none-any.whl"}
    pages = {name: f'<a href="{href}">{href.rsplit("/", 1)[-1]}</a>'
             for name, href in links.items()}
    return pages, {"/redirect/evil_key-1.0-py3-none-any.whl": f"file://{key}",
                   "/redirect/evil_metadata-1.0-py3-none-any.whl":
                       "http://169.254.169.254/latest/meta-data/"}


def test_uv_reaches_no_more_through_a_hostile_index_than_pip(scorecard: Recorder) -> None:
    record = scorecard(
        "30-hostile-index-uv",
        "Hostile issue: uv, the inferred setup's installer, resolves packages the taken-over "
        "index links to the App key, loopback and metadata",
        "the inferred setup's own command (uv, pip its fallback) installs `evil-key`, "
        "`evil-loopback`, `evil-metadata` and `evil-file`, whose only wheels redirect or "
        "link to the key, a loopback service and 169.254.169.254: uv's HEAD probe is "
        "answered without a fetch, each GET is refused and logged, pip's fallback is refused "
        "the same, the setup fails, and neither the key nor the service's answer reaches "
        "the sandbox")
    found: dict[str, Any] = {}
    with reachable_dir() as root, loopback_service() as (service_port, hits):
        key = root / "state" / "github-app.pem"
        key.parent.mkdir()
        key.write_text(KEY)
        key.chmod(0o600)
        (key.parent / "evil_file-1.0-py3-none-any.whl").symlink_to(key)
        pages, redirects = _uv_pages(key, service_port)
        with private_index(TOKEN, [], pages=pages, redirects=redirects) as index:
            config = SandboxConfig(workspace=make_git_workspace(root),
                                   private_dir=root / "private",
                                   package_sources=PackageSources(index.url),
                                   setup_tools=tuple(t for t in (uv_binary(),) if t))
            with open_sandbox("bubblewrap", config) as sandbox:
                for project in pages:
                    found[project] = sandbox.exec(uv_command(VENV, "", project),
                                                  network=True, timeout=300)
            written = "".join(p.read_text(errors="replace") for p in root.rglob("*")
                              if p.is_file() and not p.is_symlink() and p != key
                              and "private" in p.parts)
    record.observed = {project: f"exit {result.exit_code}, {len(result.network_log)} refusal(s)"
                       for project, result in found.items()}
    record.observed["loopback service requests"] = len(hits)
    assert config.setup_tools, "uv is a dependency of the product (pyproject.toml)"
    for project, result in found.items():
        output = result.stdout + result.stderr
        assert not result.ok and FALLBACK_SAID in result.stdout, (project, output[-2000:])
        assert "403" in output, (project, output[-2000:])
        assert "APP-KEY-3f9c2e1d" not in output and LOOPBACK_ANSWER not in output
        assert TOKEN not in output
    assert "APP-KEY-3f9c2e1d" not in written and LOOPBACK_ANSWER not in written
    assert hits == [], "the endpoint reached the loopback service"
    for project, needle in (("evil-key", "a file: URL from an index that is not a file: dir"),
                            ("evil-loopback", "127.0.0.1 resolves to 127.0.0.1, not a public "
                                              "address"),
                            ("evil-metadata", "169.254.169.254 resolves to 169.254.169.254"),
                            ("evil-file", "a file: URL from an index that is not a file: dir")):
        assert any(needle in line for line in found[project].network_log), \
            (project, found[project].network_log)


def test_an_index_that_fails_stops_uv_and_pip_installs_instead(scorecard: Recorder) -> None:
    record = scorecard(
        "29-setup-uv-fallback",
        "Setup with uv: an extra index that fails (uv stops where pip goes on)",
        "the operator lists a second index that refuses connections: uv gives up on its "
        "502, the inferred setup reruns the same requirements with pip in a fresh venv, "
        "which steps over it; the run passes, and the setup note says pip installed it")
    with reachable_dir() as root:
        helper = make_wheel(root, "corp-helper", "1.0", "VALUE = 42\n")
        with private_index(TOKEN, [helper]) as index:
            source = make_repo(root / "src", {"setup.py": "from setuptools import setup\n"
                                              "setup(name='calc', version='1.0', py_modules="
                                              "['calc'], install_requires=['corp-helper'])\n",
                                              **CALC})
            proc, transcript = solve_calc(source, root, root / "state", {
                "FROGNANO_PIP_INDEX_URL": index.url,
                "FROGNANO_PIP_EXTRA_INDEX_URL": "http://127.0.0.1:9/simple/"})
        records = read_transcript(transcript)
    setup = next((r for r in records if r["kind"] == "setup"), {})
    result = records[-1]
    output = json.dumps(setup)
    record.observed = {"verdict": result.get("exit_reason"), "setup exit": setup.get("exit_code"),
                       "setup seconds": setup.get("seconds"), "note": setup.get("note", "")[-90:]}
    assert setup.get("command", "").startswith(FUNCTION), setup
    assert FALLBACK_SAID in output and "Successfully installed" in output, output[-3000:]
    assert "127.0.0.1:9" in output and TOKEN not in output  # uv named the index it gave up on
    assert setup.get("note", "").endswith(FALLBACK_NOTE), setup
    assert proc.returncode == 0 and result["exit_reason"] == "tests_passed", \
        (proc.stdout + proc.stderr)[-3000:]
