"""Poetry's dependency groups as pip requirements, for the inferred setup.

pip never reads `[tool.poetry.group.<name>.dependencies]` (nor the older
`[tool.poetry.dev-dependencies]`), and poetry-core's build installs only the main
dependencies: a Poetry project's pytest, its plugins and the libraries its tests import
live in those tables alone. Their constraints are Poetry's own syntax (`^1.2`, `~1.2`,
`*`, a bare `1.2.3`), rewritten here as PEP 440 specifiers. What cannot be installed from
an index (a `path`, `git` or `url` dependency) is left out and said; a constraint this
does not understand keeps the package, unpinned, so its tests still import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement

# `>= 1.2 < 2`: Poetry also joins constraints with spaces.
_SPLIT = re.compile(r"\s*,\s*|\s+(?=[<>=!~^])")
_NUMBERS = re.compile(r"^\d+(?:\.\d+)*")
_PEP440_OPERATOR = re.compile(r"^(===|~=|==|!=|<=|>=|<|>)\s*(\S+)$")
NOT_FROM_AN_INDEX = ("path", "git", "url", "file")
# A project name as PEP 508 spells one: never an option (`--index-url=…`) given to pip.
_NAME = re.compile(r"^[A-Z0-9](?:[A-Z0-9._-]*[A-Z0-9])?$", re.I)


Pair = tuple[str, str]  # (operator, version): `(">=", "1.2")`


def _parts(version: str) -> list[int]:
    found = _NUMBERS.match(version)
    return [int(p) for p in found.group(0).split(".")] if found else []


def _range(version: str, position: int) -> list[Pair]:
    """`>=version` and below the part at `position` plus one (^ and ~ ranges)."""
    parts = _parts(version)
    position = min(position, len(parts) - 1)
    upper = ".".join(map(str, [*parts[:position], parts[position] + 1]))
    return [(">=", version), ("<", upper)]


def _one(token: str) -> list[Pair] | None:
    """One Poetry constraint as PEP 440 pairs; None when it is not one."""
    if token in ("", "*"):
        return []
    if token.startswith("^") and _parts(token[1:]):
        # ^1.2.3 → <2, ^0.2.3 → <0.3, ^0.0.3 → <0.0.4: the first non-zero part moves.
        parts = _parts(token[1:])
        return _range(token[1:], next((i for i, p in enumerate(parts) if p), len(parts) - 1))
    if token.startswith("~") and not token.startswith("~=") and _parts(token[1:]):
        return _range(token[1:], 1)  # ~1.2.3 → <1.3, ~1 → <2
    found = _PEP440_OPERATOR.match(token)
    if found:
        return [(found.group(1), found.group(2))]
    if token.startswith("=") and _parts(token[1:]):
        return [("==", token[1:])]
    return [("==", token)] if _parts(token) else None


def _pairs(constraint: str) -> list[Pair] | None:
    if "|" in constraint:  # `^1 || ^2`: no one PEP 440 specifier says it
        return None
    pairs: list[Pair] = []
    for token in _SPLIT.split(constraint.strip()):
        rewritten = _one(token.strip())
        if rewritten is None:
            return None
        pairs += rewritten
    return pairs


def specifier(constraint: str) -> str | None:
    """`^1.2` → `>=1.2,<2`; None for what this does not rewrite (`||`, nonsense)."""
    pairs = _pairs(constraint)
    return None if pairs is None else ",".join(op + version for op, version in pairs)


def _python_marker(constraint: object) -> str | None:
    """A dependency's `python = "^3.8"` as a marker; "" when it has none; None when the
    constraint is not understood (the dependency is then left out: it may not install)."""
    pairs = _pairs(str(constraint)) if constraint is not None else []
    if pairs is None:
        return None
    return " and ".join(f'python_full_version {op} "{version}"' for op, version in pairs)


def requirement(name: str, spec: object) -> str | None:
    """One Poetry dependency as a PEP 508 line; None when it cannot come from an index."""
    if isinstance(spec, list):  # a constraint per Python version: the package, unpinned
        spec = {"version": "*", "extras": next((s.get("extras") for s in spec
                                                if isinstance(s, dict)), None)}
    if not isinstance(spec, dict):
        spec = {"version": str(spec)}
    if any(key in spec for key in NOT_FROM_AN_INDEX) or not _NAME.match(name):
        return None
    extras = spec.get("extras") if isinstance(spec.get("extras"), list) else []
    pinned = specifier(str(spec.get("version", "*")))
    marker = _python_marker(spec.get("python"))
    if marker is None:
        return None
    markers = " and ".join(m for m in (marker, str(spec.get("markers") or "")) if m)
    line = name + (f"[{','.join(map(str, extras))}]" if extras else "") + (pinned or "")
    line += f"; {markers}" if markers else ""
    try:
        return str(Requirement(line))
    except InvalidRequirement:
        return None if markers else name


@dataclass(frozen=True)
class PoetryGroup:
    requirements: tuple[str, ...]
    left_out: tuple[str, ...]  # `path`, `git` and `url` dependencies: no index has them


def groups(pyproject: dict) -> dict[str, PoetryGroup]:
    """Each Poetry group (the old `dev-dependencies` as `dev`) as pip requirements."""
    poetry = pyproject.get("tool", {}).get("poetry", {})
    if not isinstance(poetry, dict):
        return {}
    declared = poetry.get("group")
    declared = declared if isinstance(declared, dict) else {}
    tables = {str(name): group.get("dependencies")
              for name, group in declared.items() if isinstance(group, dict)}
    if isinstance(poetry.get("dev-dependencies"), dict):
        tables.setdefault("dev", poetry["dev-dependencies"])
    found: dict[str, PoetryGroup] = {}
    for group, table in tables.items():
        if not isinstance(table, dict):
            continue
        lines = {str(name): requirement(str(name), spec) for name, spec in table.items()
                 if str(name).lower() != "python"}
        found[group] = PoetryGroup(tuple(line for line in lines.values() if line),
                                   tuple(name for name, line in lines.items() if not line))
    return found
