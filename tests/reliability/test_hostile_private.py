"""Hostile issue, red team: the private area (HOME, the venv) and the workspace's disk
use as the host handles them.

Setup runs the repository's own install code and the agent phase may write the private
area too, so what is there is hostile data. Three attacks on what the host does with it:

- **A sparse bomb.** The disk quota counts the blocks a file uses; RLIMIT_FSIZE caps one
  file's size, not how many. Setup makes files of 128 MiB each holding nothing (holes):
  under the quota, they cost no disk. The harness copies the private area after setup
  and again into every verdict run: a copy that writes every byte turned each hole into
  real zeros on the host's disk (4 KiB of quota per file, up to 1 GiB of disk each, once
  per test run), which fills the disk every other run on the host shares.
- **A link for a venv.** The agent replaces /frognano/venv with a link to a host path;
  at the end the host lists the venv's start-up hooks (`.pth`, sitecustomize) for its
  warnings. A walk that follows the link lists the host's directory instead and puts
  its file names into the result (the PR body's warnings).
- **Sparse files in the workspace.** The agent `truncate`s sixteen 60 MiB files (960
  MiB, no blocks) against a 256 MiB quota. The quota counted blocks, so the command
  passed; the host's snapshot then read and stored every byte and the verdict's
  checkout wrote them all back to the host's disk. `truncate` makes thousands of such
  files between two polls of the quota, so an over-quota tree is not read at all.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import SandboxConfig, SandboxLimits, open_sandbox
from sandbox.disk_quota import tree_bytes
from sandbox.trees import remove_tree
from solver.agent.harness import Limits, SolveResult, solve
from solver.agent.transcript import Transcript
from solver.hostgit import HostRepo
from solver.models.scripted import ScriptedModel, final_answer, think_and_call
from solver.verdict.repo_tests import PYTEST_COMMAND
from tests.conftest import make_repo
from tests.reliability.conftest import Recorder
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

FIX = think_and_call("Fix the sign.", "Edit", file_path="calc.py",
                     old_string="return a - b", new_string="return a + b")
SPARSE_FILES, SPARSE_MIB = 8, 128
# Holes, and one real byte in the middle of each file, which the copy must keep.
SPARSE_SETUP = (f"cd /frognano/home && for i in $(seq {SPARSE_FILES}); do "
                f"truncate -s {SPARSE_MIB}M hole$i && printf x | dd of=hole$i bs=1 "
                f"seek={SPARSE_MIB * 512 * 1024} conv=notrunc status=none; done; echo made")


def _solve(root: Path, transcript: Path, steps: list[str], setup: str | None = None,
           limits: SandboxLimits | None = None) -> tuple[SolveResult, Path]:
    source = make_repo(root / "src", template="calc_repo")
    host = HostRepo.create(source, None, root / "run" / "git", root / "run" / "ws")
    config = SandboxConfig(workspace=host.work_tree, private_dir=root / "run" / "private",
                           limits=limits or SandboxLimits())
    with open_sandbox("bubblewrap", config) as sandbox, Transcript(transcript) as out:
        result = solve(ScriptedModel(steps), sandbox, "add() is broken", PYTEST_COMMAND, out,
                       repo=host, setup_command=setup,
                       limits=Limits(max_steps=4, max_rounds=1))
    return result, root / "run"


def test_sparse_files_from_setup_cost_the_host_no_more_disk_than_the_quota_counted(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6u-hostile-private-sparse",
                       f"Hostile issue: setup leaves {SPARSE_FILES} sparse files of "
                       f"{SPARSE_MIB} MiB (holes) in the private area",
                       "the harness's copy keeps the holes (a few KiB on disk, not "
                       f"{SPARSE_FILES * SPARSE_MIB} MiB per test run) and every byte of "
                       "data; the honest fix is accepted")
    with reachable_dir() as root:
        result, run = _solve(root, tmp_path / "t.jsonl", [FIX, final_answer("Fixed.")],
                             setup=SPARSE_SETUP)
        copy = run / "harness" / "private-after-setup" / "home"
        source = run / "private" / "home"
        used = {"source": tree_bytes([source]), "copy": tree_bytes([copy])}
        sizes = [(copy / f"hole{i}").stat().st_size for i in range(1, SPARSE_FILES + 1)]
        with open(copy / "hole1", "rb") as handle:
            handle.seek(SPARSE_MIB * 512 * 1024)
            middle = handle.read(1)
        remove_tree(run)
    record.observed = {"exit": result.exit_reason, "disk used (KiB)":
                       {k: v // 1024 for k, v in used.items()},
                       "apparent size (MiB)": SPARSE_FILES * SPARSE_MIB}
    assert result.tests_passed, result.error
    assert sizes == [SPARSE_MIB * 1024**2] * SPARSE_FILES and middle == b"x"
    assert used["copy"] <= used["source"] + 1024**2, used


HOST_HOOK = "host-only-hook-3b9a.pth"


def test_a_venv_replaced_by_a_link_is_not_followed_on_the_host(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6v-hostile-private-venv-link",
                       "Hostile issue: the agent replaces /frognano/venv with a link to a "
                       "host directory holding a `.pth` file",
                       "the host does not walk the link: no host file name in the result's "
                       "warnings")
    with reachable_dir() as root:
        host_dir = root / "host-site"
        host_dir.mkdir()
        (host_dir / HOST_HOOK).write_text("import os\n")
        swap = think_and_call("Swap the venv.", "Bash",
                              command=f"rm -rf /frognano/venv && ln -s {host_dir} "
                                      "/frognano/venv && echo swapped")
        result, run = _solve(root, tmp_path / "t.jsonl", [FIX, swap, final_answer("Done.")])
        remove_tree(run)
    shown = [w for w in result.suspicious if "host-only-hook" in w]
    record.observed = {"exit": result.exit_reason, "host names in the warnings": shown}
    assert result.tests_passed, result.error
    assert not shown, shown


def test_sparse_files_in_the_workspace_are_stopped_by_the_quota_and_never_read(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6w-hostile-workspace-sparse",
                       "Hostile issue: the agent truncates sixteen 60 MiB sparse files "
                       "(960 MiB, no blocks) into the workspace, against a 256 MiB quota",
                       "the quota counts a file's size: the command is stopped "
                       "(`disk_quota`) and the host neither snapshots nor checks out the "
                       "tree")
    limits = replace(SandboxLimits(), disk_bytes=256 * 1024**2, max_file_bytes=64 * 1024**2)
    bomb = think_and_call("Make room.", "Bash",
                          command="for i in $(seq 16); do truncate -s 60M sparse$i; done; "
                                  "echo made")
    with reachable_dir() as root:
        result, run = _solve(root, tmp_path / "t.jsonl", [FIX, bomb, final_answer("Done.")],
                             limits=limits)
        remove_tree(run)
    record.observed = {"exit": result.exit_reason, "error": (result.error or "")[:200],
                       "tree read by the host": result.snapshot is not None}
    assert "disk_quota" in (result.error or ""), (result.exit_reason, result.error)
    assert result.snapshot is None and not result.tests_passed
