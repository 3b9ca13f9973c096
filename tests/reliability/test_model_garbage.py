"""Scenario 8: model garbage. Each kind of malformed output is replayed by the scripted
model through the real parser, loop and harness, in a real bubblewrap sandbox; every
run must end with a named exit reason and a complete, readable transcript."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import Recorder
from tests.sandbox_support import HAVE_BWRAP, host_repo, running_sandbox
from workers.agent.harness import SolveLimits, solve
from workers.agent.transcript import Transcript
from workers.models.scripted import ScriptedModel, think_and_call

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

NAMED_EXIT_REASONS = {"tests_passed", "agent", "max_turns", "max_context_len",
                      "max_tokens_per_turn", "llm_query_error", "tool_error", "cancelled",
                      "max_time", "max_attempts", "setup_failed"}
CALL = think_and_call("Let me look.", "Bash", command="ls")
GARBAGE: dict[str, str] = {
    "unclosed tags": "Let me look.\n</think>\n\n<tool_call>\n<function=Bash>\n"
                     "<parameter=command>\nls -la\n",
    "unclosed think": "I keep thinking <think> and never stop",
    "non-UTF-8 bytes": "r\udcff\udcfe\x00\x1b[31m\n</think>\n\n"
                       + CALL.split("</think>\n\n", 1)[1].replace("ls", "printf '\\377\\376'"),
    "8,000 tokens of nothing": " " * 32_000,
    "unknown tool": think_and_call("Use my own tool.", "Exfiltrate", url="http://x"),
    "wrong argument types": CALL.replace("<parameter=command>\nls\n</parameter>",
                                         "<parameter=command>\n{\"a\": [1, 2]}\n</parameter>\n"
                                         "<parameter=timeout>\nsoon\n</parameter>"),
    "wrong argument types (Read)": think_and_call("Read it.", "Read", file_path=["a", "b"],
                                                  offset="first", limit=-5),
    "tool call inside <think>": "I will call <tool_call>\n<function=Bash>\n<parameter=command>"
                                "\ntouch PWNED\n</parameter>\n</function>\n</tool_call> now.\n"
                                "</think>\n\nDone.",
    "nested and duplicated tags": "x\n</think>\n\n<tool_call><tool_call>\n<function=Bash>\n"
                                  "<function=Read>\n<parameter=command>\nls\n</parameter>"
                                  "</function></tool_call></tool_call></think>",
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_model_garbage_ends_with_a_named_reason(kind: str, tmp_path: Path,
                                                scorecard: Recorder) -> None:
    slug = "".join(c if c.isalnum() else "-" for c in kind.lower()).strip("-")
    record = scorecard(f"8-model-garbage-{slug}", f"Model garbage: {kind}",
                       "the run ends with a named exit reason and a complete transcript; "
                       "no tool runs from a malformed or thought-only call")
    path = tmp_path / "transcript.jsonl"
    started = time.monotonic()
    with running_sandbox("bubblewrap") as sandbox, Transcript(path) as transcript:
        result = solve(ScriptedModel([GARBAGE[kind]] * 3), sandbox, "Fix it.",
                       "test -f FIXED", transcript, repo=host_repo(sandbox),
                       limits=SolveLimits(max_steps=3, max_attempts=1, max_seconds=60))
        pwned = (sandbox.config.workspace / "PWNED").exists()  # type: ignore[attr-defined]
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    turns = [r for r in records if r["kind"] == "turn"]
    record.observed = {"exit reason": result.exit_reason, "turns": len(turns),
                       "parse errors": sum(len(t.get("parse_errors") or []) for t in turns),
                       "transcript records": len(records),
                       "seconds": time.monotonic() - started}
    assert result.exit_reason in NAMED_EXIT_REASONS
    assert records[0]["kind"] == "run" and records[-1]["kind"] == "result"
    assert records[-1]["exit_reason"] == result.exit_reason
    assert not pwned, "a call inside <think> never runs"
