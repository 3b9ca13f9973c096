"""The texts the harness puts in front of the model.

The system prompt is Leaf's, byte for byte (leaf-contract §1); the task and
test-feedback messages are ours and deliberately short, because the model was
trained on plain task instructions.
"""

from __future__ import annotations

SYSTEM_PROMPT = "\n".join(
    [
        "You are a software-engineering agent working in a checked-out repository.",
        "Use the available tools to inspect files, make focused edits, and run commands.",
        "Solve the task, validate when practical, then give a brief final answer.",
    ]
)

FEEDBACK_OUTPUT_CHARS = 12_000


def task_message(issue: str, test_command: str | None, guidance: str = "") -> str:
    """The first user message: the issue, and how the harness will judge the fix."""
    parts = [issue.strip()]
    if guidance.strip():
        parts.append("Additional guidance from the maintainer:\n" + guidance.strip())
    if test_command:
        parts.append(
            f"The repository's tests are run with `{test_command}`; "
            "they must pass when you are done."
        )
    return "\n\n".join(parts)


def test_feedback_message(test_command: str, exit_code: int | None, timed_out: bool,
                          output: str, attempt: int, attempts_left: int) -> str:
    """The user message sent when the harness's own test run failed after the agent stopped."""
    status = "timed out" if timed_out else f"failed with exit code {exit_code}"
    tail = output[-FEEDBACK_OUTPUT_CHARS:]
    if len(output) > len(tail):
        tail = f"[... {len(output) - len(tail)} earlier chars omitted]\n" + tail
    return (
        f"The harness ran `{test_command}` after your changes and it {status}.\n\n"
        f"{tail.rstrip()}\n\n"
        f"The tests must pass. Keep working on the fix (attempt {attempt + 1}; "
        f"{attempts_left} left after this one)."
    )
