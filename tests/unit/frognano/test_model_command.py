"""`frognano model info` and `frognano model pull`.

`pull` runs in a subprocess because huggingface_hub reads HF_HOME, HF_ENDPOINT
and HF_HUB_OFFLINE when it is imported. Its success path downloads for real,
over HTTP, from a local server that answers like the Hub's `resolve` endpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import io
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from frognano.model_command import add_model_parser, gguf_filename, run_model_command
from tests.support.paths import REPO_ROOT

REPO_ROOT = REPO_ROOT
FILENAME = "FrogNano-4B-2609-Q4_K_M.gguf"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def run(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="frognano")
    add_model_parser(parser.add_subparsers(dest="command", required=True))
    out = io.StringIO()
    code = run_model_command(parser.parse_args(list(argv)), Console(file=out, width=200))
    return code, out.getvalue()


def test_info_describes_the_tiny_qwen35(tiny_qwen35_gguf: Path) -> None:
    code, out = run("model", "info", str(tiny_qwen35_gguf))
    assert code == 0, out
    for expected in ("architecture    qwen35", "parameters      202.15K (202,152)",
                     "context length  4,096", "quantisation    F32", "chat template   yes",
                     "eos token       263 '<|im_end|>'", "bos token       261 '<|endoftext|>'"):
        assert expected in out


def test_info_describes_the_real_gemma(gemma_gguf: Path) -> None:
    code, out = run("model", "info", str(gemma_gguf))
    assert code == 0, out
    for expected in ("gemma3", "268.10M", "32,768", "Q4_K_M", "chat template   no",
                     "bos token       2 '<bos>'"):
        assert expected in out


def test_info_on_bad_files_says_what_is_wrong(tmp_path: Path) -> None:
    code, out = run("model", "info", str(tmp_path / "none.gguf"))
    assert (code, "error: model file not found" in out) == (1, True)
    (tmp_path / "x.gguf").write_bytes(b"GGML-not-really")
    code, out = run("model", "info", str(tmp_path / "x.gguf"))
    assert code == 1 and "is not a GGUF file" in out and "Traceback" not in out
    (tmp_path / "cut.gguf").write_bytes(b"GGUF\x03\x00\x00\x00\x05")
    code, out = run("model", "info", str(tmp_path / "cut.gguf"))
    assert code == 1 and "is not a valid GGUF file" in out


def test_filename_follows_the_repository() -> None:
    assert gguf_filename("bartowski/FrogNano-4B-2609-GGUF", "Q6_K") == "FrogNano-4B-2609-Q6_K.gguf"


# --- pull -------------------------------------------------------------------------------------


def pull(env: dict[str, str], *args: str, verb: str = "pull"
         ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run(
        [sys.executable, "-m", "frognano.model_command", "model", verb, *args],
        cwd=REPO_ROOT, env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True, text=True, timeout=60)


def test_pull_offline_with_an_empty_cache_fails_clearly(tmp_path: Path) -> None:
    result = pull({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "not in the local Hugging Face cache" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.fixture
def fake_hub(tiny_qwen35_gguf: Path) -> Iterator[str]:
    """A local HTTP server answering like huggingface.co's resolve endpoint."""
    data = tiny_qwen35_gguf.read_bytes()
    etag = hashlib.sha256(data).hexdigest()

    class Hub(http.server.BaseHTTPRequestHandler):
        def _head(self) -> bool:
            if not self.path.endswith(f"/resolve/main/{FILENAME}"):
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return True

        def do_HEAD(self) -> None:
            self._head()

        def do_GET(self) -> None:
            if self._head():
                self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_pull_downloads_checks_and_prints_the_path(fake_hub: str, tmp_path: Path,
                                                   tiny_qwen35_gguf: Path) -> None:
    home = tmp_path / "hf"
    result = pull({"HF_HOME": str(home), "HF_ENDPOINT": fake_hub})
    assert result.returncode == 0, result.stdout + result.stderr
    expected = (home / "hub" / "models--bartowski--FrogNano-4B-2609-GGUF" / "snapshots"
                / COMMIT / FILENAME)
    assert f"export FROGNANO_MODEL={expected}" in result.stdout
    assert expected.read_bytes() == tiny_qwen35_gguf.read_bytes()
    assert "architecture    qwen35" in result.stdout

    # Once cached, it works offline too.
    offline = pull({"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert f"export FROGNANO_MODEL={expected}" in offline.stdout

    # `model path` finds the cached file without any network, for FROGNANO_MODEL=$(…).
    path = pull({"HF_HOME": str(home), "HF_ENDPOINT": "http://127.0.0.1:9"}, verb="path")
    assert (path.returncode, path.stdout) == (0, f"{expected}\n")
    absent = pull({"HF_HOME": str(tmp_path / "empty")}, verb="path")
    # The hint on stderr, nothing on stdout: `export FROGNANO_MODEL="$(frognano model path)"`
    # captures no error text, and the exit status says there is no model.
    assert absent.returncode == 1 and "has not been downloaded yet" in absent.stderr
    assert absent.stdout == "" and "frognano model pull" in " ".join(absent.stderr.split())

    missing = pull({"HF_HOME": str(home), "HF_ENDPOINT": fake_hub}, "--quant", "Q2_K")
    assert missing.returncode == 1
    assert "has no file FrogNano-4B-2609-Q2_K.gguf" in missing.stdout


def test_model_path_with_no_model_fails_in_a_shell_substitution(tmp_path: Path) -> None:
    """As a newcomer types it, in a real shell: `export X="$(…)"` hides the status (export's
    own is 0), so the hint on stderr is what says it; a plain assignment under `set -e` stops
    the script."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env = {**clean, "PYTHONPATH": str(REPO_ROOT), "HF_HOME": str(tmp_path / "empty"),
           "HF_HUB_OFFLINE": "1"}
    # This interpreter, not the first python3 on PATH (a pyenv shim may lack the deps).
    command = f"{shlex.quote(sys.executable)} -m frognano.model_command model path"

    def shell(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=60, env=env)

    exported = shell(f'export FROGNANO_MODEL="$({command})"; echo "[$FROGNANO_MODEL]"')
    assert exported.stdout == "[]\n"
    assert "frognano model pull" in " ".join(exported.stderr.split()), "not silent"
    stopped = shell(f'set -e; FROGNANO_MODEL="$({command})"; echo still here')
    assert stopped.returncode == 1 and "still here" not in stopped.stdout


def test_the_test_model_and_its_template_drive_the_loop_on_a_cpu(gemma_gguf: Path) -> None:
    """`frognano model path --test-model` (and `--chat-template`): the dev extra's Gemma and a
    template in its own turn format, which an agent conversation (system prompt, tools, a
    tool result) renders through and whose turns extend token by token."""
    from sandbox.schemas import TOOLS
    from solver.agent.prompts import SYSTEM_PROMPT
    from solver.models.base import Sampling, TurnBudget
    from solver.models.llama_cpp import LlamaCppModel
    from solver.models.llama_resident import LlamaSettings

    found = pull({}, "--test-model", verb="path")
    assert (found.returncode, found.stdout) == (0, f"{gemma_gguf}\n"), found.stderr
    template = pull({}, "--test-model", "--chat-template", verb="path")
    assert template.returncode == 0
    text = Path(template.stdout.strip()).read_text(encoding="utf-8")
    model = LlamaCppModel(gemma_gguf, settings=LlamaSettings(n_ctx=4096, n_threads=2),
                          sampling=Sampling(seed=1), chat_template=text)
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "add() subtracts; fix calc.py"}]
    prompt = model.render_prompt(messages, TOOLS)
    assert prompt.startswith("<bos><start_of_turn>user\n" + SYSTEM_PROMPT)
    assert "- Bash: " in prompt and prompt.endswith("<end_of_turn>\n<start_of_turn>model\n")
    first = model.complete(messages, TOOLS, TurnBudget(max_tokens=8))
    assert first.usage.completion_tokens == 8 and first.raw_text
    messages += [first.to_message(), {"role": "user", "content": "The tests still fail."}]
    model.complete(messages, TOOLS, TurnBudget(max_tokens=4))
    # Gemma's end of turn closes the model's turn: the next prompt extends the last.
    assert model.last_prompt_path == "append"
