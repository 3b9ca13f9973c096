"""What setup compiled reaches every test tree, and nothing else does (setup_builds.py)."""

from __future__ import annotations

import _json
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from solver.verdict import setup_builds
from solver.verdict.setup_builds import SetupBuilds, record_builds, stale_build_flags

# A real extension module, as an editable install leaves one beside its package.
ELF = Path(_json.__file__).read_bytes()
EXT = "pkg/_fast.cpython-311-x86_64-linux-gnu.so"
TRACKED = ["pkg/__init__.py", "pkg/fast.c", "pkg/sub/data.txt", "pkg/vendored.so",
           "setup.py"]


def _setup_tree(root: Path) -> Path:
    """A tree as setup leaves it: the repository's files, the extension it built in
    place, and what is not an extension module of the repository's folders."""
    tree = root / "tree"
    for path in TRACKED:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(ELF if path.endswith(".so") else b"x = 1\n")
    (tree / EXT).write_bytes(ELF)
    (tree / EXT).chmod(0o755)
    (tree / "pkg/sub/_inner.abi3.so").write_bytes(ELF)
    (tree / "pkg/linker-script.so").write_text("INPUT(-lfoo)\n")  # named so, no ELF
    (tree / "pkg/_link.so").symlink_to(_json.__file__)  # a link is never read through
    for folder in ("build/lib/pkg", ".venv/lib/site-packages", ".git/objects"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "_fast.so").write_bytes(ELF)  # not a folder of the repository's
    return tree


def test_only_the_extension_modules_setup_built_are_recorded(tmp_path: Path) -> None:
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")

    assert [f.path for f in builds.files] == [EXT, "pkg/sub/_inner.abi3.so"]
    first = builds.files[0]
    assert (first.size, first.sha256) == (len(ELF), hashlib.sha256(ELF).hexdigest())
    assert first.mode == 0o755 and builds.left_out == []
    assert SetupBuilds.load(tmp_path / "store") == builds  # a replay's runner reads it


def test_each_test_tree_gets_the_recorded_files(tmp_path: Path) -> None:
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")
    test_tree = tmp_path / "test-tree"
    (test_tree / "pkg" / "sub").mkdir(parents=True)

    assert builds.place(test_tree) == []
    placed = test_tree / EXT
    assert placed.read_bytes() == ELF and stat.S_IMODE(placed.stat().st_mode) == 0o755
    assert (test_tree / "pkg/sub/_inner.abi3.so").read_bytes() == ELF
    assert sorted(p.name for p in (test_tree / "pkg").iterdir()) == [EXT.split("/")[1], "sub"]


def test_a_tree_whose_folder_is_a_link_is_not_written_through(tmp_path: Path) -> None:
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")
    outside = tmp_path / "outside"
    outside.mkdir()
    test_tree = tmp_path / "test-tree"
    test_tree.mkdir()
    (test_tree / "pkg").symlink_to(outside)  # the change made the package a link

    skipped = builds.place(test_tree)

    assert len(skipped) == 2 and skipped[0].startswith(EXT)
    assert list(outside.iterdir()) == []


def test_a_path_the_tree_holds_is_left_as_it_is(tmp_path: Path) -> None:
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")
    test_tree = tmp_path / "test-tree"
    (test_tree / "pkg" / "sub").mkdir(parents=True)
    (test_tree / EXT).write_bytes(b"the change's own file\n")

    assert [s.split(" ")[0] for s in builds.place(test_tree)] == [EXT]
    assert (test_tree / EXT).read_bytes() == b"the change's own file\n"


def test_a_stored_copy_that_changed_is_not_placed(tmp_path: Path) -> None:
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")
    (tmp_path / "store" / "files" / "0").write_bytes(ELF[:100] + bytes([ELF[100] ^ 1])
                                                       + ELF[101:])
    test_tree = tmp_path / "test-tree"
    (test_tree / "pkg" / "sub").mkdir(parents=True)

    skipped = builds.place(test_tree)

    assert skipped == [f"{EXT} (its stored copy no longer matches the recorded hash)"]
    assert not (test_tree / EXT).exists()


def test_files_and_bytes_past_the_bounds_are_named_not_carried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup_builds, "MAX_FILES", 1)
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")
    assert [f.path for f in builds.files] == [EXT]
    assert builds.left_out == ["pkg/sub/_inner.abi3.so (over 1 built files)"]

    monkeypatch.setattr(setup_builds, "MAX_BYTES", len(ELF) + 10)
    monkeypatch.setattr(setup_builds, "MAX_FILES", 10)
    builds = record_builds(tmp_path / "tree", lambda: TRACKED, tmp_path / "store")
    assert [f.path for f in builds.files] == [EXT]
    assert builds.left_out[0].startswith("pkg/sub/_inner.abi3.so (over the 0 MiB")


def test_a_walk_past_its_bound_says_so(tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup_builds, "WALK_MAX_ENTRIES", 3)
    builds = record_builds(_setup_tree(tmp_path), lambda: TRACKED, tmp_path / "store")
    assert builds.left_out == ["the setup tree was not searched further for built files: "
                               "over 3 entries"]


def test_a_tree_without_built_files_never_lists_the_repository(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")

    def never() -> list[str]:
        raise AssertionError("the repository's paths were asked for with nothing to carry")

    builds = record_builds(tree, never, tmp_path / "store")
    assert builds.files == [] and json.loads((tmp_path / "store/manifest.json").read_text()) \
        == {"files": [], "left_out": []}


def test_nothing_recorded_loads_as_nothing_to_carry(tmp_path: Path) -> None:
    builds = SetupBuilds.load(tmp_path / "never-recorded")
    (tmp_path / "t").mkdir()
    assert builds.files == [] and builds.place(tmp_path / "t") == []
    assert os.listdir(tmp_path / "t") == []


def test_an_edit_to_compiled_code_source_is_flagged_as_untested() -> None:
    base = {"pkg/fast.c": b"int a;\nint b;\n", "pkg/__init__.py": b"x = 1\n"}
    change = {"pkg/fast.c": b"int a;\nint c;\n", "pkg/__init__.py": b"x = 2\n",
              "pkg/new.pyx": b"def f(): pass\n"}
    built = record_like([EXT])

    flags = stale_build_flags(sorted(change), base.get, change.get, built)

    assert [(f.path, f.line, f.kind) for f in flags] == [
        ("pkg/fast.c", 2, "stale-build"), ("pkg/new.pyx", 1, "stale-build")]
    assert flags[0].what == ("edits compiled code's source; the tests ran the build setup "
                             f"made of the original source (`{EXT}`)")
    assert flags[1].what.startswith("adds compiled code's source")
    assert "no test run compiled or ran this edit" in flags[0].why
    none_built = stale_build_flags(["pkg/fast.c"], base.get, change.get, [])
    assert none_built[0].what.endswith("setup built no extension module, so no test ran it")
    assert stale_build_flags(["pkg/__init__.py"], base.get, change.get, built) == []


def record_like(paths: list[str]) -> list[setup_builds.BuiltFile]:
    return [setup_builds.BuiltFile(path, len(ELF), hashlib.sha256(ELF).hexdigest(), 0o755)
            for path in paths]
