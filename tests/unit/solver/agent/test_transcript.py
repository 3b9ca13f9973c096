"""A transcript record of a huge suite's run (issue 29 §1, solver/agent/transcript.py):
over the record's limit, its test maps keep what did not pass and say how many they
held, instead of the whole record being dropped to its kind."""

from __future__ import annotations

from pathlib import Path

from solver.agent.transcript import MAX_RECORD_CHARS, Transcript, read_transcript


def test_a_huge_suites_record_keeps_its_figures_and_failures(tmp_path: Path) -> None:
    tests = {f"tests/test_gen_{i // 500:03d}.py::test_trivial[{i % 500}]": "passed"
             for i in range(100_000)}
    tests["tests/test_mathy.py::test_clamp_low"] = "failed"
    with Transcript(tmp_path / "t.jsonl") as transcript:
        transcript.write("baseline", seconds=61.5, exit_code=1, tests=tests)
        transcript.write("result", exit_reason="tests_passed",
                         baseline={"tests": tests}, final={"tests": dict(tests)})
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    baseline, result = read_transcript(tmp_path / "t.jsonl")
    assert max(map(len, lines)) <= MAX_RECORD_CHARS
    assert baseline["seconds"] == 61.5 and baseline["thinned"] == {"tests": 100_001}
    assert baseline["tests"] == {"tests/test_mathy.py::test_clamp_low": "failed"}
    assert result["exit_reason"] == "tests_passed"
    assert result["thinned"] == {"baseline.tests": 100_001, "final.tests": 100_001}


def test_a_small_record_is_kept_whole() -> None:
    with Transcript(None) as transcript:
        transcript.write("baseline", tests={"t.py::a": "passed", "t.py::b": "failed"})
    assert transcript.records[0]["tests"] == {"t.py::a": "passed", "t.py::b": "failed"}
    assert "thinned" not in transcript.records[0]
