"""bot/inert.py's two rules where each output meets them: plain-text fields on GitHub
(the commit message, the PR title), log lines (JSON and plain) and the dashboard's
templates. The attacks through the whole stack and a real pty are in
tests/reliability/test_hostile_text.py."""

from __future__ import annotations

import io
import json
import logging

import pytest

from bot.dashboard import _environment
from bot.inert import ZWSP, neutralize, plain_line, visible
from bot.logs import JsonFormatter, TextFormatter
from bot.messages import commit_message, pull_title
from tests.reliability.test_hostile_text import HOSTILE_TITLE, plain_live

ESCAPES = "\x1b]52;c;ZXZpbA==\x07\x1b[2K\u202eevil\u2066\x9b31m\x00"


def test_visible_shows_every_control_and_keeps_lines() -> None:
    shown = visible(f"a\tb\n{ESCAPES}")
    assert shown == "a\tb\n\\x1b]52;c;ZXZpbA==\\x07\\x1b[2K\\x202eevil\\x2066\\x9b31m\\x00"
    assert visible("tab\tline\n", keep="") == "tab\\x09line\\x0a"


@pytest.mark.parametrize("text", [HOSTILE_TITLE, "Fixes: #3", "fix#3", "closes GH-2",
                                  "resolved https://github.com/o/r/pull/4",
                                  "see deadbeefcafe and o/r@1234567"])
def test_neutralize_leaves_nothing_github_links_and_is_stable(text: str) -> None:
    once = neutralize(text)
    assert plain_live(once) == {}, once
    assert neutralize(once) == once
    assert once.replace(ZWSP, "") == text  # only invisible spaces were added


def test_the_bots_own_fixes_line_stays_live() -> None:
    message = commit_message(HOSTILE_TITLE, 12, "pytest -k 'closes #3 @octocat'", "run")
    assert plain_live(message) == {"closing keyword": ["Fixes #12"], "reference": ["#12"]}
    assert plain_live(pull_title(HOSTILE_TITLE)) == {}
    assert pull_title(f"x{ESCAPES}\ny") == "[FrogNano] " + plain_line(f"x{ESCAPES} y")
    assert "\x1b" not in pull_title(ESCAPES)


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord({"msg": "%s", "args": (message,), "levelname": "WARNING",
                                    "name": "t", **extra})
    return record


def test_log_lines_carry_no_control_character_even_decoded() -> None:
    line = JsonFormatter().format(_record(ESCAPES, title=ESCAPES))
    decoded = json.loads(line)
    assert decoded["message"] == visible(ESCAPES) and decoded["title"] == visible(ESCAPES)
    assert "\x1b" not in TextFormatter().format(_record(ESCAPES))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.emit(_record(f"model said {ESCAPES}"))
    assert stream.getvalue() == f"WARNING: model said {visible(ESCAPES)}\n"


def test_the_dashboard_shows_controls_and_still_escapes_html() -> None:
    page = _environment().from_string("<pre>{{ text }}</pre>{{ own|safe }}").render(
        text=f"<b>{ESCAPES}</b>", own="<i>ours</i>")
    assert "\x1b" not in page and "\u202e" not in page and "\x9b" not in page
    assert "&lt;b&gt;\\x1b]52" in page and page.endswith("<i>ours</i>")
