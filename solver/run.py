"""One run path, for `frognano solve` and the worker alike: prepare → execute → decide.

- `open_workspace`: the run's host-owned git directory and the workspace (hostgit.py);
- `prepare`: `.github/frognano.yml` and the command line → test command, setup, limits
  (a `RunPlan`);
- `execute`: the sandbox and the harness, with the caller's event outputs;
- `decide`: the finished run → publish, refuse with a reason, or fail with a reason.
  Pure: no GitHub, no git, no sandbox, so every branch is tested as data
  (tests/unit/solver/test_run_path.py), as bot/webhook_events.route is for webhooks.

Only what differs stays with the callers: where the source and the config text come from
(the user's checkout; the mirror and the default branch on GitHub), and what applying a
decision means (a local branch; a push and a draft PR, or a comment).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from sandbox import SandboxConfig, open_sandbox
from solver.agent.harness import Harness, RunPlan
from solver.agent.result import SolveLimits, SolveResult
from solver.agent.run_events import EventOutput
from solver.hostgit import DEFAULT_MAX_DIFF_BYTES, HostRepo
from solver.models.base import ModelClient
from solver.policy import bot_identity, forbidden_paths
from solver.repo_config import RepoConfig
from solver.setup.package_index import NO_INDEX, PackageIndex
from solver.setup.python_setup import infer_python_setup
from solver.verdict.repo_tests import detect_test_command
from solver.verdict.suite_paths import is_test_config, is_test_path


class NoTestCommand(ValueError):
    """Neither the command line nor the config names a test command, and none was found."""


@dataclass(frozen=True)
class Overrides:
    """What `frognano solve`'s flags may set over the repository's config; the bot has
    none (a maintainer changes `.github/frognano.yml` instead)."""

    test_command: str | None = None
    max_steps: int | None = None
    max_attempts: int | None = None
    timeout_minutes: float | None = None


_NO_OVERRIDES = Overrides()


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


# Files an inferred or configured setup reads: what a change to them would install.
_SETUP_INPUT_NAMES = frozenset({
    "setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "noxfile.py", "MANIFEST.in",
    "Pipfile", "Pipfile.lock", "poetry.lock", "pdm.lock", "uv.lock", "frognano.yml"})
_SETUP_INPUT = re.compile(r"(^|/)(requirements[^/]*|constraints[^/]*)\.(txt|in)$"
                          r"|(^|/)requirements/[^/]+\.(txt|in)$|\.lock$")


def setup_inputs(paths: list[str]) -> list[str]:
    """The changed paths that setup reads: the run installed none of them (setup ran on
    the files as they were), so the reviewer is told."""
    return [path for path in paths if PurePosixPath(path).name in _SETUP_INPUT_NAMES
            or _SETUP_INPUT.search(path)]


def not_installed_note(host: HostRepo, changed: list[str]) -> str:
    """`setup_inputs_note` over the change and what the bot's earlier commits on the branch
    changed (put back for setup by `distrust_setup`): a review's PR still holds those."""
    earlier = [] if host.setup_base == host.base else \
        host.changed_paths(host.base, against=host.setup_base)
    return setup_inputs_note(sorted({*changed, *earlier}))


def setup_inputs_note(paths: list[str]) -> str:
    """The sentence for the PR and the status comment; "" when the change touches none."""
    touched = setup_inputs(paths)
    if not touched:
        return ""
    shown = ", ".join(f"`{path}`" for path in touched[:10])
    more = f" and {len(touched) - 10} more" if len(touched) > 10 else ""
    return (f"the change edits what setup reads ({shown}{more}): not installed: the "
            "verdict ran with the setup of the original files")


def distrust_own_tests(host: HostRepo, upstream: str, bot_login: str) -> list[str]:
    """For a run that starts from the bot's own branch (a review on its PR): the tests it
    is judged by are the repository's, not those the model changed in an earlier run of
    the bot (published beside a fix, shown, never trusted). Test files and configuration
    that the bot's commits since `upstream` changed are put back as they were before
    them, unless a person changed them since. The paths put back."""
    return host.distrust(upstream, bot_identity(bot_login)[1], _is_test_material)


def prepare(issue: str, workspace: Path, config: RepoConfig, *,
            overrides: Overrides = _NO_OVERRIDES, guidance: str = "",
            max_run_seconds: float | None = None, context_tokens: int = 65_536) -> RunPlan:
    """The plan of one run. Test command: override > `test:` > autodetection; setup:
    `setup:` > one inferred for a Python project; limits: override > config, the wall
    time capped at `max_run_seconds` (the worker's ceiling). `workspace` holds the setup
    tree (`open_workspace`), so nothing here reads a file the model wrote."""
    test_command = overrides.test_command if overrides.test_command is not None \
        else config.test or getattr(detect_test_command(workspace), "command", None)
    if not test_command:
        raise NoTestCommand("no test command found")
    seconds = 60 * (overrides.timeout_minutes or config.timeout_minutes)
    limits = SolveLimits(
        max_steps=overrides.max_steps or config.max_steps,
        max_attempts=overrides.max_attempts or config.max_attempts,
        max_seconds=seconds if max_run_seconds is None else min(seconds, max_run_seconds),
        test_timeout=60 * config.test_timeout_minutes,
        max_context_tokens=context_tokens)
    setup_command, setup_note = config.setup, ""
    if not setup_command:
        inferred = infer_python_setup(workspace)
        if inferred is not None:
            setup_command, setup_note = inferred.command, inferred.note
    return RunPlan(issue=issue, test_command=test_command, limits=limits,
                   setup_command=setup_command, setup_note=setup_note, guidance=guidance)


def execute(plan: RunPlan, model: ModelClient, host: HostRepo, sandbox_backend: str,
            events: EventOutput, *,
            should_stop: Callable[[], bool] = lambda: False,
            package_index: PackageIndex = NO_INDEX) -> SolveResult:
    """Run the plan in a sandbox over the workspace; every run ends with a result.
    `package_index` is the setup phase's network: its host-side index endpoint and the
    hosts its proxy may reach (the URLs themselves never enter the sandbox)."""
    private = host.work_tree.parent / "private"
    private.mkdir(parents=True, exist_ok=True)
    config = SandboxConfig(workspace=host.work_tree, private_dir=private,
                           **package_index.sandbox_fields())
    with open_sandbox(sandbox_backend, config) as sandbox:
        return Harness(model, sandbox, host, events, should_stop=should_stop).run(plan)


Action = Literal["publish", "refuse", "fail"]


@dataclass(frozen=True)
class Decision:
    action: Action
    outcome: str  # the pipeline's name for it: pr_opened, failed, no_change, refused_*
    reason: str = ""  # why, for the status comment and `solve`'s output
    paths: tuple[str, ...] = ()  # the forbidden paths of a refusal


NO_CHANGE = "the tests pass without any change; nothing to propose"


def decide(result: SolveResult, config: RepoConfig) -> Decision:
    """What becomes of a finished run. A change is published only when the verdict
    accepted it, the host could read it, it is within the size limit, it is not empty
    and it touches no path the bot must never push."""
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
    return Decision("publish", "pr_opened")
