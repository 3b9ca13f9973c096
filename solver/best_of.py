"""Best of N as data: which of several candidates for one issue is chosen, how each is
summed up, and the events and outputs that tell them apart (solver/run.py runs them).

`.github/frognano.yml`'s `candidates: N` (cut to the operator's
FROGNANO_MAX_CANDIDATES) runs N agents on the same plan, each with its own seed
(the run's first seed + k), workspace, host git directory, sandbox and transcript. Among
those whose decision is publish (`run.decide`), `choose` ranks by evidence first (the
tests that fail on the base code and pass with the change, then the repository's tests
it fixed, then the fewest still failing), then takes the fewest changed lines and files:
the tests are the judge, and of two changes that show the same, the smaller is the one a
reviewer can check. A partial fix one line shorter never beats the whole one.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from solver.agent.result import SolveResult
from solver.agent.run_events import Event, EventOutput, RunFinished
from solver.report import CandidateLine
from solver.verdict.evidence import BAD, reproducing

if TYPE_CHECKING:
    from solver.run import Decision


@dataclass(frozen=True, kw_only=True)
class CandidateStarted(Event):
    """The transcript of one of several candidates says which it is."""

    kind: ClassVar[str] = "candidate"
    index: int
    of: int
    seed: int | None

    def fields(self) -> dict[str, Any]:
        return {"index": self.index, "of": self.of, "seed": self.seed}


@dataclass(frozen=True, kw_only=True)
class CandidateEnded(Event):
    """Live only (the candidate's transcript has its result): one of several candidates ended,
    for the status comment, which never sees the held `RunFinished`."""

    index: int
    exit_reason: str


class CandidateOfThread:
    """Whose event it is, for outputs shared by several candidates (the status comment, the
    terminal): the events do not name their candidate, but a candidate runs in one thread
    from its `CandidateStarted` to its `CandidateEnded` (`run.BestOf.candidate`)."""

    def __init__(self) -> None:
        self._by_thread: dict[int, int] = {}

    def see(self, event: Event) -> int | None:
        """The index of the candidate `event` belongs to; None in a run of one candidate.
        Every event must pass through here, in the thread that emitted it."""
        ident = threading.get_ident()
        if isinstance(event, CandidateStarted):
            self._by_thread[ident] = event.index
        elif isinstance(event, CandidateEnded):
            self._by_thread.pop(ident, None)
            return event.index
        return self._by_thread.get(ident)


@dataclass(frozen=True, kw_only=True)
class CandidatesChosen(Event):
    """Which candidate the run published (or reports), and how each one ended."""

    kind: ClassVar[str] = "candidates"
    chosen: int
    published: bool
    candidates: list[dict[str, Any]]

    def fields(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "published": self.published,
                "candidates": self.candidates}


@dataclass(frozen=True)
class Candidate:
    """One finished candidate, as `choose` sees it."""

    index: int  # 0-based; people read index + 1
    seed: int | None
    result: SolveResult
    decision: Decision

    @property
    def lines(self) -> int:
        return changed_lines(self.result.snapshot.diff) if self.result.snapshot else 0

    @property
    def files(self) -> int:
        return len(self.result.snapshot.paths) if self.result.snapshot else 0

    def evidence(self) -> tuple[int, int, int]:
        """(tests that reproduce the issue, repository tests fixed, tests still failing)."""
        result = self.result
        verdict = result.verdict
        reproduce = len(reproducing(verdict.evidence)) if verdict else 0
        before = result.baseline.tests if result.baseline else {}
        after = result.final.tests if result.final else {}
        fixed = sum(1 for test, status in before.items()
                    if status in BAD and after.get(test) == "passed")
        failing = sum(1 for status in after.values() if status in BAD)
        return reproduce, fixed, failing


@dataclass(frozen=True)
class Choice:
    chosen: Candidate  # the published one; when none passed, the one reported
    others: list[Candidate]  # by index

    @property
    def published(self) -> bool:
        return self.chosen.decision.action == "publish"


def choose(candidates: Sequence[Candidate]) -> Choice:
    """The passing candidate with the most evidence (`Candidate.evidence`), then the
    fewest changed lines, then files, then the earliest. When none passes: the first
    refused one (its tests passed; the refusal is the news), else the first."""
    if not candidates:
        raise ValueError("no candidate finished")
    passing = [a for a in candidates if a.decision.action == "publish"]
    if passing:
        chosen = min(passing, key=_rank)
    else:
        refused = [a for a in candidates if a.decision.action == "refuse"]
        chosen = min(refused or candidates, key=lambda a: a.index)
    return Choice(chosen, sorted((a for a in candidates if a is not chosen),
                                 key=lambda a: a.index))


def _rank(candidate: Candidate) -> tuple[int, ...]:
    reproduce, fixed, failing = candidate.evidence()
    return (-reproduce, -fixed, failing, candidate.lines, candidate.files, candidate.index)


def changed_lines(diff: str) -> int:
    """Added plus removed lines of a `git diff --binary`; a binary file counts the lines of
    its patch, so a big blob is never "small". Headers are told by position, not text: a
    removed line `-- x` shows as `--- x` inside a hunk. Lines end at "\\n" alone, as git's
    do: `splitlines` also cuts at a form feed, \\x1c-\\x1e, \\x85 or U+2028 inside a line,
    and a model's line `x\\x1cdiff --git ` then hid every line after it."""
    count, section = 0, "header"
    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            section = "header"
        elif line.startswith("@@"):  # a hunk line starts with " ", "+", "-" or "\\"
            section = "hunk"
        elif section == "header" and line == "GIT binary patch":
            section = "binary"
        elif (section == "hunk" and line[:1] in ("+", "-")) or (section == "binary" and line):
            count += 1
    return count


def summary(candidate: Candidate, chosen: Candidate) -> CandidateLine:
    """A candidate's line in the PR body or the failure comment (bot/messages.py)."""
    decision, result = candidate.decision, candidate.result
    if decision.action == "publish":
        outcome = "chosen" if candidate is chosen else (
            "passed, larger change" if candidate.evidence() == chosen.evidence()
            else "passed, less evidence")
    elif decision.action == "refuse":
        outcome = f"passed, refused ({decision.outcome.removeprefix('refused_')})"
    elif decision.outcome == "failed":
        outcome = f"failed ({result.exit_reason})"
    else:
        outcome = f"failed ({decision.outcome})"  # no_change
    return CandidateLine(number=candidate.index + 1, seed=candidate.seed, outcome=outcome,
                         steps=result.steps, tokens=result.usage.completion_tokens,
                         lines=candidate.lines, files=candidate.files)


class LockedOutput:
    """Outputs shared by candidates running in threads, one event at a time."""

    def __init__(self, output: EventOutput) -> None:
        self.output, self.lock = output, threading.Lock()

    def emit(self, event: Event) -> None:
        with self.lock:
            self.output.emit(event)


class HoldResult:
    """Keeps a candidate's `RunFinished` from the run record, so that the record's result
    columns are the chosen candidate's, stored once the choice is made."""

    def __init__(self, output: EventOutput, held: dict[int, RunFinished], index: int
                 ) -> None:
        self.output, self.held, self.index = output, held, index

    def emit(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            self.held[self.index] = event
            self.output.emit(CandidateEnded(index=self.index,
                                          exit_reason=event.result.exit_reason))
        else:
            self.output.emit(event)


def first_seed(fixed: int | None) -> int:
    return fixed if fixed is not None else random.SystemRandom().randrange(2**31)
