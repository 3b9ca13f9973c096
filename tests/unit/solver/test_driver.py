"""The one driver (solver/driver.py): `kind.request(defaults)` → `run()` → `kind.apply()`,
and a repository with nothing to judge by goes to `kind.no_tests`. A real run: real git,
a real sandbox, the scripted model; the kind is a plain class, as a new kind would be."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from solver.defaults import RunDefaults
from solver.driver import drive
from solver.models.base import ModelClient
from solver.models.scripted import ScriptedModel, final_answer
from solver.run import NoTestCommand, RunOutcome, RunRequest, Workspace
from tests.conftest import git, make_repo
from tests.reliability.stack import FIX_CALC
from tests.support.sandbox_support import reachable_dir


def scripted(seed: int | None) -> ModelClient:
    return ScriptedModel([FIX_CALC, final_answer("Fixed.")], seed=seed)


@dataclass
class Recorded:
    """A kind that keeps what the driver handed it."""

    source: Path
    run_dir: Path
    asked: list[RunDefaults] = field(default_factory=list)

    def request(self, defaults: RunDefaults) -> RunRequest:
        self.asked.append(defaults)
        return RunRequest(issue="add() subtracts", defaults=defaults,
                          workspace=Workspace(source=self.source, run_dir=self.run_dir),
                          transcript_for=lambda k: self.run_dir.parent / f"{k}.jsonl")

    def no_tests(self, error: NoTestCommand) -> str:
        return f"no tests: {error}"

    def apply(self, outcome: RunOutcome) -> str:
        return f"{outcome.decision.outcome} with {outcome.result.final.summary()}" \
            if outcome.result.final else outcome.decision.outcome


def test_the_kind_makes_the_request_from_the_defaults_and_applies_the_outcome() -> None:
    defaults = RunDefaults(model_for=scripted, sandbox_backend="unsafe-local")
    with reachable_dir() as root:
        kind = Recorded(make_repo(root / "calc", template="calc_repo"), root / "run")
        applied = drive(kind, defaults)
    assert kind.asked == [defaults], "the defaults whole, once"
    assert applied.startswith("pr_opened with PASS"), applied


def test_a_repository_without_tests_goes_to_the_kinds_no_tests(tmp_path: Path) -> None:
    def never(seed: int | None) -> ModelClient:
        raise AssertionError("no model runs without tests")

    source = tmp_path / "docs"
    source.mkdir()
    (source / "README.md").write_text("docs only\n")
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "README.md")
    git(source, "-c", "user.name=A", "-c", "user.email=a@e", "commit", "-qm", "docs")
    with reachable_dir() as root:
        applied = drive(Recorded(source, root / "run"), RunDefaults(model_for=never))
    assert applied.startswith("no tests: the repository has no tests"), applied


@pytest.mark.parametrize("raised", [RuntimeError("the mirror is gone")])
def test_anything_else_the_run_raises_is_the_callers(raised: Exception, tmp_path: Path
                                                     ) -> None:
    """Only a missing test command is a kind's to say; a crash stays a crash (the worker
    reports it as one)."""

    class Crashing(Recorded):
        def request(self, defaults: RunDefaults) -> RunRequest:
            raise raised

    with pytest.raises(RuntimeError, match="the mirror is gone"):
        drive(Crashing(tmp_path, tmp_path / "run"), RunDefaults(model_for=scripted))
