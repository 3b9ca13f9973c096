"""Evidence as data (solver/verdict/evidence.py): what each test shows, kept in run records
and read back, old records included."""

from __future__ import annotations

import json

import pytest

from solver.verdict.evidence import (
    MODEL,
    NEW_FEATURE,
    PASSES_ON_BASE,
    REPOSITORY,
    REPRODUCES,
    TestEvidence,
    reproducing,
)
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
