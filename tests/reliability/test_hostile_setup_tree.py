"""Hostile issue, red team (issue 9 §4): what the setup phase leaves in the private area.

The harness copies the private area (HOME, the venv) as setup left it, and starts every
verdict run from that copy. Setup runs the repository's own install code, so the tree it
leaves is hostile: a FIFO (shutil.copytree raised on it: the run ended in error), a link
to a secret on the host (read through by a copy that follows links), and directories
nested deeper than the copy goes (RecursionError past ~1,000 levels). The run must still
be judged, honestly. A tree past PATH_MAX is stopped earlier, by the disk quota, during
setup: that run must end with its reason (the SandboxError escaped the harness: a crash).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import SandboxConfig, open_sandbox
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

SECRET = "host-only-secret-7d1f"
HOSTILE_SETUP = (
    "mkfifo /frognano/pipe && ln -s {secret} /frognano/leak && "
    "python3 -c \"import os\nos.chdir('/frognano')\nfor _ in range({levels}):\n"
    "    os.mkdir('d' * 200); os.chdir('d' * 200)\nopen('deep', 'w').write('x')\" && "
    "echo planted")
FIX = think_and_call("Fix the sign.", "Edit", file_path="calc.py",
                     old_string="return a - b", new_string="return a + b")
# The link points at a host path: inside the sandbox it leads nowhere (its /tmp is its own).
PEEK = "cat /frognano/leak 2>&1; true"


def _copied_secret(copy: Path) -> bool:
    """Whether the harness's copy of the private area holds the secret in a plain file."""
    return any(path.is_file() and not path.is_symlink() and SECRET in path.read_text("latin-1")
               for path in copy.glob("*"))


def _solve(root: Path, transcript_path: Path, levels: int) -> tuple[SolveResult, bool]:
    secret = root / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    source = make_repo(root / "src", template="calc_repo")
    host = HostRepo.create(source, None, root / "run" / "git", root / "run" / "ws")
    config = SandboxConfig(workspace=host.work_tree, private_dir=root / "run" / "private")
    model = ScriptedModel([FIX, think_and_call("Look around.", "Bash", command=PEEK),
                           final_answer("Fixed the sign.")])
    with open_sandbox("bubblewrap", config) as sandbox, Transcript(transcript_path) as out:
        result = solve(model, sandbox, "add() is broken", PYTEST_COMMAND, out, repo=host,
                       setup_command=HOSTILE_SETUP.format(secret=secret, levels=levels),
                       limits=Limits(max_steps=4, max_rounds=1))
    copy = root / "run" / "harness" / "private-after-setup"
    # The link must be in the copy, as a link.
    copied = _copied_secret(copy) or not (copy / "leak").is_symlink()
    remove_tree(root / "run")  # shutil.rmtree (reachable_dir's cleanup) cannot
    return result, copied


def test_a_hostile_setup_tree_does_not_stop_or_leak_into_the_verdict(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6p-hostile-setup-tree",
                       "Hostile issue: setup leaves a FIFO, a link to a host secret and "
                       "200 nested directories in the private area",
                       "the verdict's copy leaves the FIFO and the part below 64 levels "
                       "out and copies the link as a link; the honest fix is accepted")
    with reachable_dir() as root:
        result, copied = _solve(root, tmp_path / "t.jsonl", levels=200)
    leaked = copied or SECRET in (tmp_path / "t.jsonl").read_text()
    record.observed = {"exit": result.exit_reason, "error": (result.error or "")[:160],
                       "verdict": result.verdict.accepted if result.verdict else None,
                       "secret copied or shown": leaked}
    assert result.verdict is not None and result.verdict.accepted, result.error
    assert result.tests_passed and result.exit_reason == "tests_passed"
    assert not leaked


def test_a_setup_tree_past_path_max_ends_the_run_with_its_reason(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard("6q-hostile-setup-deep",
                       "Hostile issue: setup nests 1,500 directories (past PATH_MAX)",
                       "the disk quota stops setup; the run ends `setup_failed` with the "
                       "quota's reason, not a crash")
    with reachable_dir() as root:
        result, _ = _solve(root, tmp_path / "t.jsonl", levels=1500)
    record.observed = {"exit": result.exit_reason, "error": (result.error or "")[:160]}
    assert result.exit_reason == "setup_failed", result.error
    assert "disk_quota" in (result.error or "")

