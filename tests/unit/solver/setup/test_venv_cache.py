"""The setup cache's parts on real git trees and real files: what misses the key, what the
cap evicts, and that restoring never writes through a link (solver/setup/venv_cache.py).
The whole cache through bubblewrap and pip: tests/reliability/test_setup_cache.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sandbox.index_endpoint import PackageSources
from solver.hostgit import HostRepo
from solver.setup import venv_cache
from tests.conftest import git, make_repo

COMMAND = 'python3 -m venv "${HOME%/home}/venv" && pip install -e . -r ci/deps.txt'
FILES = {"pyproject.toml": "[project]\nname = 'p'\n", "setup.cfg": "[metadata]\n",
         "requirements/testing.txt": "coverage\n", "ci/deps.txt": "pytest\n",
         "poetry.lock": "# lock\n", "src/p/__init__.py": "x = 1\n", "README.md": "hi\n",
         "tests/test_p.py": "def test(): pass\n"}


def _inputs(tmp_path: Path, name: str, change: dict[str, str]) -> tuple[dict, dict]:
    source = make_repo(tmp_path / "src", FILES)
    before = venv_cache.tree_inputs(
        HostRepo.create(source, None, tmp_path / "a" / "git", tmp_path / "a" / "ws"), COMMAND)
    for path, text in change.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    git(source, "add", "-A")
    git(source, "commit", "-qm", name)
    after = venv_cache.tree_inputs(
        HostRepo.create(source, None, tmp_path / "b" / "git", tmp_path / "b" / "ws"), COMMAND)
    return before, after


@pytest.mark.parametrize("name, change", [
    ("pyproject", {"pyproject.toml": "[project]\nname = 'p'\ndependencies = ['six']\n"}),
    ("setup.cfg", {"setup.cfg": "[options]\ninstall_requires = six\n"}),
    ("requirements folder", {"requirements/testing.txt": "coverage\nhypothesis\n"}),
    ("lock file", {"poetry.lock": "# lock 2\n"}),
    ("a file the command names", {"ci/deps.txt": "pytest\nmock\n"}),
    ("a new requirement file", {"requirements-dev.txt": "black\n"}),
    ("a new top-level package", {"src/q/__init__.py": ""}),
])
def test_a_setup_input_change_misses(tmp_path: Path, name: str, change: dict) -> None:
    before, after = _inputs(tmp_path, name, change)
    assert before != after, name


def test_a_source_or_test_change_keeps_the_key(tmp_path: Path) -> None:
    before, after = _inputs(tmp_path, "code", {"src/p/__init__.py": "x = 2\n",
                                               "tests/test_p.py": "def test(): assert 1\n",
                                               "README.md": "hello\n"})
    assert before == after


def _entry(root: Path, name: str, size: int, used: float) -> Path:
    entry = root / "venv-cache" / venv_cache.ENTRIES / name
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text(json.dumps({"bytes": size}))
    os.utime(entry, (used, used))
    return entry


def _download(root: Path, name: str, size: int, used: float) -> Path:
    path = root / "package-cache" / "sha256" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    os.utime(path, (used, used))
    return path


def test_the_cap_evicts_least_recently_used_across_both_caches(tmp_path: Path) -> None:
    now = time.time()
    day = 86_400
    oldest = _download(tmp_path, "a" * 64, 64 * 1024, now - 5 * day)
    old_venv = _entry(tmp_path, "old", 200 * 1024, now - 4 * day)
    newer = _download(tmp_path, "b" * 64, 64 * 1024, now - 3 * day)
    recent_venv = _entry(tmp_path, "recent", 200 * 1024, now - 2 * day)
    in_use = _entry(tmp_path, "in-use", 200 * 1024, now - 10)  # a run may be copying it
    sources = PackageSources(cache_dir=tmp_path / "package-cache",
                             venv_cache_dir=tmp_path / "venv-cache",
                             cache_max_bytes=480 * 1024)
    removed = venv_cache.evict(sources, now=now)
    assert removed == [oldest, old_venv]
    assert newer.exists() and recent_venv.exists() and in_use.exists()
    assert not old_venv.exists() and not old_venv.with_name(".old-old").exists()
    assert venv_cache.evict(PackageSources(cache_dir=tmp_path / "package-cache"),
                            now=now) == [], "no cap: nothing goes"


def test_the_entry_just_stored_is_kept_even_over_the_cap(tmp_path: Path) -> None:
    now = time.time()
    kept = _entry(tmp_path, "big", 10 * 1024**2, now - 7200)
    sources = PackageSources(venv_cache_dir=tmp_path / "venv-cache", cache_max_bytes=1024)
    assert venv_cache.evict(sources, keep=kept, now=now) == []
    assert venv_cache.evict(sources, now=now) == [kept]


def test_setup_writes_are_what_setup_added_changed_or_removed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "__init__.py").write_text("x = 1\n")
    (ws / "gone.txt").write_text("x")
    before = venv_cache._workspace_state(ws)
    assert before is not None
    (ws / "pkg.egg-info").mkdir()
    (ws / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\n")
    (ws / "pkg" / "__init__.py").write_text("x = 22\n")
    (ws / "gone.txt").unlink()
    after = venv_cache._workspace_state(ws)
    assert after is not None
    assert venv_cache.setup_writes(before, after) == (
        ["pkg.egg-info", "pkg.egg-info/PKG-INFO", "pkg/__init__.py"], ["gone.txt"])


def test_restoring_writes_never_follows_a_link_in_the_workspace(tmp_path: Path) -> None:
    """A repository may commit `build -> /somewhere`: the cached `build/x` must not land
    there, and the restore fails (the run then sets up as on a miss)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "build").symlink_to(outside)
    files = tmp_path / "entry" / "workspace"
    (files / "build").mkdir(parents=True)
    (files / "build" / "x").write_text("cached\n")
    with pytest.raises(OSError):
        venv_cache._write_into(files, ws, None)
    assert list(outside.iterdir()) == []
    (ws / "build").unlink()
    (ws / "kept.txt").symlink_to(outside / "target")
    (files / "kept.txt").write_text("a file now\n")
    assert venv_cache._write_into(files, ws, None) == 2
    assert not (ws / "kept.txt").is_symlink() and not (outside / "target").exists()
    assert (ws / "build" / "x").read_text() == "cached\n"
