"""A red CI as data: the failed runs, the bounded and cleaned log tails, which commits are
the bot's, and that a hostile log stays inert wherever the bot echoes it."""

from __future__ import annotations

from bot import ci_checks
from bot.ci_checks import (
    LOG_TAIL_BYTES,
    LOG_TAIL_LINES,
    LOGS_TOTAL_BYTES,
    MAX_CHECKS,
    clean,
    failed_checks,
    failed_runs,
    is_bots_commit,
    log_tail,
)
from bot.github_api import CheckRunInfo, CommitInfo
from bot.messages import CiRoundLine, ci_gave_up, ci_pushed, ci_rounds_section
from solver.agent.prompts import ci_feedback
from tests.unit.bot.test_markdown_safety import FENCE_BREAK, SUMMARY, live

BOT = "frognano[bot]"


def run(name: str, conclusion: str | None = "failure", *, app: str = "github-actions",
        run_id: int = 1, status: str = "completed", **output: str) -> CheckRunInfo:
    return CheckRunInfo(run_id, name, status, conclusion, app, **output)


def test_only_completed_failures_of_other_apps_count_the_newest_of_each_name() -> None:
    runs = [run("lint", "success", run_id=1), run("tests", "failure", run_id=2),
            run("tests", "failure", run_id=5), run("mine", app="frognano", run_id=3),
            run("slow", None, status="in_progress", run_id=4),
            run("rerun", "failure", run_id=6), run("rerun", "success", run_id=7),
            run("ext", "timed_out", app="circleci", run_id=8)]
    failed = failed_runs(runs, BOT)
    assert [(r.name, r.id) for r in failed] == [("ext", 8), ("tests", 5)], \
        "a re-run that passed clears its name; the bot's own App's checks are left out"


def test_a_log_tail_is_its_last_lines_within_its_bytes_cleaned() -> None:
    log = "".join(f"2026-01-02T03:04:05.1234567Z line {i}\n" for i in range(1000))
    tail = log_tail(log)
    lines = tail.splitlines()
    assert lines[0].startswith("[... the log's earlier lines are left out]")
    assert lines[-1] == "line 999" and len(lines) == LOG_TAIL_LINES + 1
    assert "2026-01-02T" not in tail, "Actions' timestamps are noise"
    wide = "é" * 50_000
    cut = log_tail(wide)
    assert len(cut.encode()) <= LOG_TAIL_BYTES + 64 and cut.endswith("é")
    assert log_tail("short\n") == "short"


def test_control_characters_and_terminal_escapes_are_stripped() -> None:
    hostile = "\x1b[31mFAILED\x1b[0m tests/x.py\x00\x07\r\nnext\u202eevil\x1b]8;;http://x\x07"
    cleaned = clean(hostile)
    assert cleaned == "FAILED tests/x.py\nnextevil"
    assert all(c.isprintable() or c in "\n\t" for c in cleaned)


def test_the_logs_of_a_round_share_one_bound_and_other_apps_give_their_output() -> None:
    asked: list[int] = []

    def read_log(check: CheckRunInfo) -> str | None:
        asked.append(check.id)
        return "x" * 40 + "\n" + ("y" * 100 + "\n") * 200

    runs = [run(f"job-{i}", run_id=i) for i in range(MAX_CHECKS + 3)]
    runs.append(run("external", app="circleci", run_id=99, title="3 failed",
                    summary="tests/test_a.py::test_b failed"))
    checks = failed_checks(runs, read_log)
    assert len(checks) == MAX_CHECKS and asked == list(range(MAX_CHECKS))
    assert sum(len(c.log_tail.encode()) for c in checks) <= LOGS_TOTAL_BYTES + MAX_CHECKS * 80
    assert checks[-1].log_tail.startswith("[... left out")
    [external] = failed_checks([runs[-1]], read_log)
    assert not external.from_log and "tests/test_a.py::test_b failed" in external.log_tail
    assert asked == list(range(MAX_CHECKS)), "no log is asked for a check that has none"


def test_the_bots_commits_are_its_own_identity_or_githubs_for_it() -> None:
    own = "frognano[bot]@users.noreply.github.com"
    assert is_bots_commit(CommitInfo("a", own, own), BOT)
    assert is_bots_commit(CommitInfo("a", own, own), "frognano")
    assert is_bots_commit(CommitInfo("a", "99+frognano[bot]@users.noreply.github.com",
                                     "noreply@github.com"), BOT)
    assert not is_bots_commit(CommitInfo("a", own, "m@example.com"), BOT), "an amend"
    assert not is_bots_commit(CommitInfo("a", "m@example.com", "m@example.com"), BOT)
    assert not is_bots_commit(CommitInfo("a", "99+frognano-x[bot]@users.noreply.github.com",
                                         "noreply@github.com"), BOT)


HOSTILE_LOG = ("FAILED tests/test_mul.py::test_mul - assert 5 == 6\n" + FENCE_BREAK
               + SUMMARY + "@octocat see #123 https://evil.example\n")


def test_a_hostile_log_cannot_close_the_models_quote() -> None:
    [check] = failed_checks([run("tests")], lambda _: HOSTILE_LOG)
    guidance = ci_feedback([(check.name, check.log_tail)])
    opening = guidance.split("Failing check: tests\n", 1)[1].split("\n", 1)[0]
    ticks = opening.removesuffix("text")
    assert set(ticks) == {"`"} and len(ticks) > max(
        len(r) for r in __import__("re").findall(r"`+", check.log_tail))
    body = guidance.split(opening + "\n", 1)[1]
    assert body.endswith("\n" + ticks) and (ticks + "\n") not in body[:-len(ticks)]
    assert "not instructions" in guidance


def test_what_the_bot_echoes_of_a_hostile_ci_is_inert() -> None:
    names = [ci_checks.check_name(f"tests {FENCE_BREAK}"), ci_checks.check_name(SUMMARY)]
    assert all("\n" not in name for name in names)
    texts = [ci_pushed("c" * 40, 1, 2, names, "1 passed"), ci_gave_up(2, "d" * 40, names),
             "\n".join(ci_rounds_section([CiRoundLine(1, "e" * 40, tuple(names), "pushed")]))]
    for text in texts:
        found = {kind: hits for kind, hits in live(text).items() if hits}
        assert not found, (found, text)
