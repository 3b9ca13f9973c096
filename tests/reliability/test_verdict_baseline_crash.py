"""Issue 29 §1: a baseline where pytest itself failed is no baseline.

toolz 1.0.0's sdist (tests/data/, its bug planted in `frequencies`) with a conftest.py
written for pytest before 9, as many projects' and plugins' still are: its
`pytest_collect_file(path, parent)` names the py.path argument pytest 9 removed, so the
pytest the inferred setup installs from the index refuses the plugin at startup
(PluginValidationError), exits 1 and writes no report. Through `frognano solve` with no
`.github/frognano.yml`: the run must stop before the model, as `baseline_unusable`, saying
that pytest failed with the last lines of its own output, never go on judging the
change by pytest's exit status (what it did: exit 1 before and after, whatever the fix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, unpack
from tests.reliability.conftest import Recorder
from tests.reliability.test_real_projects import DATA, ISSUE, PROJECTS, _local_index
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

TOOLZ = PROJECTS["toolz"]
# A plugin's hook with pytest 8's signature (py.path's `path`, removed in pytest 9).
OLD_PLUGIN = ("import pytest\n\n\ndef pytest_collect_file(path, parent):\n"
              "    return None  # collected a project's YAML cases under pytest < 9\n")


def test_pytest_failing_at_startup_stops_the_run_before_the_model(
        tmp_path: Path, scorecard: Recorder) -> None:
    index = _local_index()
    if not index:
        pytest.skip("pip has no index configured on this machine")
    record = scorecard("12-verdict-toolz-baseline-pytest-crashed",
                       "A baseline where pytest itself crashed (a plugin for pytest < 9)",
                       "toolz with a conftest.py hook pytest 9 refuses at startup: exit 1, "
                       "no report; the run stops before the model as baseline_unusable, "
                       "saying so with pytest's last lines, never judged by exit status")
    path, old, new = TOOLZ.fix
    script = tmp_path / "script.json"
    script.write_text(json.dumps([think_and_call("Fix it.", "Edit", file_path=path,
                                                 old_string=old, new_string=new),
                                  final_answer("Fixed.")]))
    transcript = tmp_path / "transcript.jsonl"
    with reachable_dir() as root:
        unpack(DATA / TOOLZ.tarball, root / "src")
        source = root / "src" / TOOLZ.name
        (source / "conftest.py").write_text(OLD_PLUGIN)
        git(source, "init", "-q", "-b", "main")
        git(source, "add", "-A")
        git(source, "commit", "-qm", "toolz with a conftest.py for pytest 8")
        env = {**os.environ, **index, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
               "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
        solved = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(source), "--issue", ISSUE,
             "--model", f"scripted:{script}", "--transcript", str(transcript),
             "--max-rounds", "1"], env=env, capture_output=True, text=True, timeout=900)
    output = " ".join((solved.stdout + solved.stderr).split())
    records = read_transcript(transcript)
    result = records[-1]
    record.observed = {"exit reason": result.get("exit_reason"),
                       "model turns": sum(r["kind"] == "turn" for r in records),
                       "solve exit": solved.returncode}
    assert result["exit_reason"] == "baseline_unusable", output
    assert solved.returncode == 2 and result["totals"]["steps"] == 0, output
    assert not [r for r in records if r["kind"] in ("turn", "tests")], "the model never ran"
    said = ("the baseline cannot judge a fix: pytest itself failed before it wrote its "
            "report (exit 1: an exception outside any test")
    assert said in result["error"] and said in output, output
    assert "«pluggy._manager.PluginValidationError: Plugin" in result["error"]
    assert "Nothing was given to the model" in output
