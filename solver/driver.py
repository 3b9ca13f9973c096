"""The one driver of a run, for every kind (the bot's first runs, reviews and CI repair
rounds, workers/run_kinds.py; `frognano solve`'s local run, frognano/solve_command.py):
the kind makes its request from the operator's defaults, the solver runs it, the kind
applies the outcome (a draft PR, a commit on top, a local branch, or a comment saying why
not). A new kind of run is one new class with these three methods."""

from __future__ import annotations

from typing import Protocol, TypeVar

from solver.defaults import RunDefaults
from solver.run import NoTestCommand, RunOutcome, RunRequest, run

Applied = TypeVar("Applied", covariant=True)


class RunKind(Protocol[Applied]):
    def request(self, defaults: RunDefaults) -> RunRequest:
        """What to solve, where, who hears it; the defaults whole."""
        ...

    def no_tests(self, error: NoTestCommand) -> Applied:
        """Nothing to judge a fix by (no test command, or no tests at all)."""
        ...

    def apply(self, outcome: RunOutcome) -> Applied:
        """The outcome made real: published, or said why not."""
        ...


def drive(kind: RunKind[Applied], defaults: RunDefaults) -> Applied:
    """`kind.request(defaults)` → `run()` → `kind.apply()`."""
    request = kind.request(defaults)
    try:
        outcome = run(request)
    except NoTestCommand as exc:
        return kind.no_tests(exc)
    return kind.apply(outcome)
