"""Evidence as data (solver/verdict/evidence.py): what each test shows, kept in run records
and read back, old records included."""

from __future__ import annotations

import json

import pytest

from solver.verdict.evidence import (
    FAILS_WITH_CHANGE,
    MODEL,
    NEW_FEATURE,
    PASSES_ON_BASE,
    REPOSITORY,
    REPRODUCES,
    TestEvidence,
    changed_test_functions,
    changed_tests,
    missing_name,
    model_evidence,
    names_added,
    repository_evidence,
    reproducing,
)
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.verdict import Verdict


def test_evidence_round_trips_through_json() -> None:
    entry = TestEvidence("tests/test_x.py::test_y", REPRODUCES, MODEL, "failed at an assertion")
    assert TestEvidence.from_dict(json.loads(json.dumps(entry.to_dict()))) == entry


def test_an_old_records_bare_test_id_is_a_test_that_reproduced() -> None:
    old = TestEvidence.from_dict("tests/test_x.py::test_y")
    assert old.test == "tests/test_x.py::test_y" and old.kind == REPRODUCES
    assert old.source == REPOSITORY


@pytest.mark.parametrize("bad", [{"kind": REPRODUCES}, 3, None, {"test": "t", "kind": "?"}])
def test_what_is_no_evidence_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        TestEvidence.from_dict(bad)


def test_a_verdict_is_verified_only_by_a_test_that_reproduces() -> None:
    shows_nothing = [TestEvidence("t::a", PASSES_ON_BASE, MODEL, "passed"),
                     TestEvidence("t::b", NEW_FEATURE, MODEL,
                                  "ImportError on a name the change adds")]
    unverified = Verdict(accepted=True, evidence=shows_nothing)
    assert not unverified.verified and reproducing(unverified.evidence) == []
    verified = Verdict(accepted=True, evidence=[
        *shows_nothing, TestEvidence("t::c", REPRODUCES, REPOSITORY, "failed")])
    assert verified.verified and reproducing(verified.evidence) == ["t::c"]
    data = json.loads(json.dumps(verified.to_dict()))
    assert data["verified"] is True
    assert [TestEvidence.from_dict(e) for e in data["evidence"]] == verified.evidence


# --- Telling a fix from a new feature ---------------------------------------------------

def _run(tests: dict[str, str], failures: dict[str, str] | None = None) -> TestVerdict:
    bad = any(s in ("failed", "error") for s in tests.values())
    return TestVerdict(command="t", exit_code=1 if bad else 0, timed_out=False, seconds=1.0,
                       output="", tests=tests, report="junit", failures=failures or {})


@pytest.mark.parametrize(("summary", "missing"), [
    ("AttributeError: module 'toolz' has no attribute 'tail'", ("AttributeError", "tail")),
    ("ImportError: cannot import name 'tail' from 'toolz' (/x/toolz/__init__.py)",
     ("ImportError", "tail")),
    ("ModuleNotFoundError: No module named 'toolz.extra'", ("ModuleNotFoundError",
                                                            "toolz.extra")),
    ("NameError: name 'tail' is not defined", ("NameError", "tail")),
    ("AssertionError: assert [1] == [2]", None),
    ("TypeError: 'NoneType' object has no attribute 'x'", None),  # not the type that says
])
def test_the_name_a_failure_says_is_missing(summary: str,
                                            missing: tuple[str, str] | None) -> None:
    assert missing_name(summary) == missing


def test_names_added_are_the_changes_names_the_base_lacks() -> None:
    base = {"pkg/core.py": b"def old():\n    pass\nclass K:\n    x = 1\n"}
    change = {"pkg/core.py": b"def old():\n    return 2\ndef tail():\n    pass\n"
                             b"class K:\n    x = 1\n    def __init__(self):\n"
                             b"        self.size = 0\n",
              "pkg/extra.py": b"from pkg.core import tail as last\n"}
    added = names_added(["pkg/core.py", "pkg/extra.py"], base.get, change.get)
    assert {"tail", "size", "last", "extra", "pkg.extra"} <= added
    assert "old" not in added and "K" not in added and "pkg" not in added


FEATURE = frozenset({"tail"})


@pytest.mark.parametrize(("on_base", "kind", "said"), [
    (_run({"t.py::test_n": "failed"}, {"t.py::test_n": "AssertionError: assert 3 == 2"}),
     REPRODUCES, "failed at an assertion"),
    (_run({"t.py::test_n": "failed"}, {"t.py::test_n": "ValueError: bad"}),
     REPRODUCES, "raised ValueError"),
    # Calling a name the base has, which is missing an attribute: still the bug.
    (_run({"t.py::test_n": "failed"},
          {"t.py::test_n": "AttributeError: 'NoneType' object has no attribute 'items'"}),
     REPRODUCES, "raised AttributeError"),
    (_run({"t.py::test_n": "failed"},
          {"t.py::test_n": "AttributeError: module 'toolz' has no attribute 'tail'"}),
     NEW_FEATURE, "AttributeError on a name the change adds (tail)"),
    # The model's new module cannot even be collected on the base: its tests' failure.
    (_run({"t.py": "error"}, {"t.py": "ImportError: cannot import name 'tail' from 'toolz'"}),
     NEW_FEATURE, "ImportError on a name the change adds (tail)"),
    (_run({"t.py": "error"}, {"t.py": "SyntaxError: invalid syntax"}), REPRODUCES,
     "raised SyntaxError"),
    (_run({"t.py::test_n": "failed"}, {"t.py::test_n": "failure: failed"}), REPRODUCES,
     "failed"),  # a report naming no exception (the unittest runner's)
    (_run({"t.py::test_n": "passed"}), PASSES_ON_BASE, "passed"),
    (_run({"t.py::test_n": "skipped"}), PASSES_ON_BASE, "did not run (skipped)"),
])
def test_each_model_test_is_classified_by_how_it_ends_on_the_base(
        on_base: TestVerdict, kind: str, said: str) -> None:
    [entry] = model_evidence({"t.py::test_n": "passed"}, on_base, FEATURE)
    assert (entry.kind, entry.source, entry.on_base) == (kind, MODEL, said)


def test_a_test_failing_with_the_change_is_said_so() -> None:
    on_base = _run({"t.py::test_n": "failed"}, {"t.py::test_n": "AssertionError: x"})
    [entry] = model_evidence({"t.py::test_n": "failed"}, on_base, FEATURE)
    assert entry.kind == FAILS_WITH_CHANGE
    assert model_evidence({"t.py::test_n": "skipped"}, on_base, FEATURE) == []


def test_a_repository_test_fixed_is_evidence_unless_it_flipped() -> None:
    baseline = _run({"t::bug": "failed", "t::ok": "passed"},
                    {"t::bug": "AssertionError: assert 1 == 2"})
    final = _run({"t::bug": "passed", "t::ok": "passed"})
    assert repository_evidence(baseline, None, final, FEATURE) == [
        TestEvidence("t::bug", REPRODUCES, REPOSITORY, "failed at an assertion")]
    flipped = _run({"t::bug": "passed", "t::ok": "passed"})
    assert repository_evidence(baseline, flipped, final, FEATURE) == []


def test_the_models_changed_test_functions_are_found_by_their_code() -> None:
    before = b"def test_a():\n    assert 1\n\nclass TestK:\n    def test_b(self):\n" \
             b"        assert 1\n"
    after = b"def test_a():\n    assert 1\n\nclass TestK:\n    def test_b(self):\n" \
            b"        assert 2\n\ndef test_c():\n    pass\n"
    changed = changed_test_functions(before, after)
    assert changed == {"TestK::test_b", "test_c"}
    ids = ["t.py::test_a", "t.py::TestK::test_b", "t.py::TestK::test_b[1]", "u.py::test_c"]
    assert changed_tests(ids, {"t.py": changed}) == ["t.py::TestK::test_b",
                                                     "t.py::TestK::test_b[1]"]
