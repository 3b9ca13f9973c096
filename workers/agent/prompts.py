"""The texts the harness puts in front of the model.

The system prompt is Leaf's, byte for byte (docs/LEAF_CONTRACT.md §1); the task and
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


def verdict_feedback_message(test_command: str, reasons: list[str], output: str,
                             attempt: int, attempts_left: int) -> str:
    """The user message sent when the harness's verdict refused the change."""
    tail = output[-FEEDBACK_OUTPUT_CHARS:]
    if len(output) > len(tail):
        tail = f"[... {len(output) - len(tail)} earlier chars omitted]\n" + tail
    listed = "\n".join(f"- {reason}" for reason in reasons)
    return (
        f"The harness ran `{test_command}` after your changes, with the repository's "
        "original test files and test configuration, and did not accept the result:\n"
        f"{listed}\n\n"
        "Only the repository's own tests count: edits to test files, conftest.py or the "
        "pytest configuration are kept in the change but not used to judge it.\n\n"
        f"{tail.rstrip()}\n\n"
        f"Fix the code so the original tests pass (attempt {attempt + 1}; "
        f"{attempts_left} left after this one)."
    )


SETUP_HINT = (
    "If the tests need the project installed or other packages, say how in "
    ".github/frognano.yml, e.g.\n"
    "  setup: python3 -m venv --system-site-packages /frognano/venv && "
    "/frognano/venv/bin/pip install -e '.[test]'\n"
    "  test: python -m pytest -q"
)


def baseline_unusable_message(problem: str, output: str, tail_chars: int = 1500) -> str:
    """Why the run stopped before the agent: the baseline is no baseline."""
    tail = output.strip()[-tail_chars:]
    return (f"the baseline cannot judge a fix: {problem}. Nothing was given to the model.\n"
            f"{SETUP_HINT}" + (f"\n\nTail of the baseline run:\n{tail}" if tail else ""))

