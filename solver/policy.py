"""What the bot may push and as whom: paths it never pushes (workflows, the local actions
they run, submodule and LFS plumbing, the repository's `protected_paths`), its branch
names and its commit identity. Plain policy, shared by the solver's decision and the
GitHub side's pushes."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

import pathspec

from solver.hostgit import Identity

# Workflows, and the local actions they run (`uses: ./.github/actions/x` runs with secrets).
ALWAYS_FORBIDDEN = (".github/workflows/", ".github/actions/")
# Their parents, too: replaced by a link (`.github -> hub`, `.github/workflows -> ../ci`),
# `hub/workflows/x.yml` would be a workflow without any path under `.github/workflows/`.
FORBIDDEN_PARENTS = (".github", ".github/workflows", ".github/actions")
# Plumbing every clone reads: submodule URLs (`git clone --recursive` fetches them) and
# Git LFS endpoints. The bot never makes a submodule, so no fix needs these.
PLUMBING = (".gitmodules", ".lfsconfig")

def branch_for(issue_number: int) -> str:
    return f"frognano/issue-{issue_number}"


def forbidden_paths(paths: list[str], protected: tuple[str, ...],
                    links: Mapping[str, str] | None = None) -> list[str]:
    """Paths the bot must never push: workflows and local actions (in any case, or
    through a link standing in for their directories; `links` maps changed symlinks to
    their targets, `Snapshot.links`), `.gitmodules` and `.lfsconfig`, and the
    repository's `protected_paths`, matched as .gitignore lines are (`**/settings.py`
    also matches `settings.py`, `docs` and `/docs/**` protect the folder, a pattern
    without a slash matches at any depth)."""
    spec = pathspec.GitIgnoreSpec.from_lines(protected)
    links = links or {}
    return [path for path in paths
            if _always_forbidden(path)
            or (path in links and _always_forbidden(_link_target(path, links[path])))
            or spec.match_file(path)]


def _always_forbidden(path: str) -> bool:
    folded = path.casefold()  # a case-insensitive clone sees .GitHub/Workflows as theirs
    return (folded.startswith(ALWAYS_FORBIDDEN) or folded in FORBIDDEN_PARENTS
            or folded in PLUMBING)


def _link_target(path: str, target: str) -> str:
    """Where a link in the tree points, as a tree path ("" when it leaves the tree)."""
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return "" if target.startswith("/") or resolved.startswith("..") else resolved


def bot_identity(login: str) -> Identity:
    return (login, f"{login}@users.noreply.github.com")
