"""A run is one request: `run(RunRequest) -> RunOutcome`, for `frognano solve` and the
worker alike: open the workspace → prepare → best of N × (execute → decide) → choose.

- `open_workspace`: the run's host-owned git directory and the workspace (hostgit.py);
- `prepare`: `.github/frognano.yml`, the preset and the flags → test command, setup,
  limits (a `RunPlan`; solver/limits.py layers the limits);
- `execute`: the sandbox and the harness, with the caller's event outputs;
- `decide`: the finished run → publish, refuse or fail, with a reason. Pure, so every
  branch is tested as data (tests/unit/solver/test_run.py);
- `BestOf`: the candidates, `slots` at once (FROGNANO_MODEL_SLOTS; with one, in turn). A
  candidate not yet started when one has passed with evidence (a test that fails on the
  base code and passes with it) is skipped; a stale run stops every
  candidate at its next step; candidate 0 keeps a single run's paths, so N = 1 is the run it was
  (solver/best_of.py chooses among them).

What differs between the callers are the request's fields: where the source and the
config come from (the user's checkout; the mirror and the default branch on GitHub) and
who hears the run; applying the decision (a local branch; a draft PR) stays theirs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sandbox.services import ServiceFailed, ServiceSpec, ServiceUnavailable
from solver import service_report
from solver.agent.harness import Harness, RunPlan
from solver.agent.result import SolveResult
from solver.agent.run_events import Event, EventOutput, Outputs, RunFinished
from solver.agent.transcript import Transcript
from solver.best_of import (
    Candidate,
    CandidatesChosen,
    CandidateStarted,
    Choice,
    HoldResult,
    LockedOutput,
    choose,
    first_seed,
    summary,
)
from solver.defaults import RunDefaults
from solver.hostgit import DEFAULT_MAX_DIFF_BYTES, HostRepo
from solver.limits import PRESETS, Limits
from solver.models.base import ModelClient, Usage
from solver.policy import bot_identity, forbidden_paths
from solver.replay import Replay
from solver.repo_config import CONFIG_PATH, RepoConfig, parse_repo_config
from solver.report import CandidatesReport
from solver.sandbox_recipe import SandboxRecipe
from solver.setup.installer import with_installer
from solver.setup.package_index import NO_INDEX, PackageIndex
from solver.setup.project_files import tree_reader
from solver.setup.python_setup import infer_python_setup
from solver.verdict.evidence import FAILS_WITH_CHANGE, NEW_FEATURE, PASSES_ON_BASE
from solver.verdict.repo_tests import detect_test_command, has_test_files
from solver.verdict.suite_paths import is_test_config, is_test_path


class NoTestCommand(ValueError):
    """Neither the command line nor the config names a test command, and none was found."""


class NoTests(NoTestCommand):
    """No test command, and the tree has no test file at all (an sdist that ships none):
    no command would help, tests would."""


@dataclass(frozen=True)
class OwnCommits:
    """A run that starts on a branch the bot wrote to (a review on its PR, `solve` on a
    `frognano/*` branch): the commits authored as `email` since `upstream` are the
    model's, never trusted for the tests nor run by setup."""

    upstream: str  # e.g. refs/heads/main
    email: str


def open_workspace(source: Path, branch: str | None, run_dir: Path, *,
                   max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES,
                   own_commits: OwnCommits | None = None) -> HostRepo:
    """`branch` of `source` (None: its HEAD) in `run_dir/git`, an empty `run_dir/private`
    for HOME and the venv, and `run_dir/workspace` holding the tree the setup phase runs:
    no `.git` yet (the harness gives the model one after setup) and, with `own_commits`,
    every change of the bot's own commits put back (`HostRepo.distrust_setup`). So what
    `prepare` infers the setup from, and what setup runs, no model wrote.
    The work dir above must be searchable by the sandbox's uid (0o711)."""
    run_dir.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    (run_dir / "private").mkdir(parents=True)
    host = HostRepo.create(source, branch, run_dir / "git", run_dir / "workspace",
                           max_diff_bytes=max_diff_bytes, model_git=False)
    if own_commits is not None:
        host.distrust(own_commits.upstream, own_commits.email, _is_test_material)
        host.distrust_setup(own_commits.upstream, own_commits.email)
    return host


def _is_test_material(path: str) -> bool:
    return is_test_path(path) or is_test_config(path)


def distrust_own_tests(host: HostRepo, upstream: str, bot_login: str) -> list[str]:
    """For a run that starts from the bot's own branch (a review on its PR): the tests it
    is judged by are the repository's, not those the model changed in an earlier run of
    the bot (published beside a fix, shown, never trusted). Test files and configuration
    that the bot's commits since `upstream` changed are put back as they were before
    them, unless a person changed them since. The paths put back."""
    return host.distrust(upstream, bot_identity(bot_login)[1], _is_test_material)


_NO_FLAGS = Limits()


def prepare(issue: str, workspace: Path, config: RepoConfig, *,
            test_command: str | None = None, limits: Limits = PRESETS["evaluation"],
            flags: Limits = _NO_FLAGS, guidance: str = "",
            max_run_seconds: float | None = None, installer: str = "pip") -> RunPlan:
    """The plan of one run. Test command: `test_command` (a flag) > `test:` >
    autodetection; setup: `setup:` > one inferred for a Python project, installed by
    `installer` (solver/setup/installer.py); limits: `flags`
    (the fields set) > config > `limits` (the preset), the wall time capped at
    `max_run_seconds` (the worker's ceiling). `workspace` holds the setup tree
    (`open_workspace`), so nothing here reads a file the model wrote."""
    if test_command is None:
        test_command = config.test or getattr(detect_test_command(workspace), "command", None)
    if not test_command:
        if not has_test_files(workspace):
            raise NoTests("the repository has no tests")
        raise NoTestCommand("no test command found")
    limits = config.limits_over(limits).over(flags).capped(max_run_seconds)
    setup_command, setup_note = config.setup, ""
    if not setup_command:
        inferred = infer_python_setup(workspace)
        if inferred is not None:
            inferred = with_installer(inferred, installer)
            setup_command, setup_note = inferred.command, inferred.note
    return RunPlan(issue=issue, test_command=test_command, limits=limits,
                   setup_command=setup_command, setup_note=setup_note, guidance=guidance)


def execute(plan: RunPlan, model: ModelClient, host: HostRepo, sandbox_backend: str,
            events: EventOutput, *,
            should_stop: Callable[[], bool] = lambda: False,
            package_index: PackageIndex = NO_INDEX,
            services: tuple[ServiceSpec, ...] = ()) -> SolveResult:
    """Run the plan in a sandbox over the workspace; every run ends with a result.
    `package_index` is the setup phase's network: its host-side index endpoint and the
    hosts its proxy may reach (the URLs themselves never enter the sandbox). `services`
    start in every sandbox of the run; one that is missing or does not start ends the
    run before setup and the agent, as `services_failed` naming it."""
    recipe = SandboxRecipe(sandbox_backend, services, package_index)
    started = time.monotonic()
    sandbox = recipe.open(recipe.config(host))
    try:
        sandbox.__enter__()  # the agent's runner, and with it the services, start here
    except (ServiceUnavailable, ServiceFailed) as exc:
        sandbox.__exit__(None, None, None)
        return _services_failed(plan, str(exc), time.monotonic() - started, events,
                                services)
    with sandbox:
        return Harness(model, sandbox, host, events, should_stop=should_stop).run(plan)


def _services_failed(plan: RunPlan, error: str, seconds: float, events: EventOutput,
                     specs: tuple[ServiceSpec, ...]) -> SolveResult:
    result = SolveResult(exit_reason="services_failed", tests_passed=False, diff="",
                         test_command=plan.test_command, baseline=None, final=None,
                         rounds=0, steps=0, usage=Usage(), seconds=seconds, error=error,
                         setup_command=plan.setup_command, setup_note=plan.setup_note,
                         services=service_report.asked(specs))
    events.emit(RunFinished(result=result))
    return result


Action = Literal["publish", "refuse", "fail"]


@dataclass(frozen=True)
class Decision:
    action: Action
    outcome: str  # the pipeline's name for it: pr_opened, failed, no_change, refused_*
    reason: str = ""  # why, for the status comment and `solve`'s output
    paths: tuple[str, ...] = ()  # the forbidden paths of a refusal
    # Whether a test fails on the base code and passes with the change (Verdict.verified):
    # a published change without one is labelled unverified.
    verified: bool = False


NO_CHANGE = "the tests pass without any change; nothing to propose"


def decide(result: SolveResult, config: RepoConfig) -> Decision:
    """What becomes of a finished run. A change is published only when the verdict
    accepted it, the host could read it, it is within the size limit, it is not empty
    and it touches no path the bot must never push; with `evidence: required`, only when
    a test fails on the base code and passes with it (else it is published, said
    unverified)."""
    if result.exit_reason == "services_failed":
        # The sentence naming the service; its log stays in the failure comment's output.
        first_line = result.error.strip().splitlines()[0] if result.error.strip() else ""
        return Decision("fail", "failed", f"`services_failed`: {first_line}")
    if not result.tests_passed:
        return Decision("fail", "failed", f"`{result.exit_reason}`")
    snapshot = result.snapshot
    if snapshot is None:
        return Decision("fail", "failed", f"the change could not be read: {result.error}")
    if snapshot.refusal:
        return Decision("refuse", "refused_size", snapshot.refusal)
    if not snapshot.paths:
        return Decision("fail", "no_change", NO_CHANGE)
    forbidden = forbidden_paths(snapshot.paths, config.protected_paths, snapshot.links)
    if forbidden:
        # Plain words: the GitHub side renders the paths inert (bot.messages.decision_reason).
        listed = ", ".join(repr(path) for path in forbidden[:10])
        return Decision("refuse", "refused_paths", "the change touches paths the bot must "
                        f"never push (workflows, actions or protected paths): {listed}. "
                        "Nothing was pushed.", tuple(forbidden))
    verified = result.verdict is not None and result.verdict.verified
    if config.evidence == "required" and not verified:
        return Decision("refuse", "refused_unverified", unverified_reason(result))
    return Decision("publish", "pr_opened", verified=verified)


def unverified_reason(result: SolveResult) -> str:
    """Why `evidence: required` refuses the change, in plain words: what each test the
    model added or changed showed (evidence.py)."""
    shown = [f"{entry.test} {_SHOWS.get(entry.kind, entry.kind)}"
             for entry in (result.verdict.evidence if result.verdict else [])]
    detail = "; ".join(shown[:10]) + (f"; … and {len(shown) - 10} more"
                                      if len(shown) > 10 else "")
    return ("no test fails without this change: "
            + (detail if shown else "the change adds or edits no test that fails on the "
               "base code, and no test of the repository's that failed before passes now")
            + ". `.github/frognano.yml` asks for one (`evidence: required`); nothing was "
            "pushed.")


_SHOWS = {
    PASSES_ON_BASE: "passes on the base code too",
    NEW_FEATURE: "fails on the base code only for a name the change adds (a new feature)",
    FAILS_WITH_CHANGE: "fails with the change",
}


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """Where a run works: `branch` of `source` (None: its HEAD), candidate 0 in `run_dir`
    and candidate k in `run_dir/candidate-<k + 1>`, each from `open_workspace`."""

    source: Path
    branch: str | None = None
    run_dir: Path
    own_commits: OwnCommits | None = None

    def open(self, candidate: int, defaults: RunDefaults) -> HostRepo:
        run_dir = self.run_dir / f"candidate-{candidate + 1}" if candidate else self.run_dir
        return open_workspace(self.source, self.branch, run_dir,
                              max_diff_bytes=defaults.max_diff_bytes,
                              own_commits=self.own_commits)


def _no_outputs(plan: RunPlan, host: HostRepo) -> EventOutput:
    return Outputs()


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """One run: what to solve, where, with the operator's defaults (the model, the
    limits, the sandbox), and who hears it."""

    issue: str
    workspace: Workspace
    defaults: RunDefaults
    transcript_for: Callable[[int], Path]  # candidate k's transcript
    config: RepoConfig | None = None  # None: the workspace's own CONFIG_PATH (`solve`)
    test_command: str | None = None  # `solve --test-cmd`
    guidance: str = ""  # a maintainer's words, a review's comments
    flags: Limits = _NO_FLAGS  # `solve`'s flags: the fields set win over the config
    # Best of N: how many candidates are asked for (None: the config's `candidates`; 1 for
    # a review), cut to the defaults' `max_candidates`.
    candidates: int | None = None
    opening: Event = field(default_factory=Event)  # each transcript's first record
    # Once the run is planned, before any candidate: the outputs all candidates share (the
    # run record, the status comment or the terminal).
    on_planned: Callable[[RunPlan, HostRepo], EventOutput] = _no_outputs
    should_stop: Callable[[], bool] = lambda: False  # a superseded or cancelled run

    def read_config(self, host: HostRepo) -> RepoConfig:
        if self.config is not None:
            return self.config
        # The setup tree (no model wrote it), never through a committed link: a link to a
        # host file would make the worker read its own file as the repository's settings.
        return parse_repo_config(tree_reader(host.work_tree)(CONFIG_PATH))


@dataclass
class RunOutcome:
    """What `run` hands back: the plan, the choice, each candidate's host git directory (the
    chosen one's is published), and what the PR body says about the others."""

    plan: RunPlan
    config: RepoConfig
    choice: Choice
    hosts: dict[int, HostRepo]
    models: dict[int, str]
    planned: int  # candidates the run was allowed
    asked: int  # the config's `candidates`
    slots: int
    recipe: SandboxRecipe  # the run's sandboxes', for a replay's after it

    def replay(self) -> Replay:
        """The chosen candidate's change judged again after the run (a review's, merged
        onto a head a person pushed meanwhile), in sandboxes built as the run's."""
        return Replay(self.host, self.result.test_command, self.plan.limits.test_timeout,
                      self.recipe)

    @property
    def host(self) -> HostRepo:
        return self.hosts[self.choice.chosen.index]

    @property
    def model(self) -> str:
        return self.models[self.choice.chosen.index]

    @property
    def result(self) -> SolveResult:
        return self.choice.chosen.result

    @property
    def decision(self) -> Decision:
        return self.choice.chosen.decision

    def report(self) -> CandidatesReport | None:
        """For the PR body or the failure comment; None when one candidate was asked."""
        if self.asked == 1:
            return None
        chosen = self.choice.chosen
        return CandidatesReport(asked=self.asked, allowed=self.planned, slots=self.slots,
                              chosen=summary(chosen, chosen),
                              others=[summary(a, chosen) for a in self.choice.others],
                              published=self.choice.published)


def ends_search(decision: Decision) -> bool:
    """Whether a candidate's decision skips the candidates not yet started: only a change
    a test shows fixes the issue; one without evidence may lose to a later candidate's
    (best_of.choose ranks by evidence, then size)."""
    return decision.action == "publish" and decision.verified


def run(request: RunRequest) -> RunOutcome:
    """Open the first workspace, plan the run in it (`NoTestCommand` when there are no
    tests to judge by), hand the plan to `on_planned`, then run the candidates."""
    defaults = request.defaults
    host = request.workspace.open(0, defaults)
    config = request.read_config(host)
    plan = prepare(request.issue, host.work_tree, config, test_command=request.test_command,
                   limits=defaults.limits, flags=request.flags, guidance=request.guidance,
                   max_run_seconds=defaults.max_run_seconds,
                   installer=defaults.package_index.setup_installer())
    shared = request.on_planned(plan, host)
    return BestOf(request, plan, config, host, shared).run()


class BestOf:
    """The candidates of one run and what their threads share: the hosts and models each
    used, the candidates finished, the results held back from the run record, and two
    flags (one passed; one crashed, which stops the others at their next step)."""

    def __init__(self, request: RunRequest, plan: RunPlan, config: RepoConfig,
                 first_host: HostRepo, shared: EventOutput) -> None:
        self.request, self.plan, self.config = request, plan, config
        spec = request.defaults
        self.asked = config.candidates if request.candidates is None else request.candidates
        self.planned = min(self.asked, spec.max_candidates)
        self.several = self.planned > 1
        self.base_seed = first_seed(spec.seed) if self.several else spec.seed
        self.recipe = spec.recipe(config.services.specs())
        self.shared = LockedOutput(shared)
        self.passed, self.crashed = threading.Event(), threading.Event()
        self.hosts: dict[int, HostRepo] = {0: first_host}
        self.models: dict[int, str] = {}
        self.finished: dict[int, Candidate] = {}
        self.held: dict[int, RunFinished] = {}

    def stopping(self) -> bool:
        return self.crashed.is_set() or self.request.should_stop()

    def seed(self, k: int) -> int | None:
        return None if self.base_seed is None else (self.base_seed + k) % 2**31

    def candidate(self, k: int) -> None:
        """Candidate k, unless one passed first or the run ends; a crash is the run's."""
        if k > 0 and (self.passed.is_set() or self.stopping()):
            return
        try:
            result = self._execute(k)
        except BaseException:
            self.crashed.set()  # the others stop at their next step
            raise
        decision = decide(result, self.config)
        self.finished[k] = Candidate(k, self.seed(k), result, decision)
        if ends_search(decision):
            self.passed.set()

    def _execute(self, k: int) -> SolveResult:
        request = self.request
        host = self.hosts[k] = (self.hosts[0] if k == 0
                                else request.workspace.open(k, request.defaults))
        model = request.defaults.model_for(self.seed(k))
        self.models[k] = model.name
        with Transcript(request.transcript_for(k)) as transcript:
            transcript.emit(request.opening)
            shared = HoldResult(self.shared, self.held, k) if self.several else self.shared
            events = Outputs(transcript, shared)
            if self.several:
                events.emit(CandidateStarted(index=k, of=self.planned, seed=self.seed(k)))
            recipe = self.recipe
            return execute(self.plan, model, host, recipe.backend, events,
                           should_stop=self.stopping, package_index=recipe.package_index,
                           services=recipe.services)

    def run(self) -> RunOutcome:
        """Every candidate, in turn or `slots` at once; then the choice, told to `shared`."""
        slots = self.request.defaults.model_slots
        if slots == 1 or not self.several:
            for k in range(self.planned):
                self.candidate(k)
        else:
            with ThreadPoolExecutor(max_workers=min(slots, self.planned),
                                    thread_name_prefix="candidate") as pool:
                try:
                    for future in [pool.submit(self.candidate, k) for k in range(self.planned)]:
                        future.result()
                except BaseException:  # Celery's soft time limit lands in this thread
                    self.crashed.set()
                    raise
        choice = choose([self.finished[k] for k in sorted(self.finished)])
        if self.several:
            self.shared.emit(self.held[choice.chosen.index])
            self.shared.emit(CandidatesChosen(
                chosen=choice.chosen.index, published=choice.published,
                candidates=[vars(summary(self.finished[k], choice.chosen))
                          for k in sorted(self.finished)]))
        return RunOutcome(self.plan, self.config, choice, self.hosts, self.models,
                          self.planned, self.asked, slots, self.recipe)
