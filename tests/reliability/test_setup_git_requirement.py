"""A requirement file's `git+https://…` line, through `frognano solve` (issue 29 §1).

The setup phase reaches only the package index (and the hosts an operator lists), so pip's
clone of a git requirement fails, and pip says only "exit 1" about which line asked for it.
The run must name the file and the line, the host, and the two ways through: the host on
FROGNANO_SETUP_EGRESS_HOSTS, or a setup without it. The inferred setup says so before it
runs (its note); a `setup:` the maintainer wrote hears it in the failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from tests.conftest import make_repo
from tests.reliability.conftest import Recorder
from tests.reliability.test_hostile_setup_egress import _solve
from tests.reliability.test_real_projects import _local_index
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

GIT_LINE = "helpers @ git+https://github.com/example/helpers.git@main"
FILES = {
    "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                      'build-backend = "hatchling.build"\n\n[project]\nname = "gitreq"\n'
                      'version = "1.0"\n',
    "requirements-test.txt": f"pytest\n# the helpers, unreleased\n{GIT_LINE}\n",
    "gitreq/__init__.py": "def f():\n    return 2\n",
    "tests/test_core.py": "from gitreq import f\n\n\ndef test_f():\n    assert f() == 1\n"}
NAMED = (f"requirements-test.txt line 3 (`{GIT_LINE}`) is cloned with git from github.com, "
         "which the setup phase reaches only with FROGNANO_SETUP_EGRESS_HOSTS=github.com")


def _setup_failure(files: dict[str, str], tmp_path: Path) -> tuple[str, str]:
    """(what solve printed, the run's error) of a solve whose setup fails."""
    index = _local_index()
    if not index:
        pytest.skip("pip has no index configured on this machine")
    with reachable_dir() as root:
        proc, transcript = _solve(make_repo(root / "src", files), root, tmp_path / "state",
                                  index)
        result = read_transcript(transcript)[-1]
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and result["exit_reason"] == "setup_failed", output
    return output, str(result.get("error"))


def test_an_inferred_setup_names_the_git_line_before_and_after_it_fails(
        tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard(
        "29-setup-git-requirement-inferred",
        "Setup phase: a requirement file's git+https line is named with its fix",
        "no `setup:`; requirements-test.txt line 3 is `helpers @ git+https://github.com/…`: "
        "the inferred setup's note names the file, the line and github.com before setup "
        "runs, with FROGNANO_SETUP_EGRESS_HOSTS=github.com or the `setup:` line without it; "
        "the failure says it again (red before: 'exit code 1' and the refused CONNECT)")
    output, error = _setup_failure(FILES, tmp_path)
    record.observed = {"error": error}
    planned = output.split("setup_failed")[0]  # printed when the run was planned
    assert NAMED in planned, output
    without = ("or write the setup without it: `setup: python3 -m venv /frognano/venv && "
               "/frognano/venv/bin/python -m pip install -e . pytest`")
    assert without in planned and without in error, error
    assert f"pip could not clone the git requirement `https://github.com/example/helpers.git`:"\
           f" {NAMED}" in error, error


def test_a_written_setup_hears_which_git_line_failed(tmp_path: Path,
                                                     scorecard: Recorder) -> None:
    record = scorecard(
        "29-setup-git-requirement-written",
        "Setup phase: a `setup:` whose requirement file has a git+https line hears which",
        "`setup:` installs requirements-test.txt, whose line 3 is a git requirement: the "
        "failure names the file, the line, github.com and FROGNANO_SETUP_EGRESS_HOSTS=github.com "
        "(red before: 'exit code 1' and the refused CONNECT)")
    written = {**FILES, ".github/frognano.yml": (
        "setup: python3 -m venv /frognano/venv && /frognano/venv/bin/python -m pip install "
        "-e . -r requirements-test.txt\ntest: python3 -m pytest -q\n")}
    _, error = _setup_failure(written, tmp_path)
    record.observed = {"error": error}
    assert f"pip could not clone the git requirement `https://github.com/example/helpers.git`:"\
           f" {NAMED}; or write a `setup:` line without it" in error, error
