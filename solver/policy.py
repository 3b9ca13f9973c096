"""What the bot may push and as whom: paths it never pushes (workflows, the local actions
they run, submodule and LFS plumbing, the repository's `protected_paths`), its branch
names and its commit identity; and what a change edits that setup reads, which the reviewer
is told. Plain policy, shared by the solver's decision and the GitHub side's pushes."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

import pathspec

from solver.hostgit import HostRepo, Identity

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


# Files an inferred or configured setup reads: what a change to them would install.
_SETUP_INPUT_NAMES = frozenset({
    "setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "noxfile.py", "MANIFEST.in",
    "Pipfile", "Pipfile.lock", "poetry.lock", "pdm.lock", "uv.lock", "frognano.yml"})
_SETUP_INPUT = re.compile(r"(^|/)(requirements[^/]*|constraints[^/]*)\.(txt|in)$"
                          r"|(^|/)requirements/[^/]+\.(txt|in)$|\.lock$")


def setup_inputs(paths: list[str]) -> list[str]:
    """The changed paths that setup reads: the run installed none of them (setup ran on
    the files as they were), so the reviewer is told."""
    return [path for path in paths if PurePosixPath(path).name in _SETUP_INPUT_NAMES
            or _SETUP_INPUT.search(path)]


def not_installed_note(host: HostRepo, changed: list[str]) -> str:
    """`setup_inputs_note` over the change and what the bot's earlier commits on the branch
    changed (put back for setup by `distrust_setup`): a review's PR still holds those."""
    earlier = [] if host.setup_base == host.base else \
        host.changed_paths(host.base, against=host.setup_base)
    return setup_inputs_note(sorted({*changed, *earlier}))


def setup_inputs_note(paths: list[str]) -> str:
    """The sentence for the PR and the status comment; "" when the change touches none."""
    touched = setup_inputs(paths)
    if not touched:
        return ""
    shown = ", ".join(f"`{path}`" for path in touched[:10])
    more = f" and {len(touched) - 10} more" if len(touched) > 10 else ""
    return (f"the change edits what setup reads ({shown}{more}): not installed: the "
            "verdict ran with the setup of the original files")
