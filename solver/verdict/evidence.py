"""What shows that a change does what the issue asks: per test, how it ends on the base
code and with the change (issue 28 §1).

A test *reproduces* the issue when it fails on the base code (at an assertion, or at an
exception raised inside code the base has) and passes with the change. One that fails on
the base only because it imports or calls a name the change adds shows a *new feature*,
not a fix. One that passes on the base too shows nothing; one that fails with the change
is the change's failure. Pure data: the verdict (verdict.py) fills it, the PR body, the
run page and `solve`'s output render it.
"""

from __future__ import annotations

from dataclasses import dataclass

REPRODUCES = "reproduces"
NEW_FEATURE = "new_feature"
PASSES_ON_BASE = "passes_on_base"
FAILS_WITH_CHANGE = "fails_with_change"
KINDS = (REPRODUCES, NEW_FEATURE, PASSES_ON_BASE, FAILS_WITH_CHANGE)

REPOSITORY = "repository"  # a repository test that failed at baseline and passes now
MODEL = "model"  # a new or changed test of the model's, run against the base tree
SOURCES = (REPOSITORY, MODEL)

# What an old run record's bare test id meant: a test that failed on the base code and
# passed with the change (the only evidence recorded then).
_OLD_RECORD_ON_BASE = "failed"


@dataclass(frozen=True)
class TestEvidence:
    """One test's evidence: its node id, what it shows (`kind`), whose test it is
    (`source`) and how it ended on the base code, in a short plain phrase (`on_base`)."""

    __test__ = False  # not a pytest test class

    test: str
    kind: str
    source: str
    on_base: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown evidence kind: {self.kind!r}")
        if self.source not in SOURCES:
            raise ValueError(f"unknown evidence source: {self.source!r}")

    @property
    def reproduces(self) -> bool:
        return self.kind == REPRODUCES

    def to_dict(self) -> dict[str, str]:
        return {"test": self.test, "kind": self.kind, "source": self.source,
                "on_base": self.on_base}

    @classmethod
    def from_dict(cls, data: object) -> TestEvidence:
        """From `to_dict`'s mapping, or from a bare test id: how run records before
        issue 28 stored evidence (a test that reproduced; whose, they did not say)."""
        if isinstance(data, str):
            return cls(data, REPRODUCES, REPOSITORY, _OLD_RECORD_ON_BASE)
        if not isinstance(data, dict) or not isinstance(data.get("test"), str):
            raise ValueError(f"not a test's evidence: {data!r:.200}")
        return cls(data["test"], str(data.get("kind", REPRODUCES)),
                   str(data.get("source", REPOSITORY)), str(data.get("on_base", "")))


def reproducing(evidence: list[TestEvidence]) -> list[str]:
    """The ids of the tests that reproduce the issue, in order."""
    return [entry.test for entry in evidence if entry.reproduces]
