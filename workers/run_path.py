"""One run path, for `frognano solve` and the worker alike: prepare → execute → decide.

- `open_workspace`: the run's host-owned git directory and the workspace (hostgit.py);
- `prepare`: `.github/frognano.yml` and the command line → test command, setup, limits
  (a `RunPlan`);
- `execute`: the sandbox and the harness, with the caller's event outputs;
- `decide`: the finished run → publish, refuse with a reason, or fail with a reason.
  Pure: no GitHub, no git, no sandbox, so every branch is tested as data
  (tests/test_run_path.py), as bot/events.route is for webhooks.

Only what differs stays with the callers: where the source and the config text come from
(the user's checkout; the mirror and the default branch on GitHub), and what applying a
decision means (a local branch; a push and a draft PR, or a comment).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bot.messages import refused_paths
from bot.repo_config import RepoConfig
from sandbox import SandboxConfig, open_sandbox
from workers.agent.events import EventOutput
from workers.agent.harness import Harness, RunPlan
from workers.agent.python_setup import infer_python_setup
from workers.agent.repo_tests import detect_test_command
from workers.agent.result import SolveLimits, SolveResult
from workers.agent.test_files import is_test_config, is_test_path
from workers.hostgit import DEFAULT_MAX_DIFF_BYTES, HostRepo
from workers.models.base import ModelClient
from workers.package_index import NO_INDEX, PackageIndex
from workers.publish import bot_identity, forbidden_paths


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


def open_workspace(source: Path, branch: str | None, run_dir: Path, *,
                   max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES) -> HostRepo:
    """`branch` of `source` (None: its HEAD) checked out into `run_dir/workspace`, its
    objects in `run_dir/git`, and an empty `run_dir/private` for HOME and the venv.
    The work dir above must be searchable by the sandbox's uid (0o711)."""
    run_dir.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    (run_dir / "private").mkdir(parents=True)
    return HostRepo.create(source, branch, run_dir / "git", run_dir / "workspace",
                           max_diff_bytes=max_diff_bytes)


def distrust_own_tests(host: HostRepo, upstream: str, bot_login: str) -> list[str]:
    """For a run that starts from the bot's own branch (a review on its PR): the tests it
    is judged by are the repository's, not those the model changed in an earlier run of
    the bot (published beside a fix, shown, never trusted). Test files and configuration
    that the bot's commits since `upstream` changed are put back as they were before
    them, unless a person changed them since. The paths put back."""
    return host.distrust(upstream, bot_identity(bot_login)[1],
                         lambda path: is_test_path(path) or is_test_config(path))


def prepare(issue: str, workspace: Path, config: RepoConfig, *,
            overrides: Overrides = _NO_OVERRIDES, guidance: str = "",
            max_run_seconds: float | None = None, context_tokens: int = 65_536) -> RunPlan:
    """The plan of one run. Test command: override > `test:` > autodetection; setup:
    `setup:` > one inferred for a Python project; limits: override > config, the wall
    time capped at `max_run_seconds` (the worker's ceiling)."""
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
    `package_index` reaches the setup phase alone."""
    private = host.work_tree.parent / "private"
    private.mkdir(parents=True, exist_ok=True)
    config = SandboxConfig(workspace=host.work_tree, private_dir=private,
                           setup_env=package_index.env(),
                           setup_ro_binds=package_index.local_paths())
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
        return Decision("refuse", "refused_paths", refused_paths(forbidden), tuple(forbidden))
    return Decision("publish", "pr_opened")
