"""The names used before issue 22 §1 gave each meaning of one old word its own (rules of
the vocabulary: docs/ARCHITECTURE.md "Words"): a round (one agent pass ending in a verdict
run), a candidate (one of best-of-N agents), a run number (the Nth run of one issue) and a
try (one call in solver/retry.py).

Read, never written: a repository's `.github/frognano.yml`, an operator's environment and a
`solve` command line of before keep working, and run records and transcripts stored before
still render. This module is the one place of the product that spells the old names
(tests/test_vocabulary.py), so each is written here once, as data.
"""

from __future__ import annotations

from typing import Any

# `.github/frognano.yml`: new key -> its old name (solver/repo_config.py).
CONFIG_KEYS = {"max_rounds": "max_attempts", "candidates": "attempts_in_parallel",
               "ci_fix_rounds": "ci_fix_attempts"}  # the last: issue 23 §2's name
# The environment: new variable -> its old name (bot/settings.py).
SETTINGS = {"FROGNANO_MAX_CANDIDATES": "FROGNANO_MAX_PARALLEL_ATTEMPTS"}
# `frognano solve`'s flags: new flag -> its old spelling (frognano/cli.py).
SOLVE_FLAGS = {"--max-rounds": "--max-attempts", "--candidates": "--attempts"}

# Stored records: an old exit reason -> today's (runs.exit_reason, a result record).
EXIT_REASONS = {"max_attempts": "max_rounds"}
# Transcript records (solver/agent/run_events.py, solver/best_of.py): old kind -> new.
RECORD_KINDS = {"attempt": "candidate", "attempts": "candidates"}
# Keys renamed inside records: (kind, old key) -> new key; kind "*" for every kind.
RECORD_KEYS = {("*", "attempt"): "round", ("candidates", "attempts"): "candidates"}
# Keys renamed one level down: a result record's `totals`, a run record's `limits`.
NESTED_KEYS = {"totals": {"attempts": "rounds"}, "limits": {"max_attempts": "max_rounds"}}


def exit_reason(reason: str | None) -> str | None:
    """Today's name of a stored exit reason."""
    return EXIT_REASONS.get(reason, reason) if reason is not None else None


def current_record(record: dict[str, Any]) -> dict[str, Any]:
    """A transcript record as today's code writes it: a record stored before the rename
    gets the new kind, keys and exit reasons; a record of today comes back as it is."""
    kind = record.get("kind")
    if not isinstance(kind, str):
        return record
    kind = RECORD_KINDS.get(kind, kind)
    upgraded: dict[str, Any] = {}
    for key, value in record.items():
        new = RECORD_KEYS.get((kind, key)) or RECORD_KEYS.get(("*", key)) or key
        upgraded.setdefault(new, value)
    upgraded["kind"] = kind
    for key in ("exit_reason", "reason"):
        if isinstance(upgraded.get(key), str):
            upgraded[key] = exit_reason(upgraded[key])
    for key, renamed in NESTED_KEYS.items():
        inner = upgraded.get(key)
        if isinstance(inner, dict):
            upgraded[key] = {renamed.get(k, k): v for k, v in inner.items()}
    if kind == "candidates" and isinstance(upgraded.get("candidates"), list):
        upgraded["candidates"] = [_candidate_line(line) for line in upgraded["candidates"]]
    return upgraded


def _candidate_line(line: Any) -> Any:
    """A candidates record's line: its outcome names the exit reason, "failed (reason)"."""
    if not isinstance(line, dict) or not isinstance(line.get("outcome"), str):
        return line
    outcome = line["outcome"]
    for old, new in EXIT_REASONS.items():
        outcome = outcome.replace(f"({old})", f"({new})")
    return {**line, "outcome": outcome}
