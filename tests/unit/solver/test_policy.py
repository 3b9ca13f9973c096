"""What the bot never pushes (solver/policy.py)."""

from __future__ import annotations

from solver.policy import forbidden_paths


def test_workflows_and_protected_paths_are_never_pushed() -> None:
    paths = [".github/workflows/ci.yml", ".github/frognano.yml", "docs/a/b.md", "LICENSE",
             "src/app.py", "vendor/lib.c"]
    assert forbidden_paths(paths, ()) == [".github/workflows/ci.yml"]
    assert forbidden_paths(paths, ("docs/**", "LICENSE", "vendor/")) == [
        ".github/workflows/ci.yml", "docs/a/b.md", "LICENSE", "vendor/lib.c"]
    # A local action runs inside the repository's workflows, with their secrets.
    assert forbidden_paths([".github/actions/setup/action.yml", ".github/actions.md"], ()) \
        == [".github/actions/setup/action.yml"]
