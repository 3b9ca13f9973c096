"""Plain data the solver reports about a best-of-N run, for the GitHub side and the CLI to
render (stdlib only: the receiver imports it through bot/messages.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CandidateLine:
    """How one of several candidates at an issue ended (solver/best_of.py)."""

    number: int  # 1-based
    seed: int | None
    outcome: str  # chosen, passed…, failed (reason): the bot's own words
    steps: int
    tokens: int
    lines: int  # lines changed
    files: int


@dataclass(frozen=True)
class CandidatesReport:
    """Best of N: what was asked and allowed, and every candidate that ran."""

    asked: int  # `candidates`
    allowed: int  # after the operator's FROGNANO_MAX_CANDIDATES
    slots: int  # candidates the model runs at once
    chosen: CandidateLine  # the published one, or when none passed the one reported
    others: list[CandidateLine]
    published: bool
