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
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.base import Sandbox, SandboxConfig
from sandbox.trees import TreeTooLarge, copy_tree, remove_tree, walk_tree
from solver.hostgit import HostRepo, Snapshot, run_git
from solver.policy import source_text_refusals
from solver.verdict import huge_suite
from solver.verdict.change_flags import exit_only_refusal, failing_tests, scan_change
from solver.verdict.evidence import changed_test_functions, changed_tests, names_added
from solver.verdict.huge_suite import Selection, write_select_request
from solver.verdict.junit_report import (
    ReportPipe,
    documents,
    go_output,
    merge_reports,
    report_request,
)
from solver.verdict.outside_pytest import check_outside_pytest
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.setup_builds import SetupBuilds, record_builds, stale_build_flags
from solver.verdict.suite_material import TestMaterial, material_from
from solver.verdict.suite_paths import TreePlan, is_test_config, is_test_path, plan_verdict_tree
from solver.verdict.touched import touched_tests, trace_request, write_trace_request
from solver.verdict.verdict import (
    Reruns,
    Verdict,
    decide,
    needs_second_baseline,
)

SandboxFactory = Callable[[SandboxConfig], Sandbox]
# Files in the venv through which code runs at interpreter or pytest start-up.
_STARTUP_HOOK = re.compile(r"(\.pth|sitecustomize\.py|usercustomize\.py|entry_points\.txt)$")
GUARD_DIR = Path(__file__).with_name("pytest_guard")
GUARD_MAX_BYTES = 4 * 1024 * 1024
GUARD_MAX_TOTAL_BYTES = 8 * 1024 * 1024  # every write of one run (the guard writes once)
# The host's walks of a tree the sandbox wrote: a work tree (the largest repositories
# hold ~100,000 files) and a venv (~100,000 with ML wheels); the disk quota alone lets
# the sandbox make millions of empty files, each an entry kept in the worker's memory.
TREE_MAX_ENTRIES = 300_000
TREE_MAX_PATH_CHARS = 64 * 1024**2  # the paths kept: long names cost more than entries
VENV_MAX_ENTRIES = 1_000_000
WALK_MAX_SECONDS = 60.0
HOOKS_NAMED = 20  # start-up hooks named in the result's warnings


@dataclass
class Judgement:
    verdict: Verdict
    final: TestVerdict
    with_model_tests: TestVerdict | None
    snapshot: Snapshot
    plan: TreePlan
    reruns: Reruns = field(default_factory=Reruns)  # the base again, the model's tests on it


def startup_hooks(venv: Path) -> dict[str, int]:
    """Start-up hook files under a venv → size, to tell what the agent phase added. A venv
    that is a link (the sandbox can swap one in) is not walked: on the host it leads to a
    host directory, whose file names would reach the result's warnings."""
    found: dict[str, int] = {}
    if venv.is_symlink() or not venv.is_dir():
        return found
    try:
        for path, info in walk_tree(venv, max_entries=VENV_MAX_ENTRIES,
                                    max_seconds=WALK_MAX_SECONDS):
            if _STARTUP_HOOK.search(path) and not stat.S_ISDIR(info.st_mode):
                found[path] = info.st_size
                if len(found) > TREE_MAX_ENTRIES:  # millions of .pth files: bounded too
                    raise TreeTooLarge(f"over {TREE_MAX_ENTRIES:,} start-up hooks")
    except TreeTooLarge as exc:  # said as a hook, so it shows among the warnings
        found[f"<the venv was not walked further: {exc}>"] = -1
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
        self._material: tuple[TestVerdict, TestMaterial] | None = None
        self._second: tuple[TestVerdict, TestVerdict] | None = None  # (baseline, again)
        self.private_copy = scratch / "private-after-setup"
        self.hooks_after_setup: dict[str, int] = {}
        self.setup_left_out: list[str] = []  # FIFOs, devices, too deep: not in the copy
        # The extension modules setup built, carried into every test tree (setup_builds.py);
        # a replay's runner reads what the run's runner recorded there.
        self.builds = SetupBuilds.load(scratch / "built-by-setup")

    def capture_setup(self, venv_from: Callable[[Path], bool] | None = None) -> None:
        """Copy the private area as setup left it; every harness run starts from it.
        `venv_from(dest)` may make the copy's venv instead (the setup cache links its
        entry's files: the test runs bind it read-only); when it cannot, it is copied."""
        self.scratch.mkdir(mode=0o755, parents=True, exist_ok=True)
        remove_tree(self.private_copy)
        # Not services/: the live data of the agent runner's own test services.
        skip = {"etc", "services"} | ({"venv"} if venv_from is not None else set())
        self.setup_left_out = copy_tree(self.config.private_dir, self.private_copy,
                                        skip_top=frozenset(skip))
        venv = self.config.private_dir / "venv"
        if venv_from is not None and not venv_from(self.private_copy / "venv") \
                and venv.is_dir() and not venv.is_symlink():
            self.setup_left_out += copy_tree(venv, self.private_copy / "venv")
        self.hooks_after_setup = startup_hooks(self.private_copy / "venv")
        # Before the model's first turn: what the setup tree holds now is setup's.
        self.builds = record_builds(self.repo.work_tree, self.repo.base_paths,
                                   self.builds.store)

    def materialize(self, tree: str, workspace: Path) -> None:
        """A test run's tree: `tree` from the host's git objects, and the extension
        modules setup built (setup_builds.py; what they leave out, the change removed or
        holds itself)."""
        self.repo.materialize(tree, workspace)
        self.builds.place(workspace)

    def fresh_private(self, private: Path) -> Path | None:
        """A test run's private area: a copy of the one setup left, but its venv, which
        the run gets bound read-only (`SandboxConfig.venv_ro`, returned here): copying its
        thousands of files, and removing them after, was most of the harness's own time
        in a run (docs/BENCHMARKS.md, setup cache)."""
        if not self.private_copy.is_dir():
            private.mkdir(parents=True)
            return None
        copy_tree(self.private_copy, private, skip_top=frozenset({"venv"}))
        venv = self.private_copy / "venv"
        return venv if venv.is_dir() and not venv.is_symlink() else None

    def venv_changes(self) -> list[str]:
        """Start-up hooks the agent phase added to or changed in its venv (not used by
        the verdict, which runs with the copy; said in the result)."""
        now = startup_hooks(self.config.private_dir / "venv")
        changed = sorted(p for p, size in now.items() if self.hooks_after_setup.get(p) != size)
        if len(changed) <= HOOKS_NAMED:  # each one a line of the PR body's warnings
            return changed
        # A bound that stopped the walk is named first: it explains why the list ends.
        ordered = sorted(changed, key=lambda p: not p.startswith("<"))
        return [*ordered[:HOOKS_NAMED], f"… and {len(changed) - HOOKS_NAMED} more"]

    def run(self, tree: str, label: str, timeout: float,
            trace: list[str] | None = None, *, keep_going: bool = False,
            select: tuple[str, ...] | None = None) -> TestVerdict:
        """The test command on `tree` in a fresh sandbox; `trace`: test ids whose lines
        the pytest guard traces (touched.py); `keep_going`: past collection errors
        (junit_report.report_request); `select`: the only test files the guard lets
        pytest collect (a fast round, huge_suite.py)."""
        self.runs += 1
        where = self.scratch / f"{self.runs:02d}-{label}"
        workspace, private, channel = where / "workspace", where / "private", where / "channel"
        self.materialize(tree, workspace)
        venv = self.fresh_private(private)
        # Host-owned and bound read-only: the tests can write the FIFOs in it, never
        # remove, replace or rewrite them.
        channel.mkdir(mode=0o755)
        if trace:
            write_trace_request(channel, trace)
        if select is not None:
            write_select_request(channel, select)
        shutil.copytree(GUARD_DIR, channel / "guard", ignore=shutil.ignore_patterns("__pycache__"))
        token = secrets.token_hex(16)
        request = report_request(self.test_command, str(channel), token,
                                 guard=(str(channel / "guard"), str(channel / f"{token}.guard")),
                                 keep_going=keep_going)
        report_pipe = ReportPipe(Path(request.inside_path))
        guard_pipe = ReportPipe(channel / f"{token}.guard", GUARD_MAX_BYTES,
                                label="the pytest guard's report",
                                max_total_bytes=GUARD_MAX_TOTAL_BYTES)
        config = dataclasses.replace(self.config, workspace=workspace, private_dir=private,
                                     extra_ro_binds=[*self.config.extra_ro_binds, channel],
                                     venv_ro=venv)
        try:
            with self.open_sandbox(config) as fresh:
                before = bounded_tree_state(workspace)  # once the sandbox owns it
                result = fresh.exec(request.command, timeout=timeout)
            after = bounded_tree_state(workspace)
            changed = (changed_paths(before, after) if isinstance(before, dict)
                       and isinstance(after, dict) else [])
        finally:
            writes = documents(request.kind, report_pipe.close())
            guard_writes = guard_pipe.close()
            remove_tree(where)  # the sandbox wrote there: deep trees, links
        bounds = [why for why in (report_pipe.overflow(), guard_pipe.overflow(),
                                  tree_overflow(before, after)) if why]
        failures: dict[str, str] = {}
        tests = (merge_reports(request.kind, writes, bounds, failures)
                 if report_pipe.overflow() is None else None)
        output = result.stdout + ("\n" + result.stderr if result.stderr else "")
        if request.kind == "go-json" and writes:
            output = go_output(b"".join(writes)) + result.stderr
        output = output.replace(request.inside_path, "<the harness's report>")
        report = request.kind if tests is not None else "none" if not writes else "missing"
        return TestVerdict(command=self.test_command, exit_code=result.exit_code,
                           timed_out=result.timed_out, seconds=result.seconds, output=output,
                           tests=tests or {}, report=report,
                           report_writes=len(writes) + report_pipe.dropped,
                           guard=with_bounds(guard_findings(guard_writes,
                                                            guard_pipe.overflow() is not None),
                                             bounds),
                           changed_during_run=changed, failures=failures)

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
        verdict_tree, plan = self.verdict_tree(baseline, snapshot)
        final = self.run(verdict_tree, "verdict", timeout)
        with_model_tests = None
        if plan.model_test_files() and not plan.refusals:
            # The model's own tests, with its test configuration (its conftest.py, the
            # markers it registered): reported apart, never counted for the original tests.
            tree = self.model_tests_tree(snapshot, plan, on_base=False)
            with_model_tests = self.run(tree, "model-tests", timeout)
        reruns = self.reruns(baseline, final, with_model_tests, snapshot, plan,
                             timeout)
        reruns = self.measured(baseline, reruns, verdict_tree)
        verdict = decide(baseline, final, plan, with_model_tests, reruns)
        # Said to the reviewer, never refused: what no test run tells from a fix.
        verdict.read_first = scan_change(snapshot.paths, self.repo.read_base,
                                         self._reader(snapshot), failing_tests(baseline))
        verdict.read_first += stale_build_flags(snapshot.paths, self.repo.read_base,
                                                self._reader(snapshot), self.builds.files)
        exit_only = exit_only_refusal(verdict.read_first, verdict.mode)
        if exit_only and verdict.accepted:
            verdict.accepted, verdict.reasons = False, [*verdict.reasons, exit_only]
        check_outside_pytest(self, verdict_tree, baseline, final, verdict, timeout)
        return Judgement(verdict, final, with_model_tests, snapshot, plan, reruns)

    def verdict_tree(self, baseline: TestVerdict, snapshot: Snapshot) -> tuple[str, TreePlan]:
        """The tree the repository's tests judge the change on, and the plan that made it:
        the change with the base's test files and test configuration restored."""
        # The test files the bot's own earlier commits changed go back too (a review on
        # its PR: HostRepo.distrust), though this change left them alone.
        drift = [] if self.repo.test_base == self.repo.base else \
            self.repo.changed_paths(self.repo.test_base, against=self.repo.base)
        material = self.material(baseline)
        plan = plan_verdict_tree(snapshot.paths, self.repo.read_base, self._reader(snapshot),
                                 material)
        # A fix is source text, judged on the tree as staged (policy.py).
        plan.refusals += source_text_refusals(self.repo, snapshot.tree, snapshot.paths)
        restore = {*plan.restore, *(p for p in drift if is_test_path(p) or is_test_config(p)
                                    or material.holds(p))}
        verdict_tree = self.repo.tree_with_base_paths(snapshot.tree, restore)
        if plan.restored_files:  # library files with their original doctest examples
            verdict_tree = tree_with_files(self.repo, verdict_tree, plan.restored_files,
                                           self.scratch)
        return verdict_tree, plan

    def fast_round(self, baseline: TestVerdict, snapshot: Snapshot, timeout: float
                   ) -> tuple[TestVerdict, Selection] | None:
        """A huge suite's fast round (huge_suite.py): on the verdict's tree, only the
        test files of the baseline's failures, those the change touches and those
        importing what it edits. None: no selection worth a round of its own."""
        tree, _plan = self.verdict_tree(baseline, snapshot)
        selection = huge_suite.select(baseline, snapshot.paths,
                                      huge_suite.importers(self.repo, tree, snapshot.paths))
        if not selection.worth:
            return None
        return self.run(tree, "fast-round", timeout, select=selection.files), selection

    def measured(self, baseline: TestVerdict, reruns: Reruns, tree: str) -> Reruns:
        """`reruns` with the baseline failures whose traced lines `tree` (the verdict's)
        edits against the base the second run traced."""
        if reruns.second is None:
            return reruns
        return dataclasses.replace(reruns, touched=touched_tests(
            baseline, reruns.second, self.repo, self.repo.test_base, tree))

    def second_baseline(self, baseline: TestVerdict, timeout: float) -> TestVerdict:
        """The baseline's tree run once more, in a fresh sandbox from the venv as setup
        left it, like every harness run: nothing of the agent's reaches it. Run at the
        first verdict that needs it, then kept for the run."""
        if self._second is None or self._second[0] is not baseline:
            # The lines each baseline failure runs on the base, traced (touched.py).
            self._second = (baseline, self.run(self.repo.test_base, "baseline-again",
                                               timeout, trace=trace_request(baseline)))
        return self._second[1]

    def reruns(self, baseline: TestVerdict, final: TestVerdict,
               with_model_tests: TestVerdict | None, snapshot: Snapshot,
               plan: TreePlan, timeout: float) -> Reruns:
        """What tells what the change does: the second baseline run when a baseline
        failure still fails after the change (verdict.excuse); the model's new and changed
        tests against the base tree whenever one of them passes with the change, whatever
        the baseline (evidence.py classifies each)."""
        second = self.second_baseline(baseline, timeout) \
            if needs_second_baseline(baseline, final) else None
        new_names = self.names_added(snapshot)
        changed = self.changed_model_tests(with_model_tests, final, snapshot,
                                           plan.model_test_files())
        passing = with_model_tests is not None and any(
            status == "passed" for test, status in with_model_tests.tests.items()
            if test not in final.tests or test in changed)
        edited = tuple(p for p in snapshot.paths if not is_test_path(p)
                       and not is_test_config(p))  # lint items on them are flagged
        if not passing:
            return Reruns(second, None, new_names, changed, edited=edited,
                          nothing_edited=not snapshot.paths)
        tree = self.model_tests_tree(snapshot, plan, on_base=True)
        on_base = self.run(tree, "model-tests-on-base", timeout, keep_going=True)
        return Reruns(second, on_base, new_names, changed, edited=edited,
                      nothing_edited=not snapshot.paths)

    def names_added(self, snapshot: Snapshot) -> frozenset[str]:
        """The names the change's non-test Python code defines that the base's does not."""
        code = [p for p in snapshot.paths if p.endswith(".py") and not is_test_path(p)
                and not is_test_config(p)]
        return names_added(sorted(code), self.repo.read_base, self._reader(snapshot))

    def changed_model_tests(self, with_model_tests: TestVerdict | None, final: TestVerdict,
                            snapshot: Snapshot, model_files: list[str]) -> tuple[str, ...]:
        """The original tests whose function the model's version of their file changes."""
        if with_model_tests is None:
            return ()
        read = self._reader(snapshot)
        changed = {path: changed_test_functions(self.repo.read_base(path), read(path))
                   for path in model_files if path.endswith(".py")}
        return tuple(changed_tests(sorted(t for t in with_model_tests.tests
                                          if t in final.tests), changed))

    def model_tests_tree(self, snapshot: Snapshot, plan: TreePlan, on_base: bool) -> str:
        """The tree the model's own tests run on, with the model's test configuration (its
        conftest.py, pytest.ini, the markers it registered): the change as it is, or
        (`on_base`) the base tree with the change's test files and test configuration,
        every other path the change (or the bot's earlier commits) touched put back. Never
        the verdict's tree: no run on these judges the repository's own tests."""
        if not on_base:
            return snapshot.tree
        drift = [] if self.repo.test_base == self.repo.base else \
            self.repo.changed_paths(self.repo.test_base, against=self.repo.base)
        back = [p for p in {*snapshot.paths, *drift} if p not in plan.model_files]
        tree = self.repo.tree_with_base_paths(snapshot.tree, back)
        if plan.on_base_files:  # the base's pyproject.toml with the change's pytest section
            tree = tree_with_files(self.repo, tree, plan.on_base_files, self.scratch)
        return tree

    def _reader(self, snapshot: Snapshot) -> Callable[[str], bytes | None]:
        """Candidate file contents, read from the host's git objects (never the tree)."""
        return lambda path: self.repo.read(snapshot.tree, path)

    def material(self, baseline: TestVerdict) -> TestMaterial:
        """What the baseline's run says is test material (kept: one baseline a run)."""
        cached = self._material
        if cached is None or cached[0] is not baseline:
            cached = self._material = (baseline, material_from(baseline,
                                                               self.repo.base_paths()))
        return cached[1]


def tree_with_files(repo: HostRepo, tree: str, files: dict[str, bytes], scratch: Path
                    ) -> str:
    """`tree` with each path's content replaced by `files[path]`, its mode kept; the
    blobs are written into the host's own git directory, never into a work tree."""
    scratch.mkdir(mode=0o755, parents=True, exist_ok=True)
    index, blob = scratch / "files.index", scratch / "files.blob"
    index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    run_git("read-tree", tree, git_dir=repo.git_dir, env=env)
    for path, content in sorted(files.items()):
        blob.write_bytes(content)
        sha = run_git("hash-object", "-w", "--stdin", git_dir=repo.git_dir,
                      input_file=blob).decode().strip()
        entry = run_git("--literal-pathspecs", "ls-files", "-s", "--", path,
                        git_dir=repo.git_dir, env=env).decode().split()
        mode = entry[0] if entry else "100644"
        run_git("update-index", "--cacheinfo", f"{mode},{sha},{path}", git_dir=repo.git_dir,
                env=env)
    written = run_git("write-tree", git_dir=repo.git_dir, env=env).decode().strip()
    index.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)
    return written


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


def with_bounds(guard: dict[str, list[str]] | None,
                bounds: list[str]) -> dict[str, list[str]] | None:
    """The guard's findings with the channels that went past their bound (verdict.py
    names them; a baseline that passed the same bound makes it no news)."""
    return {**(guard or {}), "bounds": bounds} if bounds else guard


FileState = tuple[int, int, int, int]  # inode, ctime ns, size, mode: a write changes one
TreeState = dict[str, FileState] | str  # or why the walk stopped


def tree_state(root: Path, max_entries: int = TREE_MAX_ENTRIES,
               max_path_chars: int = TREE_MAX_PATH_CHARS,
               max_seconds: float = WALK_MAX_SECONDS) -> dict[str, FileState]:
    """Every file and link under `root` (no `__pycache__`), without following links;
    TreeTooLarge past `max_entries` entries, `max_path_chars` or `max_seconds`."""
    state: dict[str, FileState] = {}
    chars = 0
    for path, info in walk_tree(root, max_entries=max_entries, max_seconds=max_seconds,
                                skip_dirs=frozenset({"__pycache__"})):
        if not stat.S_ISDIR(info.st_mode) and path.rsplit("/", 1)[-1] != "__pycache__":
            state[path] = (info.st_ino, info.st_ctime_ns, info.st_size, info.st_mode)
            chars += len(path)
            if chars > max_path_chars:
                raise TreeTooLarge(f"over {max_path_chars:,} characters of paths")
    return state


def bounded_tree_state(root: Path) -> TreeState:
    try:
        return tree_state(root)
    except TreeTooLarge as exc:
        return f"the work tree was not walked further: {exc}"


def tree_overflow(before: TreeState, after: TreeState) -> str | None:
    return next((state for state in (before, after) if isinstance(state, str)), None)


def changed_paths(before: dict[str, FileState], after: dict[str, FileState]) -> list[str]:
    """Test files, test configuration, start-up hooks and Python code that the run
    created, changed (even if changed back: the ctime says so) or deleted."""
    touched = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return sorted(p for p in touched if is_test_config(p) or p.endswith((".py", ".pth"))
                  or (is_test_path(p) and not p.endswith((".pyc", ".log"))))
