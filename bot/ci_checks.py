"""A red CI on the bot's PR as plain data: which commits are the bot's, which check runs
failed, and the bounded, cleaned tail of each failed check's log (issue 23 §2).

Sans-I/O: the worker (workers/ci_repair.py) fetches check runs and logs through
`GitHubApi` and hands them here. A CI log is hostile input like issue text: the model
gets only its tail, without control characters, as quoted text; whatever of it the bot
echoes to GitHub goes through bot/markdown.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bot.github_api import CheckRunInfo, CommitInfo
from bot.inert import visible
from solver.policy import bot_identity

# The bounds on what of the CI logs reaches the model (docs/ON_GITHUB.md says them): the
# last LOG_TAIL_LINES lines of each failed check, at most LOG_TAIL_BYTES of them, and
# LOGS_TOTAL_BYTES over every check of the round; at most MAX_CHECKS checks are listed.
# A job's log is read from its end: at most LOG_DOWNLOAD_BYTES of it are kept while
# downloading (a 1 GB log costs the download, never the memory).
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 6_000
LOGS_TOTAL_BYTES = 16_000
MAX_CHECKS = 8
LOG_DOWNLOAD_BYTES = 256 * 1024
CHECK_NAME_CHARS = 120
# The conclusions that mean the code failed a check; `cancelled`, `skipped`, `neutral`,
# `stale` and `action_required` say nothing about the change.
FAILED = frozenset({"failure", "timed_out", "startup_failure"})
ACTIONS_APP = "github-actions"
# GitHub's own committer on commits it signs (the bot's commits made through the Git
# Data API, bot/git_data.py).
GITHUB_COMMITTER = "noreply@github.com"
# Actions prefixes each log line with a timestamp: noise to the model, and bytes.
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ?", re.MULTILINE)
# C0 controls but tab and newline, DEL, C1 controls, and the bidi and zero-width marks.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069"
                      "\ufeff]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


@dataclass(frozen=True)
class FailedCheck:
    """One failed check of a round: its name (untrusted, one line, bounded), its app and
    the bounded tail of its log (or of its output summary when it has no log)."""

    name: str
    app: str
    log_tail: str
    from_log: bool  # an Actions job's log; False: the check run's own output text


def bot_commit_emails(bot_login: str) -> tuple[str, ...]:
    """The author emails of the bot's commits: the one it commits with on the host
    (solver.policy.bot_identity) and GitHub's `<id>+<login>@users.noreply.github.com`
    for the commits GitHub makes for it."""
    login = bot_login if bot_login.casefold().endswith("[bot]") else bot_login + "[bot]"
    return (bot_identity(login)[1].casefold(),)


def is_bots_email(email: str, bot_login: str) -> bool:
    login = bot_login if bot_login.casefold().endswith("[bot]") else bot_login + "[bot]"
    folded = email.casefold()
    return folded in bot_commit_emails(bot_login) or re.fullmatch(
        r"\d+\+" + re.escape(login.casefold()) + r"@users\.noreply\.github\.com",
        folded) is not None


def is_bots_commit(commit: CommitInfo, bot_login: str) -> bool:
    """Whether the bot wrote and committed it; a person's amend or rebase makes them the
    committer, so it is not (GitHub itself commits what it signs for the bot)."""
    return is_bots_email(commit.author_email, bot_login) and (
        is_bots_email(commit.committer_email, bot_login)
        or commit.committer_email.casefold() == GITHUB_COMMITTER)


def failed_runs(runs: Iterable[CheckRunInfo], bot_login: str) -> list[CheckRunInfo]:
    """The completed, failed check runs, the bot's own App's left out, by name, once each
    (a re-run check keeps its name: the newest, highest id, counts)."""
    own = bot_login.casefold().removesuffix("[bot]")
    newest: dict[str, CheckRunInfo] = {}
    for run in runs:
        if run.app_slug.casefold() == own:
            continue
        if run.name not in newest or run.id > newest[run.name].id:
            newest[run.name] = run
    return sorted((r for r in newest.values()
                   if r.status == "completed" and r.conclusion in FAILED),
                  key=lambda r: r.name)


def clean(text: str) -> str:
    """`text` without terminal escapes, control characters (tab and newline kept) and
    Actions' timestamps; carriage returns end lines."""
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return _TIMESTAMP.sub("", _CONTROL.sub("", text))


def log_tail(text: str, *, lines: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_BYTES
             ) -> str:
    """The last `lines` lines of the cleaned `text`, cut to its last `max_bytes` bytes of
    UTF-8 (at a character), with a note of what was left out."""
    kept = clean(text).rstrip("\n").split("\n")
    dropped_lines = max(0, len(kept) - lines)
    tail = "\n".join(kept[-lines:])
    encoded = tail.encode()
    if len(encoded) > max_bytes:
        tail = encoded[-max_bytes:].decode("utf-8", errors="ignore")
        tail = tail.split("\n", 1)[-1] if "\n" in tail else tail
    if dropped_lines or len(encoded) > max_bytes:
        tail = "[... the log's earlier lines are left out]\n" + tail
    return tail


def check_name(name: str) -> str:
    """A check's name as one bounded line (names are set by the workflow: untrusted)."""
    one_line = " ".join(visible(clean(name)).split())
    return one_line[:CHECK_NAME_CHARS] or "(unnamed check)"


def failed_checks(runs: list[CheckRunInfo], read_log: Callable[[CheckRunInfo], str | None],
                  *, total_bytes: int = LOGS_TOTAL_BYTES) -> list[FailedCheck]:
    """Each failed run with the tail of its log: an Actions job's log (`read_log`), else
    its output's title, summary and text. The tails share `total_bytes`: later checks get
    what the earlier ones left, and at most MAX_CHECKS are kept."""
    checks: list[FailedCheck] = []
    left = total_bytes
    for run in runs[:MAX_CHECKS]:
        log = read_log(run) if run.app_slug == ACTIONS_APP else None
        source = log if log is not None else "\n".join(
            part for part in (run.title, run.summary, run.text) if part)
        tail = log_tail(source, max_bytes=max(0, min(LOG_TAIL_BYTES, left))) if left > 0 \
            else "[... left out: the logs of the checks before it used the round's bound]"
        left -= len(tail.encode())
        checks.append(FailedCheck(check_name(run.name), check_name(run.app_slug), tail,
                                  log is not None))
    return checks
