"""What the run outside pytest (solver/verdict/outside_pytest.py) makes of its runner's
statuses: a test's own skip disagrees like a failure, the runner's "cannot run" refuses
nothing and becomes a bounded note for the reviewer, and the refused ids are read back
whole (parameter ids may hold spaces)."""

from __future__ import annotations

from solver.verdict.outside_pytest import (
    CANNOT,
    COULD_NOT,
    MAX_NOTED,
    PlainRun,
    addressable,
    could_not_run,
    disagreeing_tests,
    disagreements,
)

SKIPPED = "t.py::test_skip"
PARAMS = "t.py::test_p[a b-1]"


def _run() -> PlainRun:
    run = PlainRun()
    for test, status, detail in ((SKIPPED, "skipped", "needs a terminal"),
                                 (PARAMS, "failed", "AssertionError: "),
                                 ("t.py::test_ok", "passed", ""),
                                 ("t.py::test_mocker", CANNOT, "fixture mocker is a plugin's")):
        run.results[test], run.details[test] = status, detail
    run.results["t.py::test_quiet"] = "no result"
    run.exits["t.py"] = 0
    return run


def test_a_skip_is_a_disagreement_and_cannot_run_is_not() -> None:
    reasons = disagreements(_run())
    assert reasons == [
        "test passes under pytest but not outside it: t.py::test_p[a b-1] failed when its "
        "module is run by plain python (AssertionError: )",
        "test passes under pytest but not outside it: t.py::test_quiet gave no result (its "
        "process ended with exit code 0 before it reported) when its module is run by plain "
        "python",
        "test passes under pytest but not outside it: t.py::test_skip skipped itself when "
        "its module is run by plain python (needs a terminal)"]
    assert disagreeing_tests(reasons) == [PARAMS, "t.py::test_quiet", SKIPPED]


def test_what_could_not_run_is_noted_with_its_reason_and_bounded() -> None:
    assert could_not_run(_run(), ["../up.py::test_x"]) == [
        f"{COULD_NOT}`t.py::test_mocker` (fixture mocker is a plugin's)",
        f"{COULD_NOT}`../up.py::test_x` (its id names no file in the tree)"]
    many = PlainRun(results={f"t.py::test_{i}": CANNOT for i in range(MAX_NOTED + 5)})
    notes = could_not_run(many, [])
    assert len(notes) == MAX_NOTED + 1 and notes[-1] == f"{COULD_NOT}5 more test(s)"


def test_which_ids_the_runner_is_given() -> None:
    assert addressable("pkg/mod.py::pkg.mod.func")  # a doctest
    assert addressable("docs/usage.txt::usage.txt")
    assert addressable("t.py::TestA::test_b[x-[1]]")
    assert not addressable("../up.py::test_x")
    assert not addressable("/abs/t.py::test_x")
    assert not addressable("t.py")
