"""Plain data the solver reports about a best-of-N run, for the GitHub side and the CLI to
render (stdlib only: the receiver imports it through bot/messages.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttemptLine:
    """How one of several attempts at an issue ended (solver/best_of.py)."""

    number: int  # 1-based
    seed: int | None
    outcome: str  # chosen, passed…, failed (reason): the bot's own words
    steps: int
    tokens: int
    lines: int  # lines changed
    files: int


@dataclass(frozen=True)
class AttemptsReport:
    """Best of N: what was asked and allowed, and every attempt that ran."""

    asked: int  # `attempts_in_parallel`
    allowed: int  # after the operator's FROGNANO_MAX_PARALLEL_ATTEMPTS
    slots: int  # attempts the model runs at once
    chosen: AttemptLine  # the published one, or when none passed the one reported
    others: list[AttemptLine]
    published: bool
