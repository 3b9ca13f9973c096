"""The harness's own test runs: a tree the host chose, in a fresh sandbox, with a report.

The agent's sandbox is never trusted to judge its own work. For the baseline and for
every verdict, the host materialises a tree from its own git directory (the base tree,
or the candidate with the repository's original tests and test configuration put back)
into a new directory and runs the test command there in a new sandbox, whose private
area (HOME, venv) is a copy taken right after setup: nothing the agent phase wrote into
the venv (a pytest plugin, a `.pth` file, sitecustomize) reaches the verdict. The runner
writes its report to a random path in that copy, which the host reads afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox.base import Sandbox, SandboxConfig
from workers.agent.repo_tests import TestVerdict
from workers.agent.test_files import TreePlan, is_test_config, is_test_path, plan_verdict_tree
from workers.agent.test_report import go_output, parse_report, read_report, report_request
from workers.agent.verdict import Verdict, decide
from workers.hostgit import HostRepo, Snapshot

SandboxFactory = Callable[[SandboxConfig], Sandbox]
# Files in the venv through which code runs at interpreter or pytest start-up.
_STARTUP_HOOK = re.compile(r"(\.pth|sitecustomize\.py|usercustomize\.py|entry_points\.txt)$")


@dataclass
class Judgement:
    verdict: Verdict
    final: TestVerdict
    with_model_tests: TestVerdict | None
    snapshot: Snapshot
    plan: TreePlan


def startup_hooks(venv: Path) -> dict[str, int]:
    """Start-up hook files under a venv → size, to tell what the agent phase added."""
    found: dict[str, int] = {}
    if not venv.is_dir():
        return found
    for dirpath, _dirs, files in os.walk(venv, followlinks=False):
        for name in files:
            if _STARTUP_HOOK.search(name):
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, venv)] = os.lstat(path).st_size
    return found


class VerdictRunner:
    def __init__(self, sandbox: Sandbox, repo: HostRepo, test_command: str, scratch: Path,
                 *, open_sandbox: SandboxFactory | None = None) -> None:
        self.sandbox, self.repo, self.test_command = sandbox, repo, test_command
        self.scratch = scratch
        self.config: SandboxConfig = sandbox.config  # type: ignore[attr-defined]
        self.open_sandbox = open_sandbox or type(sandbox)
        self.runs = 0
        self.private_copy = scratch / "private-after-setup"
        self.hooks_after_setup: dict[str, int] = {}

    def capture_setup(self) -> None:
        """Copy the private area as setup left it; every harness run starts from it."""
        self.scratch.mkdir(mode=0o755, parents=True, exist_ok=True)
        shutil.rmtree(self.private_copy, ignore_errors=True)
        shutil.copytree(self.config.private_dir, self.private_copy, symlinks=True,
                        ignore=shutil.ignore_patterns("etc"))
        self.hooks_after_setup = startup_hooks(self.private_copy / "venv")

    def venv_changes(self) -> list[str]:
        """Start-up hooks the agent phase added to or changed in its venv (not used by
        the verdict, which runs with the copy; said in the result)."""
        now = startup_hooks(self.config.private_dir / "venv")
        return sorted(p for p, size in now.items() if self.hooks_after_setup.get(p) != size)

    def run(self, tree: str, label: str, timeout: float) -> TestVerdict:
        self.runs += 1
        where = self.scratch / f"{self.runs:02d}-{label}"
        workspace, private = where / "workspace", where / "private"
        self.repo.materialize(tree, workspace)
        if self.private_copy.is_dir():
            shutil.copytree(self.private_copy, private, symlinks=True)
        else:
            private.mkdir(parents=True)
        (private / "reports").mkdir()
        config = dataclasses.replace(self.config, workspace=workspace, private_dir=private)
        try:
            with self.open_sandbox(config) as fresh:
                home = fresh.environment()["HOME"]  # type: ignore[attr-defined]
                inside = posixpath.join(posixpath.dirname(home), "reports")
                request = report_request(self.test_command, inside, secrets.token_hex(16))
                result = fresh.exec(request.command, timeout=timeout)
            data = read_report(private / "reports" / posixpath.basename(request.inside_path))
        finally:
            shutil.rmtree(where, ignore_errors=True)
        tests = parse_report(request.kind, data)
        output = result.stdout + ("\n" + result.stderr if result.stderr else "")
        if request.kind == "go-json" and data is not None:
            output = go_output(data) + result.stderr
        output = output.replace(request.inside_path, "<the harness's report>")
        report = request.kind if tests is not None else "none" if data is None else "missing"
        return TestVerdict(command=self.test_command, exit_code=result.exit_code,
                           timed_out=result.timed_out, seconds=result.seconds, output=output,
                           tests=tests or {}, report=report)

    def baseline(self, timeout: float) -> TestVerdict:
        return self.run(self.repo.base, "baseline", timeout)

    def judge(self, baseline: TestVerdict, timeout: float) -> Judgement:
        """Snapshot the stopped sandbox's work tree and decide on it."""
        self.sandbox.stop()
        snapshot = self.repo.snapshot()
        restore = [p for p in snapshot.paths if is_test_path(p) or is_test_config(p)]
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
        return Judgement(verdict, final, with_model_tests, snapshot, plan)

    def _reader(self, snapshot: Snapshot) -> Callable[[str], bytes | None]:
        """Candidate file contents, read from the host's git objects (never the tree)."""
        return lambda path: _read_blob(self.repo, snapshot.tree, path)


def _read_blob(repo: HostRepo, tree: str, path: str) -> bytes | None:
    entry = repo._ls_tree(tree, [path]).get(path)  # HostRepo has no public reader of a tree
    if entry is None or entry[0] in ("160000", "120000"):
        return None
    return repo._git("cat-file", "blob", entry[1], strip=False)
