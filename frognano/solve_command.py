"""`frognano solve`: the agent core on a local repository, with no GitHub and no queue."""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from frognano.progress import Progress, shown
from runstore.store import RunStoreUnavailable, default_database_url, open_run_store
from sandbox.base import SandboxError, SandboxUnavailable
from sandbox.trees import remove_tree
from solver.agent.harness import RunPlan
from solver.agent.result import SolveResult
from solver.agent.run_events import Event, EventOutput, Outputs, RunAborted
from solver.agent.transcript import Transcript
from solver.defaults import RunDefaults
from solver.driver import drive
from solver.hostgit import DEFAULT_MAX_DIFF_BYTES, GitError, HostRepo
from solver.limits import PRESETS, Limits
from solver.local_solve import (
    LocalRepoError,
    bring_back,
    check_repository,
    own_commits,
    slugify,
    unique_branch,
)
from solver.models import ModelMaker, ModelSpec, ModelSpecError, check_model_slots
from solver.models.base import ModelClient
from solver.models.llama_resident import LlamaSettings
from solver.policy import setup_inputs_note
from solver.repo_config import CONFIG_PATH, MAX_CANDIDATES, RepoConfigError
from solver.report import CandidatesReport
from solver.run import NoTestCommand, NoTests, RunOutcome, RunRequest, Workspace
from solver.service_report import services_text
from solver.setup.package_index import NO_INDEX, PackageIndex
from solver.verdict.evidence import NEW_FEATURE, TestEvidence
from workers.run_recording import RunRecorder

EXIT_OK, EXIT_TESTS_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# Without the model's tokenizer (a server, a script), an issue is taken to be one token
# per this many characters, about what BPE tokenizers give for English and code.
CHARS_PER_TOKEN = 4
# The system prompt, the tool schemas and the task's own sentences, in tokens.
PROMPT_OVERHEAD_TOKENS = 1500


class BadInput(Exception):
    """Something the user gave us cannot be used; shown as one clear message."""


@dataclass
class SolveOptions:
    """The command line laid over the settings (frognano/cli.py), for one `solve`."""

    path: Path
    issue: str
    state_dir: Path  # transcripts
    work_dir: Path  # workspaces; every parent must be searchable by the sandbox's uid
    test_cmd: str | None = None
    model: str | None = None
    # The operator's preset (FROGNANO_LIMITS), its context the model's (FROGNANO_N_CTX or
    # --n-ctx, else cut to the model host's memory); `flags`: the fields --max-steps,
    # --max-rounds and --timeout-minutes set, over `.github/frognano.yml`.
    limits: Limits = PRESETS["evaluation"]
    flags: Limits = field(default_factory=Limits)
    sandbox: str = "bubblewrap"
    transcript: Path | None = None
    seed: int | None = None
    keep_workspace: bool = False
    n_gpu_layers: int = -1
    llama: dict[str, Any] = field(default_factory=dict)  # more LlamaSettings fields
    chat_template: Path | None = None  # a Jinja file, for a GGUF that carries no template
    max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES  # a bigger change is not committed
    # Run records for the dashboard: None = sqlite in state_dir; "" = do not record.
    database_url: str | None = None
    package_index: PackageIndex = NO_INDEX  # the setup phase's pip (FROGNANO_PIP_*)
    # Best of N (solver/run.py): `--candidates`, else the checkout's `candidates` cut to
    # FROGNANO_MAX_CANDIDATES; FROGNANO_MODEL_SLOTS at once.
    candidates: int | None = None
    max_candidates: int = 1
    model_slots: int = 1
    progress_seconds: float = 30.0  # without a terminal, a progress line this often

    @property
    def n_ctx(self) -> int:
        """The model's context: the run's budget and an in-process model's KV cache."""
        return self.limits.max_context_tokens


def run_solve(opts: SolveOptions, console: Console) -> int:
    slug = slugify(opts.issue)
    if not console.is_terminal:  # piped: never wrap a path or a test id at 80 columns
        console.soft_wrap = True
    # Time, pid and a random part: two runs in the same second never share a file.
    transcript_path = opts.transcript or (
        opts.state_dir / "transcripts"
        / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}-{slug}.jsonl")
    recorder = _start_recorder(opts, slug, transcript_path)
    exit_code = EXIT_BAD_INPUT
    try:
        exit_code = _run_solve(opts, console, slug, transcript_path, recorder)
        return exit_code
    finally:
        recorder.finish(_SOLVE_STATUS.get(exit_code, "error"))


_SOLVE_STATUS = {EXIT_OK: "passed", EXIT_TESTS_FAILED: "failed", EXIT_BAD_INPUT: "error"}


def _start_recorder(opts: SolveOptions, slug: str, transcript_path: Path) -> RunRecorder:
    """Record the run so it shows in the dashboard; a database problem only warns."""
    if opts.database_url == "":
        return RunRecorder(None, None)
    try:
        store = open_run_store(opts.database_url or default_database_url(opts.state_dir))
    except RunStoreUnavailable as exc:
        logging.getLogger(__name__).warning("%s; this run is not recorded", exc)
        return RunRecorder(None, None)
    return RunRecorder.start(store, repo=str(opts.path.expanduser().resolve()), issue=slug,
                             trigger="solve", transcript_path=transcript_path)


def _run_solve(opts: SolveOptions, console: Console, slug: str, transcript_path: Path,
               recorder: RunRecorder) -> int:
    run_dir = opts.work_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{slug}"
    # Candidate 1's transcript is this path too (solver.run opens it, appending): this one
    # holds only a record of a run that could not start or broke outside the harness.
    with Transcript(transcript_path) as transcript:
        events = Outputs(transcript, recorder)
        try:
            return _solve(opts, slug, run_dir, transcript_path, recorder, console)
        except (BadInput, LocalRepoError, ModelSpecError, RepoConfigError,
                SandboxUnavailable) as exc:
            events.emit(RunAborted(exit_reason="bad_input", error=str(exc)))
            console.print(f"[bold red]error:[/bold red] {shown(str(exc))}", highlight=False)
            return EXIT_BAD_INPUT
        except (SandboxError, GitError) as exc:
            events.emit(RunAborted(exit_reason="infrastructure_error", error=str(exc)))
            console.print(f"[bold red]error:[/bold red] {shown(str(exc))}", highlight=False)
            return EXIT_TESTS_FAILED
        finally:
            console.print(f"transcript: {shown(str(transcript_path))}", highlight=False)
            if not opts.keep_workspace:
                remove_tree(run_dir)  # however deep the sandbox nested it


def transcript_for(path: Path, candidate: int) -> Path:
    """Candidate 1 writes `path`; candidate k of several `<stem>-k<suffix>` beside it."""
    return path if candidate == 0 else path.with_name(
        f"{path.stem}-{candidate + 1}{path.suffix}")


def _solve(opts: SolveOptions, slug: str, run_dir: Path, transcript_path: Path,
           recorder: RunRecorder, console: Console) -> int:
    """The bot's run (solver/run.py, best of N included) on a local checkout; only the
    source, the flags over the config, and what a decision means (a local branch) are
    solve's own."""
    if not opts.issue.strip():
        raise BadInput("the issue text is empty")
    _check_numbers(opts)
    repo = check_repository(opts.path.resolve())
    model_for = _model_factory(opts)
    model = model_for(opts.seed)  # its name and tokenizer, before any candidate starts
    _check_issue_size(opts.issue, model, opts.n_ctx)
    defaults = RunDefaults(  # the flags over the settings (frognano/cli.py), once
        model_for=model_for, limits=opts.limits, max_diff_bytes=opts.max_diff_bytes,
        max_candidates=opts.candidates or opts.max_candidates,
        model_slots=opts.model_slots, seed=opts.seed, sandbox_backend=opts.sandbox,
        package_index=opts.package_index)
    with ExitStack() as progress:  # the progress line, from the plan to the end
        return drive(LocalSolve(opts, repo, slug, run_dir, transcript_path, model.name,
                                console, recorder, progress), defaults)


@dataclass
class LocalSolve:
    """`frognano solve`'s kind of run (solver/driver.py): the user's checkout, its own
    commits on a `frognano/*` branch distrusted, `--issue` as the task, `--candidates`
    over the checkout's config; applied as a local branch."""

    opts: SolveOptions
    repo: Path
    slug: str
    run_dir: Path
    transcript_path: Path
    model_name: str
    console: Console
    recorder: RunRecorder
    progress: ExitStack  # the live progress line, closed before the report

    def request(self, defaults: RunDefaults) -> RunRequest:
        return _run_request(self, defaults)

    def no_tests(self, error: NoTestCommand) -> int:
        if isinstance(error, NoTests):
            raise BadInput("the repository has no tests (no test file at all), so there is "
                           "nothing to judge a fix by: add tests, or pass --test-cmd CMD")
        raise BadInput("no test command found: pass --test-cmd CMD, or set `test:` in "
                       f"{CONFIG_PATH}; the harness needs the repository's tests to "
                       "judge a fix")

    def apply(self, outcome: RunOutcome) -> int:
        self.progress.close()
        return _apply(self.opts, self.repo, self.slug, self.transcript_path, outcome,
                      self.console)


def _model_factory(opts: SolveOptions) -> Callable[[int | None], ModelClient]:
    """One client per candidate, as the worker's; the llama.cpp settings checked first."""
    try:
        llama = LlamaSettings(**{**opts.llama, "n_ctx": opts.n_ctx,
                                 "n_gpu_layers": opts.n_gpu_layers})
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    spec = ModelSpec.parse(opts.model)
    check_model_slots(spec, opts.model_slots)
    return ModelMaker(spec, llama, opts.chat_template)


def _run_request(solve: LocalSolve, defaults: RunDefaults) -> RunRequest:
    """The checkout's own config (HEAD is the user's), the flags over it; on a branch
    `solve` made, its setup runs none of the model's files, and the tests that judge it
    are the repository's (solver/run.open_workspace). Best of N: `--candidates` over the
    checkout's `candidates`; the config's value is cut to
    FROGNANO_MAX_CANDIDATES as in the bot, the flag is the operator's own word."""
    opts, repo, console = solve.opts, solve.repo, solve.console

    def planned(plan: RunPlan, host: HostRepo) -> EventOutput:
        console.print(shown(f"repository {repo} at {host.base[:12]}; tests: "
                            f"`{plan.test_command}`; model {solve.model_name}; sandbox "
                            f"{opts.sandbox}"), highlight=False)
        if plan.setup_note:
            console.print(shown(f"setup {plan.setup_note}: `{plan.setup_command}`"),
                          highlight=False)
        live = solve.progress.enter_context(Progress(console,
                                                     every_seconds=opts.progress_seconds))
        return Outputs(solve.recorder, live)

    return RunRequest(
        issue=opts.issue, workspace=Workspace(source=repo, run_dir=solve.run_dir,
                                              own_commits=own_commits(repo)),
        defaults=defaults,
        transcript_for=lambda k: transcript_for(solve.transcript_path, k),
        test_command=opts.test_cmd, flags=opts.flags, candidates=opts.candidates,
        opening=Event(),  # no trigger to open with: an event that is never recorded
        on_planned=planned)


def _apply(opts: SolveOptions, repo: Path, slug: str, transcript_path: Path,
           outcome: RunOutcome, console: Console) -> int:
    """Report the run, then apply its decision: a branch in the user's repository."""
    host, result, decision = outcome.host, outcome.result, outcome.decision
    report = outcome.report()
    if report is not None:
        _report_candidates(report, transcript_path, console)
    _report(result, console)
    if result.exit_reason == "baseline_unusable":
        return EXIT_BAD_INPUT
    for path in result.snapshot.dropped if result.tests_passed and result.snapshot else []:
        console.print(f"[bold yellow]warning:[/bold yellow] left out `{shown(path)}`: a "
                      "nested git repository is never committed", highlight=False)
    if decision.outcome == "no_change":
        console.print("The tests pass and nothing was changed: no branch created.")
        return EXIT_OK
    if decision.action == "refuse":
        console.print(f"[bold red]not committed:[/bold red] {shown(decision.reason)}",
                      highlight=False)
    if decision.action != "publish":
        return EXIT_TESTS_FAILED  # _report printed why
    assert result.snapshot is not None  # decide publishes only a snapshot it has read
    setup_note = setup_inputs_note(result.snapshot.paths)
    if setup_note:
        console.print(f"[bold yellow]warning:[/bold yellow] {shown(setup_note)}",
                      highlight=False)
    branch = unique_branch(repo, slug)
    first_line = opts.issue.strip().splitlines()[0][:72]
    commit = host.commit(result.snapshot.tree, branch, f"{first_line}\n\nMade by frognano "
                         f"solve; the harness ran `{outcome.plan.test_command}` and it passed.")
    bring_back(repo, host, branch)
    console.print(f"[bold green]committed[/bold green] {commit[:12]} on branch "
                  f"{shown(branch)} (your current branch is untouched)", highlight=False)
    return EXIT_OK


def _report_candidates(report: CandidatesReport, transcript_path: Path, console: Console
                       ) -> None:
    """Best of N: how each candidate ended (the PR body's table, as lines), then which one
    the report below is about."""
    cap = f" (asked {report.asked}; FROGNANO_MAX_CANDIDATES allows " \
          f"{report.allowed})" if report.allowed < report.asked else ""
    how = "in turn" if report.slots == 1 else f"{min(report.slots, report.allowed)} at a time"
    console.print(f"[bold]best of {report.allowed}[/bold]{shown(cap)}, {how}:",
                  highlight=False)
    for line in sorted([report.chosen, *report.others], key=lambda a: a.number):
        seed = f"seed {line.seed}" if line.seed is not None else "no seed"
        console.print(shown(
            f"  candidate {line.number} ({seed}): {line.outcome}; {line.steps} step(s), "
            f"{line.tokens} tokens, {line.lines} lines changed in {line.files} file(s); "
            f"transcript {transcript_for(transcript_path, line.number - 1)}"),
            highlight=False)
    ran = 1 + len(report.others)
    if report.published and ran < report.allowed:
        console.print(f"  candidates {ran + 1} to {report.allowed} did not run: candidate "
                      f"{report.chosen.number} passed first", highlight=False)
    which = "chosen" if report.published else "reported (none passed)"
    console.print(f"[bold]candidate {report.chosen.number}[/bold], {which}:", highlight=False)


def _check_numbers(opts: SolveOptions) -> None:
    """Values argparse accepts but no run can use."""
    if opts.test_cmd is not None and not opts.test_cmd.strip():
        raise BadInput("--test-cmd is empty: give the command that runs the tests, or leave "
                       "the option out to use `test:` in .github/frognano.yml or autodetection")
    if opts.n_ctx <= 0:
        raise BadInput(f"--n-ctx must be a positive number of tokens, not {opts.n_ctx}")
    if opts.candidates is not None and not 1 <= opts.candidates <= MAX_CANDIDATES:
        raise BadInput(f"--candidates must be from 1 to {MAX_CANDIDATES}, not "
                       f"{opts.candidates}")


def _check_issue_size(issue: str, model: object, context: int) -> None:
    """Refuse an issue the context cannot hold, before setup and baseline spend time."""
    tokenize = getattr(model, "tokenize", None)
    try:
        tokens = len(tokenize(issue)) if callable(tokenize) else None
    except Exception:  # a tokenizer failure only means: estimate
        tokens = None
    how = "" if tokens is not None else "about "
    tokens = tokens if tokens is not None else len(issue) // CHARS_PER_TOKEN
    if tokens + PROMPT_OVERHEAD_TOKENS > context:
        raise BadInput(f"the issue is {how}{tokens} tokens ({len(issue)} characters): with "
                       f"the prompt it does not fit the model's context of {context} tokens; "
                       "shorten it or raise --n-ctx")


def evidence_lines(evidence: list[TestEvidence]) -> list[str]:
    """What the tests show, as the PR's first lines say it (bot.messages.evidence_headline):
    each test that fails on the base and passes with the change, or that none does."""
    lines = [f"{e.test} fails on the base and passes with this change" for e in evidence
             if e.reproduces] or ["none: no test fails without this change, the fix is "
                                  "unverified"]
    lines += [f"{e.test} fails on the base only because it uses a name this change adds: "
              "a new feature, not a fix" for e in evidence if e.kind == NEW_FEATURE]
    return lines


def _report(result: SolveResult, console: Console) -> None:
    """Everything here is data (paths, test ids, output): escaped, never read as markup."""
    style = "green" if result.tests_passed else "red"
    console.print(f"[bold {style}]{shown(result.exit_reason)}[/bold {style}] after "
                  f"{result.steps} steps, {result.rounds} round(s), "
                  f"{result.seconds:.1f}s, {result.usage.completion_tokens} tokens generated",
                  highlight=False)
    if result.services:
        started = all(service.started for service in result.services)
        console.print(f"{'services' if started else 'services asked for, not started'}: "
                      f"{shown(services_text(result.services))}", highlight=False)
    if result.baseline:
        console.print(f"tests before: {shown(result.baseline.summary())}", highlight=False)
    if result.final:
        console.print(f"tests after:  {shown(result.final.summary())} (the repository's "
                      "own tests)", highlight=False)
    for change in result.changes:
        console.print(shown(f"  {change.test}: {change.before or 'absent'} → "
                             f"{change.after or 'absent'}"), highlight=False)
    verdict = result.verdict
    if verdict is not None:
        state = "[bold green]accepted[/bold green]" if verdict.accepted \
            else "[bold red]not accepted[/bold red]"
        console.print(f"verdict: {state} ({shown(verdict.mode)}); "
                      f"{shown(verdict.new_tests_summary())}", highlight=False)
        for line in evidence_lines(verdict.evidence):
            console.print(f"evidence: {shown(line)}", highlight=False)
        for note in verdict.notes:
            console.print(f"  note: {shown(note)}", highlight=False)
        # What no test run tells from a fix: before the warnings, as in the PR body.
        for flag in verdict.read_first:
            console.print(f"[bold red]read this first:[/bold red] {shown(flag.text())}",
                          highlight=False)
    for reason in result.suspicious:
        label = "not accepted" if verdict is not None and reason in verdict.reasons \
            else "warning"
        console.print(f"[bold yellow]{label}:[/bold yellow] {shown(reason)}", highlight=False)
    if result.error:
        console.print(f"[red]{shown(result.error)}[/red]", highlight=False)
