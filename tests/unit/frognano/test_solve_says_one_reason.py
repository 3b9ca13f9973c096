"""A run whose model changes nothing is refused for one reason, said once (issue 33 §3):
the test still failing, not again as "no evidence the change does anything"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")


def test_a_run_that_changes_nothing_is_refused_once(calc_repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([final_answer("Nothing to do.")]))
    transcript = tmp_path / "t.jsonl"
    with reachable_dir() as work:
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(calc_repo), "--issue", "Fix add.",
             "--model", f"scripted:{script}", "--max-rounds", "1",
             "--transcript", str(transcript)],
            env={**os.environ, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
                 "FROGNANO_WORK_DIR": str(work / "w"), "COLUMNS": "200"},
            capture_output=True, text=True, timeout=300)
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1 and transcript.exists(), output
    result = read_transcript(transcript)[-1]
    reasons = result["verdict"]["reasons"]
    assert reasons == ["test still fails: tests/test_calc.py::test_add"], reasons
    assert "no evidence the change does anything" not in output
    # The end's summary (the live line before it said the same when the tests ran).
    summary = output.split("verdict: not accepted", 1)[1]
    assert summary.count("not accepted:") == 1, summary
    assert summary.count("test still fails: tests/test_calc.py::test_add") == 1, summary
