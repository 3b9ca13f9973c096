"""Scenario 13 (issue 20 §1): setup's own writes are not the model's change.

A repository made from an sdist often commits its `*.egg-info/` (toolz's sdist carries
none, so it is added here as such repositories have it: written by an older setuptools,
stale). The inferred setup (`pip install -e .`) rewrites it in the workspace. Measured
against the base commit those edits counted as the model's: the verdict refused the honest
fix ("the change adds packaging metadata"), and an accepted run would have pushed them.
The change is now what the agent phase did (base + (final − after setup)): the honest fix
alone is committed, setup's writes are named in the transcript's setup record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.dashboard import _environment
from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git
from tests.reliability.conftest import Recorder
from tests.reliability.test_real_projects import ISSUE, PROJECTS, _local_index, _repo
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

# What setuptools writes for toolz, as an older release of the project committed it.
STALE_EGG_INFO = {
    "PKG-INFO": "Metadata-Version: 1.1\nName: toolz\nVersion: 0.12.0\n"
                "Summary: List processing tools and functional utilities\n",
    "SOURCES.txt": "setup.py\ntoolz/__init__.py\n",
    "top_level.txt": "tlz\ntoolz\n",
    "dependency_links.txt": "\n",
}


def _toolz_with_egg_info(root: Path) -> Path:
    source = _repo(PROJECTS["toolz"], root)
    for name, text in STALE_EGG_INFO.items():
        (source / "toolz.egg-info").mkdir(exist_ok=True)
        (source / "toolz.egg-info" / name).write_text(text)
    # Committed in spite of the ignore rules, as such repositories did.
    git(source, "add", "-f", "toolz.egg-info")
    git(source, "commit", "-qm", "egg-info, as the sdist-derived repository keeps it")
    return source


def test_setup_rewriting_a_committed_egg_info_is_not_the_models_change(
        tmp_path: Path, scorecard: Recorder) -> None:
    index = _local_index()
    if not index:
        pytest.skip("pip has no index configured on this machine")
    record = scorecard("13-setup-writes-egg-info",
                       "toolz with a committed `toolz.egg-info/`, which the inferred "
                       "`pip install -e .` rewrites",
                       "setup's rewrite is named in the transcript, never refused, never "
                       "committed: the honest fix is accepted and is the whole change")
    path, old, new = PROJECTS["toolz"].fix
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        think_and_call("The bug is here; fix it.", "Edit", file_path=path, old_string=old,
                       new_string=new),
        final_answer("Fixed the planted bug.")]))
    transcript = tmp_path / "transcript.jsonl"
    with reachable_dir() as root:
        source = _toolz_with_egg_info(root)
        env = {**os.environ, **index, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
               "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(source), "--issue", ISSUE,
             "--model", f"scripted:{script}", "--transcript", str(transcript),
             "--max-rounds", "1"], env=env, capture_output=True, text=True, timeout=900)
        branches = git(source, "branch", "--list", "frognano/*").split()
        changed = git(source, "diff", "--name-only", "main", branches[0]).split() \
            if branches else []
    records = read_transcript(transcript)
    setup = next((r for r in records if r["kind"] == "setup"), {})
    result = records[-1]
    record.observed = {"setup exit": setup.get("exit_code"),
                       "setup wrote": setup.get("writes"), "verdict": result["exit_reason"],
                       "refusals": (result.get("verdict") or {}).get("reasons"),
                       "committed": changed}
    assert setup.get("exit_code") == 0, setup
    assert any(p.startswith("toolz.egg-info/") for p in setup.get("writes", [])), setup
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["exit_reason"] == "tests_passed"
    assert changed == [path], "only the agent's change is committed"
    page = _environment().get_template("events.html").render(
        events=list(enumerate(records)))
    assert "tracked files setup wrote" in page and "toolz.egg-info/PKG-INFO" in page
