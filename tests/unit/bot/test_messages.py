"""What the bot writes on GitHub (bot/messages.py): the PR body, the failure comment, the
status texts."""

from __future__ import annotations

from typing import get_args

import pytest

from bot.messages import (
    EXIT_REASON_WORDS,
    STATUS_MARKER,
    UNVERIFIED_LABEL,
    ChangedFile,
    ReadFirst,
    RunReport,
    ci_not_repaired,
    failure_comment,
    pr_body,
    status_queued,
    status_running,
)
from solver.agent.loop import ExitReason
from solver.service_report import ServiceLine
from solver.verdict.evidence import (
    MODEL,
    NEW_FEATURE,
    PASSES_ON_BASE,
    REPOSITORY,
    REPRODUCES,
    TestEvidence,
)


def report(**overrides: object) -> RunReport:
    values: dict = dict(
        issue_number=7, exit_reason="tests_passed", test_command="python3 -m pytest",
        baseline_summary="FAIL (exit 1; 1 failed)", final_summary="PASS (exit 0; 2 passed)",
        final_output="E   assert -1 == 5\n" * 400, steps=5, rounds=1, tokens=321,
        seconds=42.4, model="llama-cpp:FrogNano-4B-2609-Q4_K_M.gguf",
        transcript_url="https://bot.example/runs/o/r/7/1",
        changed_tests=["tests/test_calc.py::test_add: failed → passed"],
        summary="Fixed the sign in add().", issue_title="add() subtracts",
        branch="frognano/issue-7",
        changed_files=[ChangedFile("calc.py", 1, 1), ChangedFile("tests/test_calc.py", 6, 0),
                       ChangedFile("logo.png", None, None)])
    values.update(overrides)
    return RunReport(**values)


def test_pr_body_has_what_a_reviewer_needs() -> None:
    body = pr_body(report())
    assert body.startswith("Fixes #7: add() subtracts\n"), "live, with the title"
    for needle in ("Needs human review", "> Fixed the sign in add().",
                   "`python3 -m pytest`", "**CI and secrets:**", "`[skip ci]`",
                   "before: FAIL (exit 1; 1 failed)", "after: PASS (exit 0; 2 passed)",
                   "- `tests/test_calc.py::test_add`: failed → passed",
                   "5 steps, 1 round(s), 321 tokens", "FrogNano-4B-2609-Q4_K_M.gguf",
                   "[transcript](https://bot.example/runs/o/r/7/1)", "- [ ] The tests cover",
                   "adds or edits no test", "**3 files (1 binary), +7 −1**",
                   "- `calc.py` (+1 −1)", "- `tests/test_calc.py` (+6 −0)",
                   "- `logo.png` (binary)"):
        assert needle in body, needle
    flagged = pr_body(report(warnings=["test is now skipped: t", "left out of the change: "
                                       "`vendor/@lib` (a nested git repository)"],
                             test_files_changed=["tests/test_calc.py"],
                             issue_title="`add()` subtracts"))
    assert "⚠️ test is now skipped: t" in flagged
    # Names in backticks are code spans, with no backslash for an e-mail to show.
    assert "- ⚠️ left out of the change: `vendor/@\u200blib` (a nested git repository)" \
        in flagged
    assert flagged.startswith("Fixes #7: `add()` subtracts\n")
    assert "edits or adds tests: `tests/test_calc.py`" in flagged


def test_pr_body_reads_in_the_reviewers_order() -> None:
    """What changed and why → the verdict → how to reproduce → cautions and flags → the
    run; the CI caution is one short alert after the reproduce commands."""
    body = pr_body(report(warnings=["a warning"], read_first=[
        ReadFirst("calc.py", 2, "decides on a test's value", "no test run tells it")]))
    sections = [line for line in body.splitlines() if line.startswith("## ")]
    assert sections == ["## What changed", "## Tests", "## Reproduce", "## Cautions",
                        "## Run", "## Review checklist"]
    order = ["Fixes #7", "Needs human review", "Read this first**, below: 1 line",
             "## What changed", "> Fixed the sign", "**3 files", "## Tests", "before: FAIL",
             "Tests that changed state:", "## Reproduce", "git fetch origin frognano/issue-7",
             "## Cautions", "### ⚠️ Read this first", "`calc.py:2`", "a warning",
             "**CI and secrets:**", "## Run", "[transcript]"]
    where = [body.index(needle) for needle in order]
    assert where == sorted(where), list(zip(order, where, strict=True))
    caution = next(line for line in body.splitlines() if "CI and secrets" in line)
    assert len(caution) < 260, "one short line, not a paragraph"


def test_pr_body_reproduce_commands_are_one_fence_of_the_runs_own_commands() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    body = pr_body(report(test_command="python3 -m pytest -rA -p no:cacheprovider",
                          setup_command="pip install -e .", setup_note="inferred"))
    fences = [t for t in markdown_it.MarkdownIt("commonmark").parse(body) if t.type == "fence"]
    assert [(f.info, f.content) for f in fences] == [(
        "sh", "git fetch origin frognano/issue-7\ngit checkout --detach FETCH_HEAD\n"
              "python3 -m pytest -rA -p no:cacheprovider\n")]
    assert "set the project up first with `pip install -e .`" in body
    # A test command that tries to close the fence stays inside it.
    hostile = pr_body(report(test_command="pytest\n```\n@octocat ![x](https://e.example/p)"))
    fences = [t for t in markdown_it.MarkdownIt("commonmark").parse(hostile)
              if t.type == "fence"]
    assert len(fences) == 1 and "pytest" in fences[0].content
    assert "@octocat" not in fences[0].content


def test_failure_comment_says_in_words_what_happened_and_links_the_run() -> None:
    text = failure_comment(report(
        exit_reason="max_rounds", final_summary="FAIL (exit 1; 1 failed, 1 passed)",
        still_failing=["tests/test_calc.py::test_add", "tests/test_calc.py::test_sub"]))
    headline = text.splitlines()[0]
    assert headline == ("🐸 **FrogNano** did not open a pull request: the model had its last "
                        "round after the test results were fed back to it, and the tests "
                        "still fail (`max_rounds`).")
    assert "- The model changed 3 files (1 binary), +7 −1: `calc.py`, " in text
    assert "- Still failing (2): `tests/test_calc.py::test_add`, " \
           "`tests/test_calc.py::test_sub`." in text
    assert ("[the run's page](https://bot.example/runs/o/r/7/1) and its "
            "[transcript](https://bot.example/runs/o/r/7/1#events)") in text
    assert "/frognano retry" in text
    assert text.count("assert -1 == 5") < 400, "only the tail of the output"
    assert "```\n" in text
    untouched = failure_comment(report(exit_reason="llm_query_error", changed_files=[],
                                       transcript_url=None))
    assert "the model server failed or stopped answering (`llm_query_error`)" in untouched
    assert "- The model changed no file." in untouched and "Still failing" not in untouched
    assert "transcript is kept on the worker" in untouched


def test_every_exit_reason_has_words() -> None:
    """The loop's exit reasons and the harness's own (solver/agent/harness.py)."""
    reasons = set(get_args(ExitReason)) | {"max_rounds", "setup_failed",
                                           "baseline_unusable", "tests_passed"}
    assert reasons <= set(EXIT_REASON_WORDS), reasons - set(EXIT_REASON_WORDS)
    assert "(`gone`)" in failure_comment(report(exit_reason="gone")), "an unknown one: named"
    old = failure_comment(report(exit_reason="max_attempts")).splitlines()[0]
    assert "its last round" in old and "(`max_rounds`)" in old, "a record of before: today's"


def test_status_texts_carry_the_marker() -> None:
    assert status_queued(3, 2).startswith(STATUS_MARKER)
    assert "position 3" in status_queued(3, 2) and "Run 2" in status_queued(3, 2)
    assert "step 4 of 100" in status_running(4, 100, 1)


PG_AND_REDIS = [ServiceLine("postgresql", "15.18", "app", ("DATABASE_URL", "PGHOST")),
                ServiceLine("redis", "7.0.15", "", ("REDIS_URL",))]


def test_pr_body_names_the_services_as_they_ran() -> None:
    """Issue 23 §1: the release each service ran, in the Tests part; none without them."""
    body = pr_body(report(services=PG_AND_REDIS))
    tests = body.split("## Tests")[1].split("## Reproduce")[0]
    assert "- services: PostgreSQL 15.18 (database app), Redis 7.0.15 (fresh in every " \
           "test run's sandbox)\n- before: " in tests, tests
    assert "services:" not in pr_body(report())


def test_failure_comment_names_the_services_that_did_not_start() -> None:
    comment = failure_comment(report(
        exit_reason="services_failed", final_summary="not run", baseline_summary="not run",
        services=[ServiceLine("postgresql", "16", "app", started=False),
                  ServiceLine("redis", "", started=False)]))
    assert comment.startswith("🐸 **FrogNano** did not open a pull request: a test service "
                              "the repository asks for (`services:`) did not start"), comment
    assert "- Services asked for, not started: PostgreSQL 16 (database app), Redis.\n" \
        in comment, comment
    ran = failure_comment(report(exit_reason="agent", services=PG_AND_REDIS))
    assert "- Services: PostgreSQL 15.18 (database app), Redis 7.0.15 (fresh in every test " \
           "run's sandbox).\n" in ran, ran


def test_the_ci_not_repaired_reply_ends_one_sentence_once_and_keeps_the_reason_inert() -> None:
    reply = ci_not_repaired(2, 2, ["tests (3.11)"], "Nothing was pushed. @owner see #4.")
    assert "Nothing was pushed. @\u200bowner see #\u200b4. The branch" in reply, reply
    assert ".." not in reply and "round 2 of 2" in reply and "`tests (3.11)`" in reply, reply


def test_the_pr_body_says_first_which_test_fails_on_the_base_and_passes_with_the_fix() -> None:
    body = pr_body(report(base_branch="main", evidence=[
        TestEvidence("tests/test_calc.py::test_add", REPRODUCES, REPOSITORY,
                     "failed at an assertion"),
        TestEvidence("tests/test_more.py::test_add_big", REPRODUCES, MODEL, "raised KeyError"),
        TestEvidence("tests/test_more.py::test_zero", PASSES_ON_BASE, MODEL, "passed")]))
    first = body.split("Written by FrogNano")[0]
    assert first.startswith("Fixes #7: add() subtracts\n"), "the closing line stays first"
    assert "✅ `tests/test_calc.py::test_add` fails on `main` and passes with this change " \
           "(the repository's own test; on `main` it failed at an assertion)." in first
    assert "✅ `tests/test_more.py::test_add_big` fails on `main` and passes with this " \
           "change (a test this change adds or edits; on `main` it raised KeyError)." in first
    assert "unverified" not in body and "test_zero" not in first, "a verified PR leads with proof"


def test_a_pr_with_no_reproducing_test_says_it_is_unverified_and_why() -> None:
    body = pr_body(report(base_branch="develop", evidence=[
        TestEvidence("tests/test_more.py::test_zero", PASSES_ON_BASE, MODEL, "passed"),
        TestEvidence("tests/test_new.py::test_tail", NEW_FEATURE, MODEL,
                     "AttributeError on a name the change adds (tail)")]))
    first = body.split("Written by FrogNano")[0]
    assert "⚠️ **No test fails without this change: the fix is unverified** (labelled " \
           f"`{UNVERIFIED_LABEL}`)." in first
    assert "🆕 `tests/test_new.py::test_tail` fails on `develop` only because it uses a " \
           "name this change adds: it shows a new feature, not a fix." in first
    assert "Passing on `develop` too, so showing nothing about the fix: " \
           "`tests/test_more.py::test_zero`." in first
    assert "✅" not in first
    assert "⚠️ **No test fails" in pr_body(report()), "no evidence at all is unverified too"


def test_the_evidence_headline_is_inert_and_bounded() -> None:
    hostile = [TestEvidence(f"t.py::test_{n}[@octocat #1 https://x.example]", REPRODUCES,
                            MODEL, "raised `Boom` @octocat") for n in range(30)]
    body = pr_body(report(base_branch="main", evidence=hostile))
    first = body.split("Written by FrogNano")[0]
    assert first.count("✅") == 10 and "… and 20 more (the run page lists every one)." in first
    assert "@octocat" not in first.replace("`", "").replace("@\u200b", ""), \
        "a mention stays a code span or is broken"
