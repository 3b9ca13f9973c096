"""Every text the bot writes on GitHub: status comments, PR bodies, failure and refusal notes.

Pure functions of plain data, so they are tested without a network. The status
comment carries a hidden marker so it is found and edited in place. Text the bot does
not control (the model's answer, test output and names, paths) goes through
bot/markdown.py, so it cannot mention, link or embed anything under the App's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from bot.inert import neutralize, plain_line
from bot.markdown import (
    code_span,
    escape_prose,
    escape_text,
    fence,
    quote_untrusted,
)
from solver import old_names
from solver.report import CandidatesReport
from solver.service_report import ServiceLine, services_text
from solver.verdict.evidence import (
    NEW_FEATURE,
    PASSES_ON_BASE,
    REPOSITORY,
    TestEvidence,
    reproducing,
)

if TYPE_CHECKING:  # the receiver never imports the solver's run path
    from solver.run import Decision

STATUS_MARKER = "<!-- frognano:status -->"
# One short caution; the README's "CI and secrets" has the whole story.
CI_WARNING = (
    "> [!CAUTION]\n"
    "> **CI and secrets:** a CI run of this branch runs model-written code with this "
    "repository's secrets. Read the whole change before you run its workflows; unless "
    "`ci: run` is set, the commit carries `[skip ci]`, which the merge commit should not keep.")
NEEDS_REVIEW_LABEL = "needs-human-review"
# On a PR whose change adds what no test run tells from a fix ("Read this first").
CAREFUL_REVIEW_LABEL = "needs-careful-review"
# On a PR where no test fails without the change (solver/verdict/evidence.py).
UNVERIFIED_LABEL = "frognano:unverified"
OUTPUT_TAIL_CHARS = 3000


def status_queued(position: int | None, run_number: int) -> str:
    where = f" (position {position} in the queue)" if position else ""
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** is queued{where}. Run {run_number}.\n\n"
            "I will edit this comment as the run goes.")


def status_running(step: int, max_steps: int, run_number: int, phase: str = "working") -> str:
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** is {phase}: step {step} of {max_steps} "
            f"(run {run_number}).")


@dataclass(frozen=True)
class CandidateProgress:
    """Where one of several candidates is, for the running status."""

    number: int  # 1-based
    step: int = 0  # 0: setup and the baseline, before its first turn
    ended: str | None = None  # its exit reason, once it ended


def status_running_candidates(candidates: list[CandidateProgress], of: int, max_steps: int,
                              run_number: int) -> str:
    """Best of `of`: each started candidate's step, or how it ended."""
    parts = []
    for one in sorted(candidates, key=lambda a: a.number):
        state = (f"ended ({code_span(one.ended)})" if one.ended is not None
                 else f"step {one.step} of {max_steps}" if one.step else "setting up")
        parts.append(f"candidate {one.number}: {state}")
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** is working (run {run_number}), best of "
            f"{of}: {'; '.join(parts)}.")


def status_done(pr_url: str, run_number: int) -> str:
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** opened a draft pull request: {pr_url} "
            f"(run {run_number}). The repository's tests pass on it; it needs human review.")


def status_failed(summary: str, run_number: int) -> str:
    # Summaries carry exception and GitHub error text: no mention or reference may come
    # through (the bot's own words in them hold no link).
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** could not finish (run {run_number}): "
            f"{neutralize(summary)}")


def cancel_reason(kind: str, actor: str, pull_number: int | None) -> str:
    """Who stopped a run and how, for the status comment (`actor` is a GitHub login)."""
    if kind == "cancel":
        return f"cancelled by @{actor}"
    what = f"pull request #{pull_number}" if pull_number is not None else "issue"
    return f"cancelled: the {what} was closed by @{actor}"


def status_cancelled(reason: str, run_number: int) -> str:
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** stopped (run {run_number}): {reason}. "
            "Nothing was pushed.")


def nothing_to_cancel(actor: str) -> str:
    return f"@{actor} no FrogNano run of this issue is queued or running; nothing to cancel."


def not_allowed_cancel(actor: str) -> str:
    return (f"@{actor} only people with write, maintain or admin permission on this "
            "repository can cancel a FrogNano run.")


def review_pushed(actor: str, commit: str, final_summary: str,
                  replayed_on: str | None = None) -> str:
    moved = (f" The branch moved during the run, so the change was replayed on "
             f"{replayed_on[:12]} without a conflict and the tests were re-run on the merged "
             f"result, with the test files as they are on {replayed_on[:12]}; the result "
             "above is that re-run's." if replayed_on else "")
    return (f"@{actor} 🐸 **FrogNano** pushed {commit[:12]} on top of this branch for your "
            f"feedback. The repository's tests after it: {escape_text(final_summary)}.{moved}"
            " The test report in the description is updated; it still needs human review.")


def review_not_pushed(reason: str) -> str:
    return (f"🐸 **FrogNano** did not push a change for this feedback: "
            f"{neutralize(reason)}. The branch is as it was.")


def review_replay_failed(branch: str, head: str, reasons: list[str], output: str) -> str:
    """The branch moved during a review run; the change applies on the new head, but the
    tests re-run on the merged result do not pass, so nothing was pushed."""
    lines = [f"🐸 **FrogNano** did not push a change for this feedback: {code_span(branch)} "
             f"moved to {head[:12]} during the run. The change applies on it without a "
             "conflict, but the repository's tests, re-run on the merged result with the "
             f"test files as they are on {head[:12]}, do not pass:", "",
             *[f"- {escape_prose(r)}" for r in reasons]]
    if output.strip():
        lines += ["", "Tail of the re-run:", _fence(output)]
    lines += ["", "The branch is as it was; comment `/frognano` here to try again on its "
                  "new head."]
    return "\n".join(lines)


def status_pushed_after_cancel(url: str, run_number: int, reason: str) -> str:
    """A cancel that arrived once GitHub had accepted the push: too late for it."""
    return (f"{STATUS_MARKER}\n🐸 **FrogNano** pushed its change (run {run_number}): {url}. "
            f"The cancel ({reason}) arrived after GitHub had accepted the push, too late to "
            "stop it: the pull request is complete and nothing more runs. It needs human "
            "review.")


def not_allowed(actor: str) -> str:
    return (f"@{actor} only people with write, maintain or admin permission on this "
            "repository can start FrogNano. A maintainer can label the issue `frognano` or "
            "comment `/frognano retry`.")


def invalid_config(error: str) -> str:
    return (f"🐸 **FrogNano** cannot run: the repository's configuration on the default "
            f"branch is invalid.\n\n{fence(error)}\n\nFix it, then comment `/frognano retry`.")


def _fence(text: str) -> str:
    return fence(text[-OUTPUT_TAIL_CHARS:])


def candidates_section(report: CandidatesReport) -> list[str]:
    cap = f"; this bot allows {report.allowed}" if report.allowed < report.asked else ""
    how = ("one after another until one passed (the model serves one at a time)"
           if report.slots == 1 else f"{min(report.slots, report.allowed)} at a time")
    chosen = report.chosen
    ran = [chosen, *report.others]
    if report.published:
        verdict = (f"This change is candidate {chosen.number}: of those whose tests passed, "
                   f"the one with the fewest changed lines, then files ({chosen.lines} "
                   f"lines in {chosen.files} file(s)).")
    else:
        verdict = f"No candidate passed; this report is candidate {chosen.number}'s."
    first_skipped = len(ran) + 1
    which = (f"Candidate {first_skipped}" if first_skipped == report.allowed
             else f"Candidates {first_skipped} to {report.allowed}")
    skipped = [f"{which} did not run: candidate {chosen.number} passed first."] \
        if first_skipped <= report.allowed and report.published else []
    rows = [f"| {a.number} | {a.seed if a.seed is not None else '–'} | "
            f"{escape_text(a.outcome)} | {a.steps} | {a.tokens} | {a.lines} | {a.files} |"
            for a in sorted(ran, key=lambda a: a.number)]
    return [
        "## Candidates",
        f"Best of {report.allowed} candidates (`candidates: {report.asked}`{cap}), "
        f"each its own agent with its own seed and sandbox, {how}. {verdict}",
        *skipped,
        "",
        "| candidate | seed | outcome | steps | tokens | lines changed | files |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


@dataclass(frozen=True)
class ReadFirst:
    """One flag of the change's scan (solver/verdict/change_flags.py), as plain data."""

    path: str
    line: int
    what: str  # what the line does; quotes the model's code
    why: str  # why no test run tells it from a fix


def read_first_section(flags: list[ReadFirst], heading: str = "##") -> list[str]:
    """The reviewer's first stop: each flag by file and line. The code quoted is the
    model's, so it is escaped like any untrusted text."""
    if not flags:
        return []
    return [
        f"{heading} ⚠️ Read this first",
        "The tests passing says nothing about these lines: no test run can tell them from "
        "a fix. The change adds, outside the tests:",
        "",
        *[f"- {code_span(f'{flag.path}:{flag.line}')}: {escape_prose(flag.what)} "
          f"({escape_prose(flag.why)})" for flag in flags],
        "",
    ]


@dataclass(frozen=True)
class ChangedFile:
    """One path of the change and its size (`git diff --numstat`)."""

    path: str
    added: int | None  # None: a binary file, whose lines git does not count
    removed: int | None


@dataclass
class RunReport:
    """What a finished run tells the maintainer."""

    issue_number: int
    exit_reason: str
    test_command: str
    baseline_summary: str
    final_summary: str
    final_output: str
    steps: int
    rounds: int  # agent rounds, each ended by a verdict run
    tokens: int
    seconds: float
    model: str
    transcript_url: str | None
    changed_tests: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    test_files_changed: list[str] = field(default_factory=list)
    summary: str = ""  # the model's final answer
    # The verdict (solver/verdict/verdict.py): why it did not accept, how it decided, new
    # tests.
    verdict_reasons: list[str] = field(default_factory=list)
    verdict_notes: list[str] = field(default_factory=list)
    new_tests: str = ""  # e.g. "new tests: 3 passed"
    setup_note: str = ""  # set when the setup command was inferred
    setup_command: str = ""
    best_of: CandidatesReport | None = None  # several candidates (`candidates` > 1)
    read_first: list[ReadFirst] = field(default_factory=list)  # what no test run can tell
    issue_title: str = ""
    branch: str = ""  # the bot's branch, for the reproduce commands
    changed_files: list[ChangedFile] = field(default_factory=list)  # the change's size
    still_failing: list[str] = field(default_factory=list)  # failed or errored at the end
    # Baseline failures the verdict did not blame on the change (Verdict.preexisting,
    # .flaky), and what each test shows on the base and with the change (.evidence).
    preexisting: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    evidence: list[TestEvidence] = field(default_factory=list)
    base_branch: str = ""  # the branch the change goes into, which the evidence ran on
    # The test services (`services:`) as they ran, or as asked when they did not start.
    services: list[ServiceLine] = field(default_factory=list)
    ci_rounds: list[CiRoundLine] = field(default_factory=list)  # CI repairs (issue 23 §2)


def baseline_failures_headline(report: RunReport) -> list[str]:
    """The PR's headline line when tests fail on it that failed before it too."""
    if not (report.preexisting or report.flaky):
        return []
    parts = [f"{len(report.preexisting)} test(s) failing before and after, not caused by "
             "this change"] if report.preexisting else []
    parts += [f"{len(report.flaky)} flaky test(s)"] if report.flaky else []
    return [f"⚠️ **{'; '.join(parts)}**: listed under *Tests*.", ""]


MAX_EVIDENCE = 10  # tests named in the headline; the run page has every one


def _whose(entry: TestEvidence) -> str:
    return "the repository's own test" if entry.source == REPOSITORY else \
        "a test this change adds or edits"


def evidence_headline(report: RunReport) -> list[str]:
    """The PR's first claim, per test: which fails on the base branch and passes with the
    change, or that none does (then the PR is labelled unverified). A test that fails on
    the base only for a name the change adds shows a new feature; one that passes there
    too shows nothing."""
    base = code_span(report.base_branch or "the base branch")
    proof = [e for e in report.evidence if e.reproduces]
    lines = [f"✅ {code_span(e.test)} fails on {base} and passes with this change "
             f"({_whose(e)}; on {base} it {escape_text(e.on_base)})."
             for e in proof[:MAX_EVIDENCE]]
    if not proof:
        lines.append(f"⚠️ **No test fails without this change: the fix is unverified** "
                     f"(labelled `{UNVERIFIED_LABEL}`).")
    feature = [e for e in report.evidence if e.kind == NEW_FEATURE]
    lines += [f"🆕 {code_span(e.test)} fails on {base} only because it uses a name this "
              f"change adds: it shows a new feature, not a fix." for e in feature[:MAX_EVIDENCE]]
    nothing = [e for e in report.evidence if e.kind == PASSES_ON_BASE]
    if nothing and not proof:
        lines.append(f"ℹ️ Passing on {base} too, so showing nothing about the fix: "
                     + ", ".join(code_span(e.test) for e in nothing[:MAX_EVIDENCE])
                     + (f", … and {len(nothing) - MAX_EVIDENCE} more"
                        if len(nothing) > MAX_EVIDENCE else "") + ".")
    shown = len(proof[:MAX_EVIDENCE]) + len(feature[:MAX_EVIDENCE])
    if len(proof) + len(feature) > shown:
        lines.append(f"… and {len(proof) + len(feature) - shown} more (the run page lists "
                     "every one).")
    return [line for entry in lines for line in (entry, "")]


def baseline_failures_lines(preexisting: list[str], flaky: list[str], evidence: list[str],
                            max_tests: int = 20) -> list[str]:
    """The verdict's split of the baseline's failures, each test by its (inert) id."""
    def listed(tests: list[str]) -> str:
        more = f", … and {len(tests) - max_tests} more" if len(tests) > max_tests else ""
        return ", ".join(code_span(t) for t in tests[:max_tests]) + more
    lines = [f"- failing before and after, not caused by this change (the same in two "
             f"baseline runs): {listed(preexisting)}"] if preexisting else []
    lines += [f"- flaky (passed in one baseline run, failed in the other; not counted either "
              f"way): {listed(flaky)}"] if flaky else []
    lines += [f"- evidence the change does something (fails on the base code, passes with "
              f"it): {listed(evidence)}"] if evidence and (preexisting or flaky) else []
    return lines


def change_size(files: list[ChangedFile]) -> str:
    """"2 files, +3 −1" (a binary file adds no line count)."""
    added = sum(f.added or 0 for f in files)
    removed = sum(f.removed or 0 for f in files)
    binary = sum(f.added is None for f in files)
    extra = f" ({binary} binary)" if binary else ""
    return f"{len(files)} file{'s' if len(files) != 1 else ''}{extra}, +{added} −{removed}"


def _file_line(changed: ChangedFile) -> str:
    size = "binary" if changed.added is None else f"+{changed.added} −{changed.removed}"
    return f"- {code_span(changed.path)} ({size})"


def _changes_section(report: RunReport, max_files: int = 30) -> list[str]:
    """What changed and why: the model's words, then the size and the files."""
    files = report.changed_files
    listed = [_file_line(f) for f in files[:max_files]]
    if len(files) > max_files:
        listed.append(f"- … and {len(files) - max_files} more")
    return [
        "## What changed",
        "The model's own words (nothing in them is live):",
        "",
        quote_untrusted(report.summary or "(the model gave no summary)"),
        "",
        f"**{change_size(files)}**" if files else "No file changed.",
        *listed,
    ]


def _changed_test(line: str) -> str:
    """`test id: before → after`: the id as code, the states (the bot's words) as text; a
    test id may hold ": " itself, the states never do."""
    test, _, states = line.rpartition(": ")
    return f"- {code_span(test)}: {escape_text(states)}" if test else f"- {code_span(line)}"


# How much of each list the PR body shows: a fix in code every test uses flips thousands
# of tests, and GitHub takes 65,536 characters in a body (the run page has every one).
MAX_CHANGED_TESTS = 50
MAX_TEST_FILES = 20
MAX_COMMAND_CHARS = 1000  # an inferred setup lists every test dependency it found


def _more(total: int, shown: int) -> str:
    return f"… and {total - shown} more (the run page and the transcript list every one)"


def _shown_command(command: str) -> str:
    if len(command) <= MAX_COMMAND_CHARS:
        return code_span(command)
    return f"{code_span(command[:MAX_COMMAND_CHARS])} … ({len(command)} characters in all)"


def _verdict_section(report: RunReport) -> list[str]:
    changed, files = report.changed_tests, report.test_files_changed
    changes = [_changed_test(c) for c in changed[:MAX_CHANGED_TESTS]] or ["- (none reported)"]
    if len(changed) > MAX_CHANGED_TESTS:
        changes.append(f"- {_more(len(changed), MAX_CHANGED_TESTS)}")
    coverage = ("The change edits or adds tests: " + ", ".join(
        code_span(p) for p in files[:MAX_TEST_FILES]) + (
            f", {_more(len(files), MAX_TEST_FILES)}" if len(files) > MAX_TEST_FILES else "")
                if files else "⚠️ The change adds or edits no test: check that the fix is "
                "covered.")
    return [
        "## Tests",
        f"Command: {code_span(report.test_command)}",
        *[f"- {line}" for line in services_lines(report.services)],
        f"- before: {report.baseline_summary}",
        f"- after: {report.final_summary} (the repository's own tests, as they are on the "
        "base branch)",
        *([f"- {escape_prose(report.new_tests)} (the model's own tests, reported, never "
           "counted)"] if report.new_tests else []),
        *baseline_failures_lines(report.preexisting, report.flaky,
                                 reproducing(report.evidence)),
        *[f"- {escape_prose(note)}" for note in report.verdict_notes],
        *([f"- setup {escape_prose(report.setup_note)}: {_shown_command(report.setup_command)}"]
          if report.setup_note else []),
        "",
        "Tests that changed state:",
        *changes,
        "",
        coverage,
    ]


def reproduce_commands(report: RunReport) -> list[str]:
    """The shell lines that check out the pushed branch and run the tests the verdict ran
    (in a clone of the repository, its remote `origin`)."""
    branch = report.branch or f"frognano/issue-{report.issue_number}"
    return [f"git fetch origin {branch}", "git checkout --detach FETCH_HEAD",
            report.test_command]


def _reproduce_section(report: RunReport) -> list[str]:
    setup = ([f"The run set the project up first with {_shown_command(report.setup_command)} "
              "(in its sandbox, whose venv comes first on `PATH`)."]
             if report.setup_command else [])
    return [
        "## Reproduce",
        "In a clone of this repository:",
        "",
        fence("\n".join(reproduce_commands(report)), info="sh"),
        *setup,
    ]


def _cautions_section(report: RunReport) -> list[str]:
    """Cautions and flags: what no test run tells, the run's warnings, CI."""
    warnings = [f"- ⚠️ {escape_prose(w)}" for w in report.warnings]
    return [
        "## Cautions",
        *read_first_section(report.read_first, heading="###"),
        *(["### Warnings" if report.read_first else "", *warnings, ""] if warnings else []),
        CI_WARNING,
    ]


def _run_section(report: RunReport) -> list[str]:
    transcript = (f"[transcript]({report.transcript_url})" if report.transcript_url
                  else "transcript kept on the worker")
    return [
        "## Run",
        f"{report.steps} steps, {report.rounds} round(s), {report.tokens} tokens "
        f"generated, {report.seconds:.0f}s; model `{report.model}`; {transcript}.",
    ]


def pr_body(report: RunReport) -> str:
    """What changed and why → the verdict → how to reproduce → cautions and flags → the
    run. `Fixes #N` stays first and live: GitHub closes the issue on merge."""
    title = f": {escape_prose(report.issue_title)}" if report.issue_title.strip() else ""
    pointer = ([f"⚠️ **Read this first**, below: {len(report.read_first)} line(s) that no "
                "test run can tell from a fix.", ""] if report.read_first else [])
    return "\n".join([
        f"Fixes #{report.issue_number}{title}",
        "",
        *evidence_headline(report),
        "Written by FrogNano, a small local model. **Needs human review** before merging.",
        "",
        *pointer,
        *baseline_failures_headline(report),
        *_changes_section(report),
        "",
        *_verdict_section(report),
        "",
        *_reproduce_section(report),
        "",
        *_cautions_section(report),
        *(["", *candidates_section(report.best_of)] if report.best_of else []),
        *(["", *ci_rounds_section(report.ci_rounds)] if report.ci_rounds else []),
        "",
        *_run_section(report),
        "",
        "## Review checklist",
        "- [ ] The change does what the issue asks, and nothing else",
        "- [ ] The tests cover the fix",
        "- [ ] No secrets, generated files or unrelated edits",
    ])


# A failed run's headline, in words, for each exit reason (solver/agent/loop.py's
# ExitReason, and the harness's own: solver/agent/harness.py).
EXIT_REASON_WORDS = {
    "agent": "the model said it was done, but the repository's tests do not pass",
    "max_rounds": "the model had its last round after the test results were fed back to "
                  "it, and the tests still fail",
    "max_turns": "the model used all of its steps before the tests passed",
    "max_time": "the run reached its time limit before the tests passed",
    "max_context_len": "the conversation outgrew the model's context window",
    "max_tokens_per_turn": "the model's turn ran past the cap on tokens for one turn "
                           "without ending",
    "llm_query_error": "the model server failed or stopped answering",
    "turn_timeout": "the model's turn ran out of time before the model ended it",
    "tool_error": "the sandbox or one of its tools failed, so the run could not go on",
    "cancelled": "the run was cancelled",
    "setup_failed": "the repository's setup command failed, so the model never started",
    "baseline_unusable": "the tests could not run on the base branch, so a fix had nothing "
                         "to be compared with",
    "tests_passed": "the repository's tests pass, but the change was not published",
    "services_failed": "a test service the repository asks for (`services:`) did not start, "
                       "so the model never started",
}


def services_lines(services: list[ServiceLine]) -> list[str]:
    """The run's test services: those that ran (fresh in every test run's sandbox), or
    those asked for that did not start."""
    if not services:
        return []
    if all(s.started for s in services):
        return [f"services: {escape_text(services_text(services))} (fresh in every test "
                "run's sandbox)"]
    return [f"services asked for, not started: {escape_text(services_text(services))}"]


def exit_reason_words(reason: str) -> str:
    """What happened, in words, with the exit code kept for a search."""
    reason = old_names.exit_reason(reason) or reason  # a record of before keeps its words
    words = EXIT_REASON_WORDS.get(reason, "the run ended")
    return f"{words} ({code_span(reason)})"


def _failure_facts(report: RunReport, max_tests: int = 10) -> list[str]:
    """Whether the model changed anything, and which tests still fail."""
    files = report.changed_files
    changed = (f"- The model changed {change_size(files)}: "
               + ", ".join(code_span(f.path) for f in files[:max_tests])
               + (" …" if len(files) > max_tests else "") + "." if files
               else "- The model changed no file.")
    failing = report.still_failing
    still = ([f"- Still failing ({len(failing)}): "
              + ", ".join(code_span(t) for t in failing[:max_tests])
              + (f" and {len(failing) - max_tests} more" if len(failing) > max_tests else "")
              + "."] if failing else [])
    return [changed,
            f"- Tests ({code_span(report.test_command)}): before {report.baseline_summary}; "
            f"after {report.final_summary}.",
            *[f"- {line[0].upper()}{line[1:]}." for line in services_lines(report.services)],
            *still]


def run_links(report: RunReport) -> str:
    """The run's dashboard page, and its transcript on it (bot/dashboard.py)."""
    if not report.transcript_url:
        return "the transcript is kept on the worker"
    return (f"[the run's page]({report.transcript_url}) and its "
            f"[transcript]({report.transcript_url}#events)")


def failure_comment(report: RunReport, retry_hint: bool = True) -> str:
    lines = [
        f"🐸 **FrogNano** did not open a pull request: {exit_reason_words(report.exit_reason)}.",
        "",
        *_failure_facts(report),
    ]
    if report.verdict_reasons:
        lines += ["", "The verdict did not accept the change (only the repository's own, "
                      "untouched tests count):",
                  *[f"- {escape_prose(r)}" for r in report.verdict_reasons]]
    if report.read_first:
        lines += ["", *read_first_section(report.read_first)]
    if report.final_output.strip():
        lines += ["", "Tail of the last test run:", _fence(report.final_output)]
    lines += ["", f"{report.steps} steps, {report.rounds} round(s), {report.seconds:.0f}s; "
                  f"{run_links(report)}."]
    if report.best_of:
        lines += ["", *candidates_section(report.best_of)]
    if retry_hint:
        lines += ["", "To try again, comment `/frognano retry` (text after the command "
                      "is passed to the model as guidance)."]
    return "\n".join(lines)


def decision_reason(decision: Decision) -> str:
    """Why a finished run was not published, as Markdown: the forbidden paths of a
    refusal are the model's names, shown inert."""
    if decision.outcome == "refused_paths":
        return refused_paths(list(decision.paths))
    return decision.reason


def refused_paths(paths: list[str]) -> str:
    listed = ", ".join(code_span(p) for p in paths[:10])
    return ("the change touches paths the bot must never push "
            f"(workflows, actions or protected paths): {listed}. Nothing was pushed.")


def commit_message(title: str, issue_number: int, test_command: str, ci: str) -> str:
    """The bot's commit. GitHub links mentions, references and closing keywords in commit
    messages too, so the issue title and the repository's test command are made inert
    (bot/inert.py); only `Fixes #N`, the issue this run fixes, is live. `ci: skip` adds
    `[skip ci]`, which stops GitHub Actions' `push` and `pull_request` workflows for this
    commit (see README, "CI and secrets")."""
    skip = " [skip ci]" if ci == "skip" else ""
    return (f"{plain_line(title)}{skip}\n\nFixes #{issue_number}. "
            f"Made by FrogNano; `{plain_line(test_command)}` passed.")


def pull_title(issue_title: str) -> str:
    """The draft PR's title. A squash merge makes it the commit subject, so a closing
    keyword in it would close that issue: nothing in it is live (bot/inert.py)."""
    return f"[FrogNano] {plain_line(issue_title)}"


# Where the README lists the App's permissions (named, since a self-hosted bot's README
# has no one URL).
PERMISSIONS_DOC = "the README, *The GitHub App → Creating the App*, step 2"


def rate_limited_summary(reset_at: datetime | None) -> str:
    """A run stopped by a spent GitHub rate limit: when to try again."""
    when = f"{reset_at:%H:%M} UTC" if reset_at is not None else "the hour's reset"
    return (f"GitHub's API rate limit for this App's installation is spent until {when}, "
            f"later than the bot waits. Comment `/frognano retry` after {when}")


def permission_missing_summary(missing: str, step: str) -> str:
    """A run stopped by a 403 "Resource not accessible by integration": which permission
    the App lacks (GitHub's X-Accepted-GitHub-Permissions) and where they are listed."""
    which = f"the **{missing}** permission" if missing else \
        "a permission it needs (GitHub did not say which)"
    return (f"GitHub refused a step because the App lacks {which} (\"Resource not "
            f"accessible by integration\": {step}). Grant it in the App's settings "
            f"(*Permissions & events*; the full list is in {PERMISSIONS_DOC}), accept the "
            "new permissions on the installation, then comment `/frognano retry`")


# --- CI repairs (issue 23 §2): a red CI on the bot's own head is the next verdict --------

# The label on a PR whose CI the bot stopped repairing: a person must look at it.
NEEDS_HUMAN_LABEL = "needs-human"


@dataclass(frozen=True)
class CiRoundLine:
    """One CI repair round as the PR body lists it: its number, the head whose checks
    failed, their names (untrusted: set by the workflows) and how the round ended."""

    number: int
    head: str
    checks: tuple[str, ...]
    outcome: str = "running"  # a run outcome: pushed, failed, no_change, ci_not_reproduced


def _checks_list(checks: tuple[str, ...] | list[str]) -> str:
    return ", ".join(code_span(name) for name in checks) or "(none listed)"


def ci_rounds_section(rounds: list[CiRoundLine]) -> list[str]:
    """Every CI repair round of the PR with the checks that triggered it."""
    lines = ["## CI repairs",
             "The repository's CI failed on a commit FrogNano pushed; each round ran the "
             "model again from that commit with the failing checks' log tails:"]
    for line in rounds:
        lines.append(f"- Round {line.number} on {line.head[:12]}: {_checks_list(line.checks)}"
                     f" → {code_span(line.outcome)}")
    return lines


def ci_pushed(commit: str, round_number: int, of: int, checks: list[str],
              final_summary: str, replayed_on: str | None = None) -> str:
    moved = (f" The branch moved during the run, so the change was replayed on "
             f"{replayed_on[:12]} and the tests were re-run on the merged result."
             if replayed_on else "")
    return (f"🐸 **FrogNano** pushed {commit[:12]} on top of this branch to repair its CI "
            f"(round {round_number} of {of}); the failing checks: {_checks_list(checks)}. "
            f"The repository's tests after it: {escape_text(final_summary)}.{moved} The "
            "description's test report is updated; it still needs human review.")


def ci_gave_up(rounds: int, head: str, checks: list[str]) -> str:
    return (f"🐸 **FrogNano** stopped repairing this pull request's CI: its checks still "
            f"fail on {head[:12]} ({_checks_list(checks)}) after {rounds} CI repair "
            f"round(s), the repository's `ci_fix_rounds`. Labelled `{NEEDS_HUMAN_LABEL}`: a "
            "person must look at it; comment `/frognano <feedback>` to run it again.")


def ci_not_reproduced(head: str, checks: list[str], test_command: str) -> str:
    return (f"🐸 **FrogNano** cannot reproduce this pull request's CI failure: the "
            f"repository's tests ({code_span(test_command)}) pass on {head[:12]} in the "
            f"bot's sandbox, so the failing checks ({_checks_list(checks)}) test something "
            f"the bot does not run. Nothing was pushed; labelled `{NEEDS_HUMAN_LABEL}`: a "
            "person must look at it.")


def ci_branch_moved(branch: str, started: str, head: str | None) -> str:
    """A CI repair round whose branch moved to a commit it did not start from."""
    moved = f"moved to {code_span(head[:12])}" if head else "was deleted"
    return (f"🐸 **FrogNano** did not push its CI repair: {code_span(branch)} {moved} "
            f"while the round ran on {code_span(started[:12])}. A push to the branch that "
            "the bot did not make stops the CI repair loop: nothing was pushed, and no "
            "round runs on that commit. Comment `/frognano <feedback>` to have the bot "
            "continue from it.")


def ci_not_repaired(round_number: int, of: int, checks: list[str], reason: str) -> str:
    said = neutralize(reason).rstrip(".")  # the reason may end a sentence already
    return (f"🐸 **FrogNano** did not repair this pull request's CI (round {round_number} "
            f"of {of}; the failing checks: {_checks_list(checks)}): {said}. "
            f"The branch is as it was; labelled `{NEEDS_HUMAN_LABEL}`: a person must look "
            "at it.")
