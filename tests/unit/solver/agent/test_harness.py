"""The inner loop and the outer test loop, on a real sandbox and the scripted model.

Every exit reason of docs/LEAF_CONTRACT.md §4 is reached for real, and every run leaves a
transcript that ends with its reason.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sandbox import SandboxConfig, open_sandbox
from sandbox.base import Sandbox
from solver.agent.harness import Limits, SolveResult, solve
from solver.agent.prompts import SYSTEM_PROMPT
from solver.agent.transcript import Transcript, read_transcript
from solver.hostgit import HostRepo
from solver.models.base import ModelQueryError
from solver.models.scripted import ScriptedModel, final_answer, think_and_call, think_and_calls
from solver.verdict.repo_tests import PYTEST_COMMAND
from tests.conftest import make_repo
from tests.support.sandbox_support import BACKENDS, reachable_dir

BACKEND = BACKENDS[-1]  # bubblewrap where installed
FIX = think_and_call("Fix the sign.", "Edit", file_path="calc.py",
                     old_string="return a - b", new_string="return a + b")


@contextmanager
def calc_sandbox() -> Iterator[tuple[Sandbox, Path, HostRepo]]:
    with reachable_dir() as root:
        source = make_repo(root / "src", template="calc_repo")
        host = HostRepo.create(source, None, root / "run" / "git", root / "run" / "ws")
        config = SandboxConfig(workspace=host.work_tree, private_dir=root / "run" / "private")
        with open_sandbox(BACKEND, config) as sandbox:
            yield sandbox, host.work_tree, host


def run(script: list[Any], tmp_path: Path, **limits: Any) -> tuple[SolveResult, list[dict]]:
    model = ScriptedModel(script)
    path = tmp_path / "t.jsonl"
    with calc_sandbox() as (sandbox, _, host), Transcript(path) as transcript:
        result = solve(model, sandbox, "add() is broken", PYTEST_COMMAND, transcript,
                       repo=host, limits=Limits(**limits))
    records = read_transcript(path)
    assert records[-1]["kind"] == "result"
    assert records[-1]["exit_reason"] == result.exit_reason
    return result, records


def test_first_messages_are_leafs_system_prompt_and_the_task(tmp_path: Path) -> None:
    model = ScriptedModel([FIX])
    with calc_sandbox() as (sandbox, _, host), Transcript(tmp_path / "t.jsonl") as transcript:
        result = solve(model, sandbox, "add() is broken", PYTEST_COMMAND, transcript,
                       repo=host)
    first = model.requests[0]
    assert first[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert first[1]["role"] == "user" and first[1]["content"].startswith("add() is broken")
    assert PYTEST_COMMAND in first[1]["content"]
    assert result.exit_reason == "tests_passed" and result.rounds == 1
    # The second request carries the assistant turn and the tool result with its call id.
    second = model.requests[1]
    assert second[2]["role"] == "assistant" and second[2]["tool_calls"][0]["id"] == "call_1"
    assert second[3] == {"role": "tool", "tool_call_id": "call_1",
                         "content": "Edited calc.py (1 replacement)."}


def test_failing_tests_go_back_to_the_model_until_they_pass(tmp_path: Path) -> None:
    def fix_after_feedback(messages: list[dict[str, Any]]) -> str:
        feedback = messages[-1]
        assert feedback["role"] == "user"
        assert "do not pass:\n- tests/test_calc.py::test_add" in feedback["content"]
        return think_and_call("Multiplication was wrong.", "Edit", file_path="calc.py",
                              old_string="return a * b\n\n\ndef mul",
                              new_string="return a + b\n\n\ndef mul")

    wrong = think_and_call("Try this.", "Edit", file_path="calc.py",
                           old_string="return a - b", new_string="return a * b")
    result, records = run([wrong, final_answer("Done."), fix_after_feedback,
                           final_answer("Now done.")], tmp_path)
    assert result.exit_reason == "tests_passed"
    assert result.rounds == 2 and result.steps == 4
    assert [r["kind"] for r in records].count("tests") == 2
    assert [r["kind"] for r in records].count("feedback") == 1
    assert result.baseline is not None and not result.baseline.passed
    assert result.final is not None and result.final.passed


def test_several_calls_in_one_turn_run_in_order(tmp_path: Path) -> None:
    turn = think_and_calls("Write then read.", [
        ("Write", {"file_path": "notes/a.txt", "content": "one\ntwo"}),
        ("Read", {"file_path": "notes/a.txt"}),
        ("Bash", {"command": "cat notes/a.txt | wc -l"}),
    ])
    result, records = run([turn, FIX], tmp_path)
    observations = [o["output"] for o in records[2]["observations"]]
    assert observations == ["Wrote notes/a.txt (7 bytes).", "notes/a.txt\n1. one\n2. two",
                            "Exit code: 0\nSTDOUT:\n1\n\nSTDERR:\n"]
    assert result.exit_reason == "tests_passed"
    assert "notes/a.txt" in result.diff


def test_malformed_calls_become_observations_and_the_turn_goes_on(tmp_path: Path) -> None:
    garbage = "Hmm.\n</think>\n\n<tool_call>\nnot xml at all\n</tool_call>"
    unknown = think_and_call("Delete it.", "Delete", file_path="calc.py")
    wrong_type = think_and_call("Read from line abc.", "Read", file_path="calc.py",
                                offset="abc")
    missing = think_and_call("Edit without a path.", "Edit", old_string="a", new_string="b")
    result, records = run([garbage, unknown, wrong_type, missing, FIX], tmp_path)
    turns = [r for r in records if r["kind"] == "turn"]
    # A <tool_call> that is not a call runs nothing (vLLM's qwen3_coder reading): the
    # turn is an answer, the harness's verdict refuses it and the model goes on.
    assert turns[0]["tool_calls"] == [] and turns[0]["observations"] == []
    outputs = [t["observations"][0]["output"] for t in turns[1:4]]
    assert outputs[0] == "Unknown tool: Delete"
    assert outputs[1] == "ValueError: invalid literal for int() with base 10: 'abc'"
    assert outputs[2] == "ValueError: file_path is required"
    assert result.exit_reason == "tests_passed" and result.rounds == 2


def test_runaway_output_is_cut_in_leafs_shape(tmp_path: Path) -> None:
    flood = think_and_call("Print a lot.", "Bash", command="yes | head -c 50000000")
    _, records = run([flood, FIX], tmp_path)
    output = records[2]["observations"][0]["output"]
    assert len(output) < 30_100
    assert output.startswith("Exit code: 0\nSTDOUT:\ny\ny\n")
    assert "\n[truncated " in output


@pytest.mark.parametrize(
    ("script", "limits", "reason"),
    [
        ([think_and_call("Look.", "Bash", command="true")] * 5, {"max_steps": 2}, "max_turns"),
        ([ModelQueryError("endpoint down")], {}, "llm_query_error"),
        (["x" * 400], {"max_tokens_per_turn": 10, "max_rounds": 1}, "max_tokens_per_turn"),
        ([think_and_call("Look.", "Read", file_path="calc.py")], {"max_context_tokens": 50},
         "max_context_len"),
        # The wall time counts from the run's start, baseline included: room for a loaded
        # machine's baseline, so the turn that outlasts it is the one the limit ends.
        ([think_and_call("Wait.", "Bash", command="sleep 15")], {"max_seconds": 6},
         "max_time"),
    ],
)
def test_each_limit_ends_the_run_with_its_name(script: list[Any], limits: dict[str, Any],
                                               reason: str, tmp_path: Path) -> None:
    result, records = run(script, tmp_path, **limits)
    assert result.exit_reason == reason
    assert not result.tests_passed
    if reason != "llm_query_error":
        assert records[2]["kind"] == "turn"
    else:
        assert records[2]["kind"] == "error" and "endpoint down" in records[2]["error"]


def test_cancelled_between_steps(tmp_path: Path) -> None:
    model = ScriptedModel([think_and_call("Look.", "Bash", command="true")] * 3)
    with calc_sandbox() as (sandbox, _, host), Transcript(tmp_path / "t.jsonl") as transcript:
        result = solve(model, sandbox, "x", PYTEST_COMMAND, transcript, repo=host,
                       should_stop=lambda: len(model.requests) >= 1)
    assert result.exit_reason == "cancelled" and result.steps == 1


def test_sandbox_that_cannot_come_back_ends_with_tool_error(tmp_path: Path) -> None:
    kill_runner = think_and_call("Oops.", "Bash", command="kill -9 $PPID")

    with calc_sandbox() as (sandbox, workspace, host), \
            Transcript(tmp_path / "t.jsonl") as transcript:
        def break_the_host(messages: list[dict[str, Any]]) -> str:
            shutil.rmtree(workspace)  # the restart has nothing to bind now
            return think_and_call("Again.", "Bash", command="true")

        result = solve(ScriptedModel([kill_runner, break_the_host]), sandbox, "x",
                       PYTEST_COMMAND, transcript, repo=host,
                       limits=Limits(test_timeout=10))
    assert result.exit_reason == "tool_error"
    assert "sandbox" in result.error.lower()


def test_a_failed_setup_raises_no_start_up_hook_alarm(tmp_path: Path) -> None:
    """Issue 19 §4: setup made the venv (pip's and setuptools' own `.pth` files), then
    failed. No agent phase ran, so nothing can have changed its hooks; the alarm compared
    the venv with a copy that a failed setup never takes."""
    venv = '"${HOME%/home}/venv"'
    with calc_sandbox() as (sandbox, _, host), Transcript(tmp_path / "t.jsonl") as out:
        result = solve(ScriptedModel([FIX]), sandbox, "add() is broken", PYTEST_COMMAND,
                       out, repo=host,
                       setup_command=f"python3 -m venv {venv} && ls {venv}/lib/*/site-packages"
                                     " && exit 3")
    records = read_transcript(tmp_path / "t.jsonl")
    setup = next(r for r in records if r["kind"] == "setup")
    assert result.exit_reason == "setup_failed" and setup["exit_code"] == 3
    assert ".pth" in setup["output_tail"] or "pip" in setup["output_tail"], setup
    assert not [w for w in result.suspicious if "start-up hook" in w], result.suspicious
