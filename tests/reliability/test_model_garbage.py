"""Scenario 8: model garbage. Each kind of malformed output is replayed by the scripted
model through the real parser, loop and harness, in a real bubblewrap sandbox; every
run must end with a named exit reason and a complete, readable transcript.

What runs is what vLLM's `qwen3_coder` parser, which served FrogNano in training, would
run (docs: the Leaf contract, "tolerate a missing closing tag"): a call whose closing
tags are missing is still a call and runs; a call inside `<think>`, a tag in prose, an
unknown tool, or arguments its tool cannot use run nothing (the model reads the tool's
error). Every command that could run appends a line to RAN in the workspace, and the
test counts those lines: exactly the expected number, per turn.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from solver.agent.harness import Limits, solve
from solver.agent.transcript import Transcript
from solver.models.scripted import ScriptedModel, think_and_call
from tests.reliability.conftest import Recorder
from tests.support.sandbox_support import HAVE_BWRAP, host_repo, running_sandbox

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

NAMED_EXIT_REASONS = {"tests_passed", "agent", "max_turns", "max_context_len",
                      "max_tokens_per_turn", "llm_query_error", "turn_timeout", "tool_error",
                      "cancelled", "max_time", "max_rounds", "setup_failed"}
CALL = think_and_call("Let me look.", "Bash", command="ls")
MARK = "echo ran >> RAN"  # every command that could run leaves a line
GARBAGE: dict[str, str] = {
    "unclosed tags": "Let me look.\n</think>\n\n<tool_call>\n<function=Bash>\n"
                     f"<parameter=command>\nls -la; {MARK}\n",
    "unclosed think": "I keep thinking <think> and never stop",
    "non-UTF-8 bytes": "r\udcff\udcfe\x00\x1b[31m\n</think>\n\n"
                       + CALL.split("</think>\n\n", 1)[1].replace(
                           "ls", f"printf '\\377\\376'; {MARK}"),
    "8,000 tokens of nothing": " " * 32_000,
    "unknown tool": think_and_call("Use my own tool.", "Exfiltrate", url="http://x"),
    "wrong argument types": CALL.replace("<parameter=command>\nls\n</parameter>",
                                         f"<parameter=command>\n{MARK}\n</parameter>\n"
                                         "<parameter=timeout>\nsoon\n</parameter>"),
    "wrong argument types (Read)": think_and_call("Read it.", "Read", file_path=["a", "b"],
                                                  offset="first", limit=-5),
    "tool call inside <think>": "I will call <tool_call>\n<function=Bash>\n<parameter=command>"
                                f"\n{MARK}\n</parameter>\n</function>\n</tool_call> now.\n"
                                "</think>\n\nDone.",
    "nested and duplicated tags": "x\n</think>\n\n<tool_call><tool_call>\n<function=Bash>\n"
                                  f"<function=Read>\n<parameter=command>\n{MARK}\n</parameter>"
                                  "</function></tool_call></tool_call></think>",
    "call in prose": f"x\n</think>\n\nI would write <tool_call> here and run {MARK}.",
}
# Commands that run per turn; every other kind runs none.
RUNS_PER_TURN = {"unclosed tags": 1, "non-UTF-8 bytes": 1}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_model_garbage_ends_with_a_named_reason(kind: str, tmp_path: Path,
                                                scorecard: Recorder) -> None:
    slug = "".join(c if c.isalnum() else "-" for c in kind.lower()).strip("-")
    record = scorecard(f"8-model-garbage-{slug}", f"Model garbage: {kind}",
                       "the run ends with a named exit reason and a complete transcript; an "
                       "unclosed call runs as vLLM's parser reads it (as in training); a "
                       "call in <think> or prose, an unknown tool or unusable arguments "
                       "run nothing")
    path = tmp_path / "transcript.jsonl"
    started = time.monotonic()
    with running_sandbox("bubblewrap") as sandbox, Transcript(path) as transcript:
        result = solve(ScriptedModel([GARBAGE[kind]] * 3), sandbox, "Fix it.",
                       "test -f FIXED", transcript, repo=host_repo(sandbox),
                       limits=Limits(max_steps=3, max_rounds=1, max_seconds=60))
        ran_file = sandbox.config.workspace / "RAN"  # type: ignore[attr-defined]
        ran = len(ran_file.read_text().splitlines()) if ran_file.exists() else 0
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    turns = [r for r in records if r["kind"] == "turn"]
    record.observed = {"exit reason": result.exit_reason, "turns": len(turns),
                       "parse errors": sum(len(t.get("parse_errors") or []) for t in turns),
                       "commands run": ran,
                       "transcript records": len(records),
                       "seconds": time.monotonic() - started}
    assert result.exit_reason in NAMED_EXIT_REASONS
    assert records[0]["kind"] == "run" and records[-1]["kind"] == "result"
    assert records[-1]["exit_reason"] == result.exit_reason
    assert ran == RUNS_PER_TURN.get(kind, 0) * len(turns), (ran, len(turns))
