"""The verdict's parts, fast: reports read from real pytest runs, the restore plan, the
decision, and the inferred Python setup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.setup.python_setup import declared_extras, infer_python_setup
from solver.verdict.evidence import reproducing
from solver.verdict.junit_report import (
    parse_go_json,
    parse_junit,
    read_report,
    report_request,
)
from solver.verdict.repo_tests import PYTEST_COMMAND, TestVerdict
from solver.verdict.suite_paths import TreePlan, plan_verdict_tree, shadows_runner
from solver.verdict.verdict import decide

SAMPLE = '''
import pytest

class TestK:
    @pytest.mark.parametrize("x", ["a b", "/tmp", "x::y", "[/x]"])
    def test_p(self, x):
        assert x != "/tmp"

@pytest.mark.xfail
def test_xf():
    assert 0

@pytest.mark.skip
def test_sk():
    pass

@pytest.fixture
def broken():
    yield
    raise RuntimeError("teardown")

def test_teardown(broken):
    assert 0
'''


def run_with_report(tmp_path: Path, command: str = PYTEST_COMMAND) -> tuple[int, bytes | None]:
    request = report_request(command, str(tmp_path / "reports"), "tok123")
    (tmp_path / "reports").mkdir(exist_ok=True)
    proc = subprocess.run(["bash", "-c", request.command], cwd=tmp_path, capture_output=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return proc.returncode, read_report(Path(request.inside_path))


def test_junit_report_of_a_real_run_keeps_ids_whole(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sample.py").write_text(SAMPLE)
    code, data = run_with_report(tmp_path)
    assert code == 1 and data is not None
    assert parse_junit(data) == {
        "tests/test_sample.py::TestK::test_p[a b]": "passed",
        "tests/test_sample.py::TestK::test_p[/tmp]": "failed",
        "tests/test_sample.py::TestK::test_p[x::y]": "passed",
        "tests/test_sample.py::TestK::test_p[[/x]]": "passed",
        "tests/test_sample.py::test_xf": "xfailed",
        "tests/test_sample.py::test_sk": "skipped",
        "tests/test_sample.py::test_teardown": "failed",
    }


def test_report_reaches_pytest_behind_a_wrapper_and_names_collection_errors(
        tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text("import not_a_module\n")
    (tmp_path / "run-tests.sh").write_text(f"#!/bin/sh\nexec {sys.executable} -m pytest\n")
    code, data = run_with_report(tmp_path, "sh run-tests.sh")
    assert code == 2 and data is not None
    assert parse_junit(data) == {"test_broken.py": "error"}


def test_report_reading_refuses_links_and_oversize(tmp_path: Path) -> None:
    (tmp_path / "big.xml").write_bytes(b"x" * 100)
    (tmp_path / "link.xml").symlink_to(tmp_path / "big.xml")
    assert read_report(tmp_path / "big.xml", max_bytes=99) is None
    assert read_report(tmp_path / "link.xml") is None
    assert read_report(tmp_path / "absent.xml") is None
    assert parse_junit(b"<testsuites><testcase") is None


def test_go_json_events_and_command() -> None:
    request = report_request("go test -v ./...", "/frognano/r", "t")
    assert request.kind == "go-json"
    assert request.command == "go test -json ./... > /frognano/r/t.jsonl"
    events = b"\n".join([
        b'{"Action":"run","Package":"ex/m","Test":"TestA"}',
        b'{"Action":"pass","Package":"ex/m","Test":"TestA"}',
        b'{"Action":"fail","Package":"ex/m","Test":"TestB/case one"}',
        b'{"Action":"skip","Package":"ex/m","Test":"TestC"}',
        b"# ex/n [build failed]",
        b'{"Action":"fail","Package":"ex/n"}',
    ])
    assert parse_go_json(events) == {"ex/m/TestA": "passed", "ex/m/TestB/case one": "failed",
                                     "ex/m/TestC": "skipped", "ex/n (package)": "error"}


def test_plan_restores_tests_and_config_and_refuses_shadowing() -> None:
    base = {"tests/test_a.py": b"x", "conftest.py": b"", "pyproject.toml":
            b"[project]\nname='p'\n[tool.pytest.ini_options]\naddopts='-q'\n",
            "src/p.py": b""}
    candidate = {**base, "tests/test_new.py": b"y", "sub/conftest.py": b"z",
                 "pyproject.toml": b"[project]\nname='p'\n[tool.pytest.ini_options]\n"
                                   b"addopts='-q --deselect tests/test_a.py::t'\n",
                 "pytest.py": b"", "_pytest/__init__.py": b"", "src/p.py": b"fixed"}
    del candidate["conftest.py"]
    changed = [p for p in set(base) | set(candidate) if base.get(p) != candidate.get(p)]
    plan = plan_verdict_tree(changed, base.get, candidate.get)
    assert plan.restore == ["conftest.py", "sub/conftest.py", "tests/test_new.py"]
    assert plan.new_test_files == ["tests/test_new.py"]
    assert len(plan.refusals) == 2
    assert "adds _pytest/__init__.py, which would shadow `_pytest`" in plan.refusals[0]
    # The pytest section goes back to the base's for the verdict, shown and flagged.
    assert plan.restored_files["pyproject.toml"] == base["pyproject.toml"]
    assert "pyproject.toml" in plan.model_tests
    assert any("ini_options.addopts" in flag for flag in plan.flags), plan.flags
    # Other edits to pyproject.toml are the change's own business.
    other = {**base, "pyproject.toml": base["pyproject.toml"] + b"[tool.ruff]\n"}
    assert plan_verdict_tree(["pyproject.toml"], base.get, other.get).refusals == []
    assert shadows_runner("src/pytest.py") is None and shadows_runner("py.py") == "py"


def verdict(tests: dict[str, str], exit_code: int = 0, report: str = "junit") -> TestVerdict:
    return TestVerdict(command="t", exit_code=exit_code, timed_out=False, seconds=1.0,
                       output="", tests=tests, report=report)


BASE = verdict({"t::a": "failed", "t::b": "passed", "t::c": "skipped"}, exit_code=1)


@pytest.mark.parametrize(("final", "reason"), [
    (verdict({"t::a": "passed", "t::b": "passed", "t::c": "skipped"}), None),
    (verdict({"t::b": "passed", "t::c": "skipped"}), "test no longer runs: t::a"),
    (verdict({"t::a": "skipped", "t::b": "passed", "t::c": "skipped"}),
     "test is now skipped: t::a"),
    (verdict({"t::a": "xfailed", "t::b": "passed", "t::c": "skipped"}),
     "test is now xfailed: t::a"),
    (verdict({"t::a": "failed", "t::b": "passed", "t::c": "skipped"}),
     "the test run exited 0 but its report lists 1 failing test(s), e.g. t::a"),
    (verdict({"t::a": "passed", "t::b": "passed", "t::c": "skipped"}, exit_code=1),
     "the test run exited 1 although every test in its report passed"),
    (verdict({"t::a": "passed", "t::b": "passed"}),
     "test is no longer collected: t::c (was skipped)"),
    (verdict({}, exit_code=0, report="missing"),
     "the test run wrote no readable report (the baseline did)"),
    (verdict({"t::a": "failed", "t::b": "passed", "t::c": "skipped"}, exit_code=1),
     "test still fails: t::a"),
])
def test_decision(final: TestVerdict, reason: str | None) -> None:
    result = decide(BASE, final, TreePlan())
    assert result.accepted is (reason is None)
    assert result.reasons == [] if reason is None else reason in result.reasons


def test_model_tests_count_only_as_new_tests() -> None:
    final = verdict({"t::a": "passed", "t::b": "passed", "t::c": "skipped"})
    added = verdict({**final.tests, "t::new1": "passed", "t::new2": "passed"})
    plan = TreePlan(restore=["tests/test_n.py"], model_tests=["tests/test_n.py"],
                    new_test_files=["tests/test_n.py"])
    result = decide(BASE, final, plan, added)
    assert result.accepted and result.new_tests_summary() == "new tests: 2 passed"
    broken = verdict({**final.tests, "t::new1": "failed"}, exit_code=1)
    refused = decide(BASE, final, plan, broken)
    assert refused.reasons == ["new test fails: t::new1"]


def test_exit_code_mode_says_so() -> None:
    base = verdict({}, exit_code=1, report="none")
    result = decide(base, verdict({}, exit_code=0, report="none"), TreePlan())
    assert result.accepted and result.mode == "exit code"
    assert "verdict from the exit code only" in result.notes[0]
    failed = decide(base, verdict({}, exit_code=3, report="none"), TreePlan())
    assert failed.reasons == ["the test run failed with exit code 3"]


def test_inferred_python_setup(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'p'\n[project.optional-dependencies]\n"
        "docs = ['x']\ndev = ['y']\ntesting = ['pytest']\n")
    (tmp_path / "requirements-dev.txt").write_text("z\n")
    setup = infer_python_setup(tmp_path)
    assert setup is not None
    assert setup.command.endswith("pip install -e '.[testing]' -r requirements-dev.txt")
    assert "`testing` extra" in setup.note and "requirements-dev.txt" in setup.note
    (tmp_path / "pyproject.toml").write_text("[tool.black]\n")
    assert infer_python_setup(tmp_path) is not None  # the requirements file still counts
    (tmp_path / "requirements-dev.txt").unlink()
    assert infer_python_setup(tmp_path) is None
    (tmp_path / "setup.py").write_text(
        "setup(name='q', extras_require={'docs': [], 'tests': ['pytest']})\n")
    assert declared_extras(tmp_path) == ["docs", "tests"]
    assert "-e '.[tests]'" in infer_python_setup(tmp_path).command


def test_host_repo_reads_regular_files_of_a_tree_only(tmp_path: Path) -> None:
    from solver.hostgit import HostRepo
    from tests.conftest import git

    source = tmp_path / "src"
    source.mkdir()
    (source / "a.py").write_bytes(b"x = 1\n")
    os.symlink("a.py", source / "link.py")
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "base")
    repo = HostRepo.create(source, None, tmp_path / "git", tmp_path / "work")
    (repo.work_tree / "a.py").write_bytes(b"x = 2\n")
    tree = repo.snapshot().tree
    assert repo.read(tree, "a.py") == b"x = 2\n"
    assert repo.read(repo.base, "a.py") == b"x = 1\n"
    assert repo.read(tree, "link.py") is None and repo.read(tree, "nope.py") is None


def test_report_pipe_counts_every_write_and_cannot_be_rewritten(tmp_path: Path) -> None:
    from solver.verdict.junit_report import ReportPipe, documents

    pipe = ReportPipe(tmp_path / "r.xml")
    xml = ('<?xml version="1.0"?><testsuites><testsuite><testcase name="t"/>'
           '</testsuite></testsuites>')
    # pytest's write, then a rewrite by an atexit hook: two reports, however fast.
    subprocess.run(["bash", "-c", f"echo '{xml}' > r.xml; echo '{xml}' > r.xml"],
                   cwd=tmp_path, timeout=20)
    assert len(documents("junit", pipe.close())) == 2
    assert (tmp_path / "r.xml").is_fifo()


# --- Baseline failures not caused by the change (issue 20 §4) ---------------------------
# t::tz fails on the host before and after; t::bug is the issue's; t::ok passes.
RED = verdict({"t::tz": "failed", "t::bug": "failed", "t::ok": "passed"}, exit_code=1)


def _after(**tests: str) -> TestVerdict:
    statuses = {"t::tz": "failed", "t::bug": "passed", "t::ok": "passed", **{
        f"t::{name}": status for name, status in tests.items()}}
    return verdict(statuses, exit_code=1 if any(s in ("failed", "error")
                                                for s in statuses.values()) else 0)


def test_a_failure_before_and_after_is_excused_with_evidence() -> None:
    from solver.verdict.verdict import Reruns, needs_second_baseline

    final = _after()
    assert needs_second_baseline(RED, final)
    assert not decide(RED, final, TreePlan()).accepted  # no second run: today's rule
    result = decide(RED, final, TreePlan(), reruns=Reruns(second=RED))
    assert result.accepted, result.reasons
    assert result.preexisting == ["t::tz"] and reproducing(result.evidence) == ["t::bug"]
    assert result.to_dict()["preexisting"] == ["t::tz"]


@pytest.mark.parametrize(("final", "second", "reason"), [
    # A do-nothing change: both still fail the same way; nothing shows it does anything.
    (_after(bug="failed"), RED, "no evidence the change does anything"),
    # Failing differently after the change is no pre-existing failure.
    (_after(tz="error"), RED, "test still errors: t::tz"),
    # A test that passed at baseline fails: blamed, whatever else is excused.
    (_after(ok="failed"), RED, "test fails: t::ok"),
    # The test flipped between the baseline runs: flaky, so no evidence.
    (_after(), verdict({**RED.tests, "t::bug": "passed"}, exit_code=1),
     "no evidence the change does anything"),
    # A pytest exit status other than the baseline's.
    (verdict({**_after().tests}, exit_code=3), RED, "the test run failed with exit code 3"),
])
def test_an_excuse_never_hides_a_change(final: TestVerdict, second: TestVerdict,
                                        reason: str) -> None:
    from solver.verdict.verdict import Reruns

    result = decide(RED, final, TreePlan(), reruns=Reruns(second=second))
    assert not result.accepted and any(reason in r for r in result.reasons), result.reasons


def test_a_flaky_test_is_named_never_blamed() -> None:
    from solver.verdict.verdict import Reruns

    second = verdict({**RED.tests, "t::ok": "failed"}, exit_code=1)
    result = decide(RED, _after(ok="failed"), TreePlan(), reruns=Reruns(second=second))
    assert result.accepted and result.flaky == ["t::ok"], result.reasons
    assert reproducing(result.evidence) == ["t::bug"]


def test_green_baseline_needs_no_second_run() -> None:
    from solver.verdict.verdict import needs_second_baseline

    green = verdict({"t::ok": "passed"})
    assert not needs_second_baseline(green, verdict({"t::ok": "failed"}, exit_code=1))
    assert not needs_second_baseline(RED, verdict({"t::tz": "passed", "t::bug": "passed",
                                                   "t::ok": "passed"}))


def test_the_models_test_is_evidence_only_if_it_fails_on_the_base() -> None:
    from solver.verdict.verdict import Reruns

    final = _after(bug="failed")  # the repository's tests show nothing
    added = verdict({**final.tests, "t::new": "passed"}, exit_code=1)
    plan = TreePlan(restore=["t"], model_tests=["t"])
    for on_base, accepted in ((verdict({**RED.tests, "t::new": "failed"}, 1), True),
                              (verdict({**RED.tests, "t::new": "passed"}, 1), False),
                              (verdict({**RED.tests, "t": "error"}, 1), True)):
        result = decide(RED, final, plan, added, Reruns(RED, on_base))
        assert result.accepted is accepted, result.reasons
        assert reproducing(result.evidence) == (["t::new"] if accepted else [])
        # Said loudly: no repository test shows anything, and t::bug is among the excused.
        assert any("the only evidence is the model's own new test(s) (t::new)" in flag
                   for flag in result.flags) is accepted
    fixed = decide(RED, _after(), plan, verdict({**_after().tests, "t::new": "passed"}, 1),
                   Reruns(RED, verdict({**RED.tests, "t::new": "failed"}, 1)))
    assert fixed.accepted and fixed.flags == []
    assert reproducing(fixed.evidence) == ["t::bug", "t::new"]


# --- Evidence with a green baseline (issue 28 §1) ----------------------------------------
GREEN = verdict({"t::ok": "passed"})


def test_a_failure_summary_is_read_from_a_real_report(tmp_path: Path) -> None:
    from solver.verdict.junit_report import FAILURE_SUMMARY_CHARS

    (tmp_path / "test_a.py").write_text(
        "import os\n\ndef test_assert():\n    assert [1] == [2]\n\n"
        "def test_missing():\n    os.no_such_name()\n\n"
        "def test_long():\n    raise ValueError('x' * 5000)\n")
    (tmp_path / "test_b.py").write_text("from os import no_such_name\n")
    failures: dict[str, str] = {}
    for target in ("test_a.py", "test_b.py"):
        _, data = run_with_report(tmp_path, f"{PYTEST_COMMAND} {target}")
        assert data is not None and parse_junit(data, None, failures) is not None
    assert failures["test_a.py::test_assert"].startswith("AssertionError: assert [1] == [2]")
    assert failures["test_a.py::test_missing"] == (
        "AttributeError: module 'os' has no attribute 'no_such_name'")
    assert failures["test_a.py::test_long"].startswith("ValueError: xxx")
    assert len(failures["test_a.py::test_long"]) == FAILURE_SUMMARY_CHARS
    # A collection error's message is pytest's "collection failure": its text tells.
    assert failures["test_b.py"].startswith(
        "ImportError: cannot import name 'no_such_name' from 'os'")


def test_with_a_green_baseline_the_models_test_run_on_the_base_is_the_evidence() -> None:
    from solver.verdict.evidence import NEW_FEATURE, PASSES_ON_BASE, REPRODUCES
    from solver.verdict.verdict import Reruns

    plan = TreePlan(restore=["t"], model_tests=["t"])
    added = verdict({"t::ok": "passed", "t::new": "passed"})
    cases = [
        (verdict({"t::ok": "passed", "t::new": "failed"}), REPRODUCES),
        (verdict({"t::ok": "passed", "t::new": "passed"}), PASSES_ON_BASE),
        (TestVerdict(command="t", exit_code=1, timed_out=False, seconds=1.0, output="",
                     tests={"t::ok": "passed", "t::new": "failed"}, report="junit",
                     failures={"t::new": "ImportError: cannot import name 'tail'"}),
         NEW_FEATURE),
    ]
    for on_base, kind in cases:
        result = decide(GREEN, GREEN, plan, added,
                        Reruns(model_tests_on_base=on_base, new_names=frozenset({"tail"})))
        assert result.accepted, result.reasons  # evidence never refuses by itself
        assert [(e.test, e.kind) for e in result.evidence] == [("t::new", kind)]
        assert result.verified is (kind == REPRODUCES)
    # The model's edit of an original test is its test too.
    changed = decide(GREEN, GREEN, plan, verdict({"t::ok": "passed"}),
                     Reruns(model_tests_on_base=verdict({"t::ok": "failed"}),
                            changed_tests=("t::ok",)))
    assert [(e.test, e.kind) for e in changed.evidence] == [("t::ok", REPRODUCES)]


def test_a_new_feature_test_never_excuses_a_failing_repository_test() -> None:
    from solver.verdict.verdict import Reruns

    final = _after(bug="failed")  # the repository's tests show nothing
    added = verdict({**final.tests, "t::new": "passed"}, exit_code=1)
    plan = TreePlan(restore=["t"], model_tests=["t"])
    on_base = TestVerdict(command="t", exit_code=1, timed_out=False, seconds=1.0, output="",
                          tests={**RED.tests, "t::new": "failed"}, report="junit",
                          failures={"t::new": "AttributeError: module 'm' has no attribute "
                                    "'tail'"})
    for names, accepted in ((frozenset({"tail"}), False), (frozenset(), True)):
        result = decide(RED, final, plan, added, Reruns(RED, on_base, new_names=names))
        assert result.accepted is accepted, result.reasons
        assert accepted or any("no evidence the change does anything" in r
                               for r in result.reasons)
