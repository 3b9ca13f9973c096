"""GitHub's 65,536-character limit on a body (a 422 above it, and then no PR at all): the
PR body shows at most so much of each list, and what is sent is cut at a whole line, an
open fence closed, with a line that says so (bot/markdown.py's `fit_body`)."""

from __future__ import annotations

from bot.markdown import CUT_NOTICE, GITHUB_BODY_LIMIT, fence, fit_body
from bot.messages import MAX_CHANGED_TESTS, failure_comment, pr_body
from tests.unit.bot.test_markdown_safety import EVIL, FENCE_BREAK, live, tokens
from tests.unit.bot.test_messages import report

# A fix in a function every test uses: five thousand tests go from failed to passed.
FLIPPED = [f"tests/test_core.py::test_case[{n}]: failed → passed" for n in range(5000)]


def test_a_body_that_fits_is_sent_as_it_is() -> None:
    body = pr_body(report())
    assert fit_body(body) == body


def test_thousands_of_flipped_tests_fit_with_the_sections_after_them() -> None:
    body = pr_body(report(changed_tests=FLIPPED, test_files_changed=[
        f"tests/test_{n}.py" for n in range(400)]))
    assert len(body) < GITHUB_BODY_LIMIT // 4, len(body)
    assert "`tests/test_core.py::test_case[49]`: failed → passed" in body
    assert "test_case[50]" not in body
    assert f"- … and {5000 - MAX_CHANGED_TESTS} more (the run page and the transcript list " \
        "every one)" in body
    assert "`tests/test_19.py`, … and 380 more" in body and "test_20.py" not in body
    # What comes after the lists is all there: how to reproduce, the cautions, the run.
    for heading in ("## Reproduce", "## Cautions", "## Run", "## Review checklist"):
        assert heading in body


def test_a_long_inferred_setup_command_is_shown_cut() -> None:
    command = "python3 -m venv v && v/bin/python -m pip install " + " ".join(
        f"package-{n}" for n in range(3000))
    body = pr_body(report(setup_command=command, setup_note="inferred (no `setup:` given)"))
    assert f"… ({len(command)} characters in all)" in body
    assert "package-2999" not in body and len(body) < GITHUB_BODY_LIMIT // 4


def test_an_over_long_body_is_cut_at_a_line_and_its_open_fence_closed() -> None:
    # Test output of a hostile repository in a fence, far over the limit: the cut lands
    # inside the fence, whose content must stay code (the failure comment bounds its own
    # tail already, and fits as it is).
    output = (FENCE_BREAK * 4000)[:200_000]
    comment = failure_comment(report(final_output=output, exit_reason="max_rounds"))
    assert fit_body(comment) == comment
    body = fit_body("intro line\n\n" + fence(output) + "\n\nafter the fence")
    assert len(body) <= GITHUB_BODY_LIMIT and body.endswith("\n\n" + CUT_NOTICE)
    assert "after the fence" not in body
    [code] = [t for t in tokens(body) if t.type == "fence"]
    assert code.content.startswith("E   assert 1 == 2\n````\n")
    # The notice is text after the fence: the fence was closed before it.
    assert [t.content for t in tokens(body) if t.type == "inline"][-1] == CUT_NOTICE
    assert live(body) == {}


def test_a_cut_never_lands_inside_a_line() -> None:
    lines = [f"- `code {n} ![x]({EVIL})` and text" for n in range(4000)]
    body = fit_body("\n".join(lines), limit=10_000)
    kept = body.split("\n")[:-2]
    assert kept == lines[:len(kept)] and len(body) <= 10_000
    assert "image" not in live(body)
