"""`frognano solve` given bad input: one clear message, no traceback, and a transcript."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer
from tests.conftest import make_repo
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")


def frognano(tmp: Path, *args: str, env: dict[str, str] | None = None
             ) -> tuple[int, str, list[dict]]:
    transcript = tmp / "transcript.jsonl"
    with reachable_dir() as work:
        full_env = {**os.environ, "FROGNANO_STATE_DIR": str(tmp / "state"),
                    "FROGNANO_WORK_DIR": str(work / "w"), "COLUMNS": "200", **(env or {})}
        proc = subprocess.run([sys.executable, "-m", "frognano", "solve", *args,
                               "--transcript", str(transcript)],
                              env=full_env, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in output, output
    records = read_transcript(transcript) if transcript.exists() else []
    return proc.returncode, output, records


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([final_answer("Nothing to do.")]))
    return f"scripted:{path}"


def assert_refused(result: tuple[int, str, list[dict]], message: str) -> None:
    code, output, records = result
    assert code == 2, output
    assert message in " ".join(output.split()), output
    assert records[-1]["kind"] == "result" and records[-1]["exit_reason"] == "bad_input"
    assert message in " ".join(records[-1]["error"].split())


def test_not_a_git_repository(tmp_path: Path, script: str) -> None:
    (tmp_path / "plain").mkdir()
    assert_refused(frognano(tmp_path, str(tmp_path / "plain"), "--issue", "x",
                            "--model", script), "is not a git repository")


def test_dirty_tree(calc_repo: Path, tmp_path: Path, script: str) -> None:
    (calc_repo / "calc.py").write_text("broken = True\n")
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "x", "--model", script),
                   "has uncommitted changes; commit or stash them first")


def test_no_test_command(tmp_path: Path, script: str) -> None:
    # A test module where no runner looks (humanfriendly's kind): tests, no command.
    repo = make_repo(tmp_path / "docs", {"README.md": "just docs\n",
                                         "pkg/tests.py": "def test_x():\n    pass\n"})
    assert_refused(frognano(tmp_path, str(repo), "--issue", "x", "--model", script),
                   "no test command found: pass --test-cmd CMD")


def test_a_repository_with_no_tests_at_all_is_told_so(tmp_path: Path, script: str) -> None:
    """Issue 29 §1: an sdist that ships no tests is another fact than a command not
    found (red before: it read 'no test command found')."""
    repo = make_repo(tmp_path / "sdist", {"README.md": "a library\n", "PKG-INFO": "x\n",
                                          "pyproject.toml": "[project]\nname = 'lib'\n",
                                          "lib/__init__.py": "def f():\n    return 1\n"})
    assert_refused(frognano(tmp_path, str(repo), "--issue", "x", "--model", script),
                   "the repository has no tests (no test file at all), so there is nothing "
                   "to judge a fix by: add tests, or pass --test-cmd CMD")


def test_invalid_repo_config(calc_repo: Path, tmp_path: Path, script: str) -> None:
    repo = make_repo(tmp_path / "r", {".github/frognano.yml": "max_steps: many\n",
                                      "test_a.py": "def test_a():\n    pass\n"})
    assert_refused(frognano(tmp_path, str(repo), "--issue", "x", "--model", script),
                   "`max_steps`: Input should be a valid integer")


def test_unusable_model_specs(calc_repo: Path, tmp_path: Path) -> None:
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "x", "--model", "gpt-5"),
                   "is not a model")
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "x",
                            "--model", f"scripted:{tmp_path / 'none.json'}"),
                   "cannot read the script")
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "x",
                            env={"FROGNANO_MODEL": ""}), "no model given")


def test_empty_issue_and_unreadable_issue_file(calc_repo: Path, tmp_path: Path,
                                               script: str) -> None:
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "  ", "--model", script),
                   "the issue text is empty")
    code, output, _ = frognano(tmp_path, str(calc_repo), "--issue-file",
                               str(tmp_path / "missing.md"), "--model", script)
    assert code == 2 and "cannot read" in output


def test_missing_bubblewrap_says_how_to_install_it(calc_repo: Path, tmp_path: Path,
                                                   script: str) -> None:
    code, output, records = frognano(tmp_path, str(calc_repo), "--issue", "x", "--model",
                                     script, env={"PATH": "/nonexistent"})
    assert code == 1 and "git is not installed" in output
    assert records[-1]["exit_reason"] == "infrastructure_error"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to("/usr/bin/git")
    code, output, records = frognano(tmp_path, str(calc_repo), "--issue", "x", "--model",
                                     script, env={"PATH": str(bin_dir)})
    assert code == 2, output
    assert "apt-get install bubblewrap" in " ".join(output.split())
    assert "--sandbox unsafe-local" in output
    assert records[-1]["exit_reason"] == "bad_input"


def assert_stopped_before_the_agent(result: tuple[int, str, list[dict]], message: str) -> None:
    code, output, records = result
    assert code == 2, output
    assert message in " ".join(output.split()), output
    assert records[-1]["exit_reason"] == "baseline_unusable"
    assert message in " ".join(records[-1]["error"].split())
    assert not [r for r in records if r["kind"] == "turn"], "the agent never ran"


@needs_bwrap
def test_hanging_test_command_is_cut_off(tmp_path: Path, script: str) -> None:
    repo = make_repo(tmp_path / "r", {".github/frognano.yml": "test_timeout_minutes: 0.03\n",
                                      "README.md": "x\n"})
    result = frognano(tmp_path, str(repo), "--issue", "x", "--model", script,
                      "--test-cmd", "sleep 1000", "--max-rounds", "1")
    assert_stopped_before_the_agent(
        result, "the baseline alone exceeds the run's budget: the repository's tests ran 2 s "
                "and were stopped at the test timeout of 2 s")
    records = result[2]
    assert records[1]["kind"] == "baseline" and records[1]["timed_out"] is True
    assert "FAIL (timed out" in result[1]


@needs_bwrap
def test_test_command_not_found_stops_before_the_agent(calc_repo: Path, tmp_path: Path,
                                                       script: str) -> None:
    assert_stopped_before_the_agent(
        frognano(tmp_path, str(calc_repo), "--issue", "x", "--model", script,
                 "--test-cmd", "no-such-test-runner"),
        "the test command `no-such-test-runner` was not found (exit 127)")


@needs_bwrap
def test_baseline_that_cannot_collect_names_the_error_and_shows_setup(tmp_path: Path,
                                                                     script: str) -> None:
    repo = make_repo(tmp_path / "r", {"tests/test_app.py": "import requests_oauthlib_x\n\n"
                                                           "def test_a():\n    pass\n"})
    result = frognano(tmp_path, str(repo), "--issue", "x", "--model", script)
    assert_stopped_before_the_agent(
        result, "the tests could not be collected in tests/test_app.py (pytest exit 2: "
                "ModuleNotFoundError: No module named 'requests_oauthlib_x')")
    assert "setup: python3 -m venv" in result[1]


def test_empty_test_command_and_bad_numbers(calc_repo: Path, tmp_path: Path,
                                            script: str) -> None:
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "x", "--model", script,
                            "--test-cmd", ""), "--test-cmd is empty")
    assert_refused(frognano(tmp_path, str(calc_repo), "--issue", "x", "--model", script,
                            "--n-ctx", "-5"), "--n-ctx must be a positive number of tokens")


def test_issue_too_large_for_the_context_is_refused_before_setup(calc_repo: Path,
                                                                 tmp_path: Path,
                                                                 script: str) -> None:
    issue = tmp_path / "issue.md"
    issue.write_text("add() is broken.\n" + "word " * 200_000)
    # Leaf's agent context, named by the flag (the default is the evaluated 131,072).
    result = frognano(tmp_path, str(calc_repo), "--issue-file", str(issue), "--model", script,
                      "--n-ctx", "65536")
    assert_refused(result, "does not fit the model's context of 65536 tokens")
    assert [r["kind"] for r in result[2]] == ["result"], "no setup, no baseline"


class _Garbage(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = b"<html>this is not the API you are looking for</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@needs_bwrap
def test_model_endpoint_answering_garbage(calc_repo: Path, tmp_path: Path,
                                          garbage_server: str) -> None:
    code, output, records = frognano(tmp_path, str(calc_repo), "--issue", "x",
                                     "--model", garbage_server)
    assert code == 1, output
    assert "llm_query_error" in output
    result = records[-1]
    assert result["exit_reason"] == "llm_query_error"
    assert garbage_server.removesuffix("/v1") in result["error"]
    assert [r["kind"] for r in records].count("error") == 1


@needs_bwrap
def test_model_endpoint_down(calc_repo: Path, tmp_path: Path) -> None:
    code, output, records = frognano(tmp_path, str(calc_repo), "--issue", "x",
                                     "--model", "http://127.0.0.1:9/v1")
    assert code == 1, output
    assert records[-1]["exit_reason"] == "llm_query_error"
    assert "127.0.0.1:9" in records[-1]["error"]
