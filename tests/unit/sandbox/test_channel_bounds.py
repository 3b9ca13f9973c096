"""The bounds on what the host reads from a sandbox (issue 18 §4), one at a time and
without a sandbox; the attacks themselves run in tests/reliability/test_hostile_channels.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import trees
from sandbox.disk_quota import BLOCK_BYTES, tree_bytes
from sandbox.runner_client import exec_result
from sandbox.trees import TreeTooLarge, remove_tree, walk_tree
from solver.agent.transcript import Transcript, read_transcript
from solver.verdict import junit_report as test_report
from solver.verdict.junit_report import ReportPipe, merge_reports, parse_junit
from tests.reliability.scorecard import CHANNELS
from tests.support.paths import REPO_ROOT, TESTS_DIR

LAUGHS = ('<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "lol">'
          + "".join(f'<!ENTITY a{i} "{"&a;" * 10}">' for i in range(1, 3))
          + ']><testsuites><testcase name="&a2;"/></testsuites>')
EXTERNAL = ('<?xml version="1.0"?><!DOCTYPE t [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
            '<testsuites><testcase name="x">&e;</testcase></testsuites>')


@pytest.mark.parametrize("document", [LAUGHS, EXTERNAL], ids=["laughs", "external"])
def test_a_doctype_is_refused_with_its_reason(document: str) -> None:
    refusals: list[str] = []
    assert merge_reports("junit", [document.encode()], refusals) is None
    assert refusals == ["the junit report was refused unread: a DOCTYPE (pytest writes "
                        "none; entities are how XML blows up)"]


def test_entities_under_expats_limit_cost_no_memory() -> None:
    """16 MiB of entities used 90 times each: ElementTree took ~1.5 GiB (measured)."""
    script = ("import resource\nfrom solver.verdict.junit_report import parse_junit\n"
              "e = ''.join(f'<!ENTITY a{i} \"{\"x\" * (1 << 20)}\">' for i in range(16))\n"
              "b = ''.join(f'<testcase name=\"t{i}\">{(\"&a%d;\" % i) * 90}</testcase>' "
              "for i in range(16))\n"
              "doc = f'<?xml version=\"1.0\"?><!DOCTYPE t [{e}]><testsuites>{b}</testsuites>'\n"
              "data = doc.encode()\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "assert parse_junit(data) is None\n"
              "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "print((after - before) // 1024)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    # What the parse itself added to the peak (building the document costs ~50 MiB, and
    # the interpreter's own start varies with the environment the suite leaves).
    assert int(done.stdout.split()[-1]) < 100, "MiB the parse added to the peak"


def test_nesting_tests_and_ids_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "<a>" * 100 + "</a>" * 100
    refusals: list[str] = []
    assert parse_junit(deep.encode(), refusals) is None and "64 levels" in refusals[0]
    monkeypatch.setattr(test_report, "JUNIT_MAX_TESTS", 10)
    many = "<testsuite>" + "".join(f'<testcase name="t{i}"/>' for i in range(11)) + \
        "</testsuite>"
    assert parse_junit(many.encode(), refusals) is None and "over 10 tests" in refusals[1]
    long_a, long_b = "a" * 5000, "a" * 4999 + "b"
    tests = parse_junit(f'<s><testcase name="{long_a}"/><testcase name="{long_b}"/>'
                        '</s>'.encode())
    assert tests is not None and len(tests) == 2, "ids cut apart stay apart"
    assert all(len(test_id) < 2100 for test_id in tests)


def test_only_a_testcases_own_children_set_its_status() -> None:
    xml = ('<testsuites><testsuite><testcase classname="m" name="outer" file="m.py">'
           '<testcase classname="m" name="inner" file="m.py"><failure/></testcase>'
           '<skipped type="pytest.xfail"/></testcase></testsuite></testsuites>')
    assert parse_junit(xml.encode()) == {"m.py::inner": "failed", "m.py::outer": "xfailed"}


def test_report_pipe_counts_what_it_no_longer_keeps(tmp_path: Path) -> None:
    pipe = ReportPipe(tmp_path / "r.xml", 1024, max_total_bytes=4096, max_writes=3)
    # Each write its own session: the writer waits for the host to reopen the FIFO.
    script = ("import time\nfor size in (10, 10, 10, 10, 2000):\n"
              "    open('r.xml', 'wb').write(b'x' * size); time.sleep(0.2)\n")
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, timeout=30, check=True)
    kept = pipe.close()
    assert len(kept) == 3 and pipe.sessions == 5 and pipe.bytes_seen == 2040
    assert pipe.oversize and pipe.overflow() is not None
    assert "was over 1,024 bytes" in pipe.overflow()  # type: ignore[operator]


def test_walk_tree_names_its_bound(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}").touch()
    with pytest.raises(TreeTooLarge, match="over 20 entries"):
        list(walk_tree(tmp_path, max_entries=20, max_seconds=60))
    deep = tmp_path / "d"
    deep.mkdir()
    current = deep
    for _ in range(10):
        current = current / "x"
        current.mkdir()
    with pytest.raises(TreeTooLarge, match="nested over 5 levels"):
        list(walk_tree(deep, max_entries=1000, max_seconds=60, max_depth=5))
    assert len(list(walk_tree(deep, max_entries=1000, max_seconds=60))) == 10


def test_remove_tree_empties_a_directory_a_batch_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trees, "SUBDIR_BATCH", 7)
    top = tmp_path / "top"
    for i in range(40):
        (top / f"d{i}" / "inner").mkdir(parents=True)
        (top / f"d{i}" / "file").touch()
    remove_tree(top)
    assert not top.exists()


def test_tree_bytes_stops_past_the_limit(tmp_path: Path) -> None:
    for i in range(100):
        (tmp_path / f"f{i}").touch()
    assert tree_bytes([tmp_path]) == 100 * BLOCK_BYTES
    assert tree_bytes([tmp_path], stop_above=10 * BLOCK_BYTES) == 11 * BLOCK_BYTES


def test_exec_output_is_cut_on_the_host_too() -> None:
    result = exec_result({"exit_code": 0, "stdout": "a" * 500 + "END", "stderr": 7}, 100)
    # 100 characters and room for the runner's own truncation line (64) are kept.
    assert result.stdout.endswith("a" * 161 + "END") and "339 characters cut" in result.stdout
    assert result.stderr == "" and result.truncated


def test_transcript_total_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with Transcript(path, max_chars=5_000) as transcript:
        transcript.write("run", model="m")
        for _ in range(10):
            transcript.write("turn", content="x" * 1000)
        transcript.write("result", exit_reason="agent")
    records = read_transcript(path)
    assert [r["kind"] for r in records] == ["run", *["turn"] * 10, "result"]
    assert sum("cut" in r for r in records) >= 5 and "cut" not in records[-1]
    assert len(path.read_text()) < 5_000 + 500


def test_every_channel_names_scenarios_that_exist() -> None:
    sources = "\n".join(p.read_text() for p in
                        (TESTS_DIR / "reliability").glob("test_*.py"))
    keys = set(re.findall(r'scorecard\(\s*f?"([^"{]+)', sources))
    for channel, _bound, scenarios in CHANNELS:
        for scenario in scenarios:
            assert any(key.startswith(scenario) for key in keys), (channel, scenario)
