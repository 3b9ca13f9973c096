"""A fix in a function every test uses, through the bot (the receiver, a Celery worker,
bubblewrap, the fake GitHub, which refuses a body over 65,536 characters as GitHub does):
three thousand tests go from failed to passed, and the draft PR still opens, listing the
first of them and the count of the rest, with every section after the list."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.markdown import GITHUB_BODY_LIMIT
from bot.messages import MAX_CHANGED_TESTS
from solver.models.scripted import final_answer
from tests.reliability.stack import FIX_CALC, OWNER, StackOptions, running_stack, wait_for
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
CASES = 3000
MANY = ("import pytest\n\nfrom calc import add\n\n\n"
        f"@pytest.mark.parametrize('n', range({CASES}))\n"
        "def test_add_one_to_each_number_up_to_three_thousand(n):\n"
        "    assert add(n, 1) == n + 1\n")


def test_three_thousand_flipped_tests_still_open_the_pr(tmp_path: Path) -> None:
    script = [FIX_CALC, final_answer("Fixed `add` to return the sum.")]
    with running_stack(tmp_path / "stack", StackOptions(script)) as stack:
        stack.add_calc_repo("calc", {"tests/test_many.py": MANY})
        assert stack.label("calc", 1).status_code == 202
        [pull] = wait_for(lambda: stack.fake.pulls(OWNER, "calc"), timeout=300,
                          message="a draft PR")
    body = pull.body
    assert len(body) < GITHUB_BODY_LIMIT, len(body)
    # The calculator's own test of add flips too: CASES + 1 in all, MAX_CHANGED_TESTS shown.
    listed = [line for line in body.splitlines()
              if line.startswith("- `tests/") and line.endswith("`: failed → passed")]
    assert len(listed) == MAX_CHANGED_TESTS, listed[:3]
    more = CASES + 1 - MAX_CHANGED_TESTS
    assert f"- … and {more} more (the run page and the transcript list every one)" in body
    for heading in ("## Reproduce", "## Cautions", "## Run", "## Review checklist"):
        assert heading in body
