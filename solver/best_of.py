"""Best of N: independent attempts at one issue, the smallest passing change chosen.

`.github/frognano.yml`'s `attempts_in_parallel: N` (cut to the operator's
FROGNANO_MAX_PARALLEL_ATTEMPTS) runs N agents on the same plan, each with its own seed
(the run's first seed + k), workspace, host git directory, sandbox and transcript. Among
those whose decision is publish (`run_path.decide`), `choose` takes the fewest changed
lines, then the fewest files: the tests are the judge, and the smaller of two passing
changes is the one a reviewer can check.

The model serves `model_slots` streams at once (FROGNANO_MODEL_SLOTS). With one, the
attempts run one after another and stop at the first that passes; with more, that many
run at once and all that started are compared. The rule for both: an attempt not yet
started when one has passed is skipped. A stale run (superseded or cancelled) stops every
attempt at its next step. Attempt 0 keeps the paths a single run has always had (the
run directory, the transcript's name), so N = 1 is the run it was.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from solver.agent.harness import RunPlan
from solver.agent.result import SolveResult
from solver.agent.run_events import Event, EventOutput, Outputs, RunFinished
from solver.agent.transcript import Transcript
from solver.hostgit import HostRepo
from solver.models.base import ModelClient
from solver.repo_config import RepoConfig
from solver.report import AttemptLine, AttemptsReport
from solver.run_path import Decision, decide, execute
from solver.setup.package_index import NO_INDEX, PackageIndex


@dataclass(frozen=True, kw_only=True)
class AttemptStarted(Event):
    """The transcript of one of several attempts says which it is."""

    kind: ClassVar[str] = "attempt"
    index: int
    of: int
    seed: int | None

    def fields(self) -> dict[str, Any]:
        return {"index": self.index, "of": self.of, "seed": self.seed}


@dataclass(frozen=True, kw_only=True)
class AttemptEnded(Event):
    """Live only (the attempt's transcript has its result): one of several attempts ended,
    for the status comment, which never sees the held `RunFinished`."""

    index: int
    exit_reason: str


class AttemptOfThread:
    """Whose event it is, for outputs shared by several attempts (the status comment, the
    terminal): the events do not name their attempt, but an attempt runs in one thread
    from its `AttemptStarted` to its `AttemptEnded` (`run_attempts`' `one`)."""

    def __init__(self) -> None:
        self._by_thread: dict[int, int] = {}

    def see(self, event: Event) -> int | None:
        """The index of the attempt `event` belongs to; None in a run of one attempt.
        Every event must pass through here, in the thread that emitted it."""
        ident = threading.get_ident()
        if isinstance(event, AttemptStarted):
            self._by_thread[ident] = event.index
        elif isinstance(event, AttemptEnded):
            self._by_thread.pop(ident, None)
            return event.index
        return self._by_thread.get(ident)


@dataclass(frozen=True, kw_only=True)
class AttemptsChosen(Event):
    """Which attempt the run published (or reports), and how each one ended."""

    kind: ClassVar[str] = "attempts"
    chosen: int
    published: bool
    attempts: list[dict[str, Any]]

    def fields(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "published": self.published,
                "attempts": self.attempts}


@dataclass(frozen=True)
class Attempt:
    """One finished attempt, as `choose` sees it."""

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


@dataclass(frozen=True)
class Choice:
    chosen: Attempt  # the published one; when none passed, the one reported
    others: list[Attempt]  # by index

    @property
    def published(self) -> bool:
        return self.chosen.decision.action == "publish"


def choose(attempts: Sequence[Attempt]) -> Choice:
    """The passing attempt with the fewest changed lines, then files, then the earliest.
    When none passes: the first refused one (its tests passed; the refusal is the news),
    else the first."""
    if not attempts:
        raise ValueError("no attempt finished")
    passing = [a for a in attempts if a.decision.action == "publish"]
    if passing:
        chosen = min(passing, key=lambda a: (a.lines, a.files, a.index))
    else:
        refused = [a for a in attempts if a.decision.action == "refuse"]
        chosen = min(refused or attempts, key=lambda a: a.index)
    return Choice(chosen, sorted((a for a in attempts if a is not chosen),
                                 key=lambda a: a.index))


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


def summary(attempt: Attempt, chosen: Attempt) -> AttemptLine:
    """An attempt's line in the PR body or the failure comment (bot/messages.py)."""
    decision, result = attempt.decision, attempt.result
    if decision.action == "publish":
        outcome = "chosen" if attempt is chosen else "passed, larger change"
    elif decision.action == "refuse":
        outcome = f"passed, refused ({decision.outcome.removeprefix('refused_')})"
    elif decision.outcome == "failed":
        outcome = f"failed ({result.exit_reason})"
    else:
        outcome = f"failed ({decision.outcome})"  # no_change
    return AttemptLine(number=attempt.index + 1, seed=attempt.seed, outcome=outcome,
                       steps=result.steps, tokens=result.usage.completion_tokens,
                       lines=attempt.lines, files=attempt.files)


class _Locked:
    """Outputs shared by attempts running in threads, one event at a time."""

    def __init__(self, output: EventOutput) -> None:
        self.output, self.lock = output, threading.Lock()

    def emit(self, event: Event) -> None:
        with self.lock:
            self.output.emit(event)


class _HoldResult:
    """Keeps an attempt's `RunFinished` from the run record, so that the record's result
    columns are the chosen attempt's, stored once the choice is made."""

    def __init__(self, output: EventOutput, held: dict[int, RunFinished], index: int
                 ) -> None:
        self.output, self.held, self.index = output, held, index

    def emit(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            self.held[self.index] = event
            self.output.emit(AttemptEnded(index=self.index,
                                          exit_reason=event.result.exit_reason))
        else:
            self.output.emit(event)


@dataclass
class Attempts:
    """What `run_attempts` hands back: the choice, each attempt's host git directory (the
    chosen one's is published), and what the PR body says about the others."""

    choice: Choice
    hosts: dict[int, HostRepo]
    models: dict[int, str]
    planned: int  # attempts the run was allowed
    asked: int  # attempts_in_parallel
    slots: int

    @property
    def host(self) -> HostRepo:
        return self.hosts[self.choice.chosen.index]

    @property
    def model(self) -> str:
        return self.models[self.choice.chosen.index]

    def report(self) -> AttemptsReport | None:
        """For the PR body or the failure comment; None when one attempt was asked."""
        if self.asked == 1:
            return None
        chosen = self.choice.chosen
        return AttemptsReport(asked=self.asked, allowed=self.planned, slots=self.slots,
                              chosen=summary(chosen, chosen),
                              others=[summary(a, chosen) for a in self.choice.others],
                              published=self.choice.published)


def first_seed(fixed: int | None) -> int:
    return fixed if fixed is not None else random.SystemRandom().randrange(2**31)


def run_attempts(*, plan: RunPlan, config: RepoConfig, first_host: HostRepo,
                 open_host: Callable[[int], HostRepo],
                 model_for: Callable[[int | None], ModelClient],
                 transcript_for: Callable[[int], Path], shared: EventOutput,
                 opening: Event, sandbox_backend: str,
                 should_stop: Callable[[], bool], asked: int = 1, max_attempts: int = 1,
                 slots: int = 1, seed: int | None = None,
                 package_index: PackageIndex = NO_INDEX) -> Attempts:
    """Run the plan `min(asked, max_attempts)` times (`asked`: the config's
    `attempts_in_parallel`, or 1 where the caller wants one), `slots` at once. Attempt 0
    runs in `first_host` (where the plan was prepared), attempt k in `open_host(k)`.
    `shared` (run record, status comment) hears every attempt; each transcript opens
    with `opening`. With one attempt nothing changes from a single run: the backend's
    own seed (unless `seed` is set), no attempt records, no threads."""
    planned = min(asked, max_attempts)
    several = planned > 1
    base = first_seed(seed) if several else seed
    shared = _Locked(shared)
    passed, crashed = threading.Event(), threading.Event()
    hosts: dict[int, HostRepo] = {}
    models: dict[int, str] = {}
    finished: dict[int, Attempt] = {}
    held: dict[int, RunFinished] = {}

    def stopping() -> bool:
        return crashed.is_set() or should_stop()

    def one(k: int) -> None:
        if k > 0 and (passed.is_set() or stopping()):  # one passed first, or the run ends
            return
        try:
            attempt_seed = None if base is None else (base + k) % 2**31
            host = hosts[k] = first_host if k == 0 else open_host(k)
            model = model_for(attempt_seed)
            models[k] = model.name
            with Transcript(transcript_for(k)) as transcript:
                transcript.emit(opening)
                events = Outputs(transcript, _HoldResult(shared, held, k) if several
                                 else shared)
                if several:
                    events.emit(AttemptStarted(index=k, of=planned, seed=attempt_seed))
                result = execute(plan, model, host, sandbox_backend, events,
                                 should_stop=stopping, package_index=package_index)
        except BaseException:
            crashed.set()  # the others stop at their next step; the crash is the run's
            raise
        decision = decide(result, config)
        finished[k] = Attempt(k, attempt_seed, result, decision)
        if decision.action == "publish":
            passed.set()

    if slots == 1 or not several:
        for k in range(planned):
            one(k)
    else:
        with ThreadPoolExecutor(max_workers=min(slots, planned),
                                thread_name_prefix="attempt") as pool:
            try:
                for future in [pool.submit(one, k) for k in range(planned)]:
                    future.result()
            except BaseException:  # Celery's soft time limit lands in this thread
                crashed.set()
                raise
    choice = choose([finished[k] for k in sorted(finished)])
    if several:
        shared.emit(held[choice.chosen.index])
        shared.emit(AttemptsChosen(
            chosen=choice.chosen.index, published=choice.published,
            attempts=[vars(summary(finished[k], choice.chosen)) for k in sorted(finished)]))
    return Attempts(choice, hosts, models, planned, asked, slots)
