"""The harness's own test runs: a tree the host chose, in a fresh sandbox, with a report.

The agent's sandbox is never trusted to judge its own work. For the baseline and for
every verdict, the host materialises a tree from its own git directory (the base tree,
or the candidate with the repository's original tests and test configuration put back)
into a new directory and runs the test command there in a new sandbox, whose private
area (HOME, venv) is a copy taken right after setup: nothing the agent phase wrote into
the venv (a pytest plugin, a `.pth` file, sitecustomize) reaches the verdict.

The runner writes its report into a FIFO in a host-owned folder bound read-only (the
host reads every write as it happens; test_report.ReportPipe), next to the harness's
pytest guard (pytest_guard/), which says what the code under test did to pytest. The
host also notes which test files and configuration changed while the tests ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox.base import Sandbox, SandboxConfig
from sandbox.trees import copy_tree, remove_tree
from workers.agent.change_flags import failing_tests, scan_change
from workers.agent.outside_pytest import check_outside_pytest
from workers.agent.repo_tests import TestVerdict
from workers.agent.test_files import TreePlan, is_test_config, is_test_path, plan_verdict_tree
from workers.agent.test_report import (
    ReportPipe,
    documents,
    go_output,
    merge_reports,
    report_request,
)
from workers.agent.verdict import Verdict, decide
from workers.hostgit import HostRepo, Snapshot

SandboxFactory = Callable[[SandboxConfig], Sandbox]
# Files in the venv through which code runs at interpreter or pytest start-up.
_STARTUP_HOOK = re.compile(r"(\.pth|sitecustomize\.py|usercustomize\.py|entry_points\.txt)$")
GUARD_DIR = Path(__file__).with_name("pytest_guard")
GUARD_MAX_BYTES = 4 * 1024 * 1024


@dataclass
class Judgement:
    verdict: Verdict
    final: TestVerdict
    with_model_tests: TestVerdict | None
    snapshot: Snapshot
    plan: TreePlan


def startup_hooks(venv: Path) -> dict[str, int]:
    """Start-up hook files under a venv → size, to tell what the agent phase added. A venv
    that is a link (the sandbox can swap one in) is not walked: on the host it leads to a
    host directory, whose file names would reach the result's warnings."""
    found: dict[str, int] = {}
    if venv.is_symlink() or not venv.is_dir():
        return found
    for dirpath, _dirs, files in os.walk(venv, followlinks=False):
        for name in files:
            if _STARTUP_HOOK.search(name):
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, venv)] = os.lstat(path).st_size
    return found


class VerdictRunner:
    def __init__(self, sandbox: Sandbox | None, repo: HostRepo, test_command: str,
                 scratch: Path, *, open_sandbox: SandboxFactory | None = None,
                 config: SandboxConfig | None = None) -> None:
        """`sandbox` is the agent's, stopped before each snapshot; None once it is gone
        (a review's change replayed after the run), with `config` (the agent sandbox's)
        and `open_sandbox` to build the fresh ones."""
        self.sandbox, self.repo, self.test_command = sandbox, repo, test_command
        self.scratch = scratch
        if sandbox is None:
            if config is None or open_sandbox is None:
                raise ValueError("a runner without a sandbox needs config and open_sandbox")
            self.config, self.open_sandbox = config, open_sandbox
        else:
            self.config = config or sandbox.config  # type: ignore[attr-defined]
            self.open_sandbox = open_sandbox or type(sandbox)
        self.runs = 0
        self.private_copy = scratch / "private-after-setup"
        self.hooks_after_setup: dict[str, int] = {}
        self.setup_left_out: list[str] = []  # FIFOs, devices, too deep: not in the copy

    def capture_setup(self) -> None:
        """Copy the private area as setup left it; every harness run starts from it."""
        self.scratch.mkdir(mode=0o755, parents=True, exist_ok=True)
        remove_tree(self.private_copy)
        self.setup_left_out = copy_tree(self.config.private_dir, self.private_copy,
                                        skip_top=frozenset({"etc"}))
        self.hooks_after_setup = startup_hooks(self.private_copy / "venv")

    def venv_changes(self) -> list[str]:
        """Start-up hooks the agent phase added to or changed in its venv (not used by
        the verdict, which runs with the copy; said in the result)."""
        now = startup_hooks(self.config.private_dir / "venv")
        return sorted(p for p, size in now.items() if self.hooks_after_setup.get(p) != size)

    def run(self, tree: str, label: str, timeout: float) -> TestVerdict:
        self.runs += 1
        where = self.scratch / f"{self.runs:02d}-{label}"
        workspace, private, channel = where / "workspace", where / "private", where / "channel"
        self.repo.materialize(tree, workspace)
        if self.private_copy.is_dir():
            copy_tree(self.private_copy, private)
        else:
            private.mkdir(parents=True)
        # Host-owned and bound read-only: the tests can write the FIFOs in it, never
        # remove, replace or rewrite them.
        channel.mkdir(mode=0o755)
        shutil.copytree(GUARD_DIR, channel / "guard", ignore=shutil.ignore_patterns("__pycache__"))
        token = secrets.token_hex(16)
        request = report_request(self.test_command, str(channel), token,
                                 guard=(str(channel / "guard"), str(channel / f"{token}.guard")))
        report_pipe = ReportPipe(Path(request.inside_path))
        guard_pipe = ReportPipe(channel / f"{token}.guard", GUARD_MAX_BYTES)
        config = dataclasses.replace(self.config, workspace=workspace, private_dir=private,
                                     extra_ro_binds=[*self.config.extra_ro_binds, channel])
        try:
            with self.open_sandbox(config) as fresh:
                before = tree_state(workspace)  # after the sandbox took ownership of it
                result = fresh.exec(request.command, timeout=timeout)
            changed = changed_paths(before, tree_state(workspace))
        finally:
            writes = documents(request.kind, report_pipe.close())
            guard_writes = guard_pipe.close()
            remove_tree(where)  # the sandbox wrote there: deep trees, links
        tests = merge_reports(request.kind, writes) if not report_pipe.oversize else None
        output = result.stdout + ("\n" + result.stderr if result.stderr else "")
        if request.kind == "go-json" and writes:
            output = go_output(b"".join(writes)) + result.stderr
        output = output.replace(request.inside_path, "<the harness's report>")
        report = request.kind if tests is not None else "none" if not writes else "missing"
        return TestVerdict(command=self.test_command, exit_code=result.exit_code,
                           timed_out=result.timed_out, seconds=result.seconds, output=output,
                           tests=tests or {}, report=report, report_writes=len(writes),
                           guard=guard_findings(guard_writes, guard_pipe.oversize),
                           changed_during_run=changed)

    def baseline(self, timeout: float) -> TestVerdict:
        """The base with its trusted tests (`HostRepo.test_base`)."""
        return self.run(self.repo.test_base, "baseline", timeout)

    def judge(self, baseline: TestVerdict, timeout: float) -> Judgement:
        """Snapshot the stopped sandbox's work tree and decide on it."""
        if self.sandbox is None:
            raise ValueError("no agent sandbox to snapshot; use judge_snapshot")
        self.sandbox.stop()
        return self.judge_snapshot(baseline, self.repo.snapshot(), timeout)

    def judge_snapshot(self, baseline: TestVerdict, snapshot: Snapshot,
                       timeout: float) -> Judgement:
        """The verdict on a tree the host holds, against `self.repo.base`: the tree with
        the base's test files and test configuration restored, then the model's own tests
        reported apart. A tree made after the agent's sandbox is gone (a review's change
        replayed on a moved branch) is judged here the same way."""
        # The test files the bot's own earlier commits changed go back too (a review on
        # its PR: HostRepo.distrust), though this change left them alone.
        drift = [] if self.repo.test_base == self.repo.base else \
            self.repo.changed_paths(self.repo.test_base, against=self.repo.base)
        restore = [p for p in {*snapshot.paths, *drift} if is_test_path(p) or is_test_config(p)]
        verdict_tree = self.repo.tree_with_base_paths(snapshot.tree, restore)
        final = self.run(verdict_tree, "verdict", timeout)
        with_model_tests = None
        plan = plan_verdict_tree(snapshot.paths, self.repo.read_base, self._reader(snapshot))
        model_test_files = [p for p in plan.model_tests if not is_test_config(p)]
        if model_test_files and not plan.refusals:
            # The model's own tests, with the original configuration: reported
            # separately, never counted for the original tests.
            configs = [p for p in plan.restore if is_test_config(p)]
            tree = self.repo.tree_with_base_paths(snapshot.tree, configs)
            with_model_tests = self.run(tree, "model-tests", timeout)
        verdict = decide(baseline, final, plan, with_model_tests)
        # Said to the reviewer, never refused: what no test run tells from a fix.
        verdict.read_first = scan_change(snapshot.paths, self.repo.read_base,
                                         self._reader(snapshot), failing_tests(baseline))
        check_outside_pytest(self, verdict_tree, baseline, final, verdict, timeout)
        return Judgement(verdict, final, with_model_tests, snapshot, plan)

    def _reader(self, snapshot: Snapshot) -> Callable[[str], bytes | None]:
        """Candidate file contents, read from the host's git objects (never the tree)."""
        return lambda path: self.repo.read(snapshot.tree, path)


def guard_findings(writes: list[bytes], oversize: bool) -> dict[str, list[str]] | None:
    """The pytest guard's findings; None when it was silent (not loaded)."""
    if not writes and not oversize:
        return None
    if len(writes) != 1 or oversize:
        return {"tampered": [f"the harness's pytest guard report was written {len(writes)} "
                             "times or oversize: something besides the guard wrote it"]}
    try:
        found = json.loads(writes[0])
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return {"tampered": ["the harness's pytest guard report is unreadable"]}
    return {str(k): sorted(map(str, v)) for k, v in found.items() if isinstance(v, list)}


FileState = tuple[int, int, int, int]  # inode, ctime ns, size, mode: a write changes one


def tree_state(root: Path) -> dict[str, FileState]:
    """Every file and link under `root` (no `__pycache__`), without following links."""
    state: dict[str, FileState] = {}
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(dirpath, d)))]:
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            state[os.path.relpath(path, root)] = (info.st_ino, info.st_ctime_ns,
                                                  info.st_size, info.st_mode)
    return state


def changed_paths(before: dict[str, FileState], after: dict[str, FileState]) -> list[str]:
    """Test files, test configuration, start-up hooks and Python code that the run
    created, changed (even if changed back: the ctime says so) or deleted."""
    touched = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return sorted(p for p in touched if is_test_config(p) or p.endswith((".py", ".pth"))
                  or (is_test_path(p) and not p.endswith((".pyc", ".log"))))
