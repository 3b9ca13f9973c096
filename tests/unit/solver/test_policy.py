"""What the bot never pushes, and what a fix contains (solver/policy.py)."""

from __future__ import annotations

import io
import py_compile
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from solver.hostgit import HostRepo
from solver.policy import (
    COMPILED_NAME,
    binary_code,
    compiled_code,
    forbidden_paths,
    source_text_refusals,
    unignores_code,
)
from tests.conftest import git, make_repo


def test_workflows_and_protected_paths_are_never_pushed() -> None:
    paths = [".github/workflows/ci.yml", ".github/frognano.yml", "docs/a/b.md", "LICENSE",
             "src/app.py", "vendor/lib.c"]
    assert forbidden_paths(paths, ()) == [".github/workflows/ci.yml"]
    assert forbidden_paths(paths, ("docs/**", "LICENSE", "vendor/")) == [
        ".github/workflows/ci.yml", "docs/a/b.md", "LICENSE", "vendor/lib.c"]
    # A local action runs inside the repository's workflows, with their secrets.
    assert forbidden_paths([".github/actions/setup/action.yml", ".github/actions.md"], ()) \
        == [".github/actions/setup/action.yml"]


# -- What a fix contains: source text, never compiled or binary code -----------------------

def _pyc(source: str) -> bytes:
    """A real unchecked-hash .pyc of `source`, as py_compile writes it."""
    with tempfile.TemporaryDirectory() as folder:
        src, out = Path(folder, "m.py"), Path(folder, "m.pyc")
        src.write_text(source)
        py_compile.compile(str(src), cfile=str(out), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        return out.read_bytes()


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("m.py", "X = 1\n")
    return buffer.getvalue()


def _tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = b"X = 1\n"
        info = tarfile.TarInfo("m.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(("head", "what"), [
    (b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0", "an ELF binary"),
    (b"\xcf\xfa\xed\xfe\x07\0\0\x01", "a Mach-O binary"),
    (b"MZ\x90\0\x03\0\0\0", "a Windows executable"),
    (b"\0asm\x01\0\0\0", "WebAssembly")])
def test_executables_are_known_by_their_first_bytes(head: bytes, what: str) -> None:
    assert binary_code(head + b"\0" * 64) == what


def test_compiled_python_and_archives_are_known_by_their_first_bytes() -> None:
    assert binary_code(_pyc("X = 1\n")) == "compiled Python"
    assert binary_code(_zip()) == "a zip archive"
    assert binary_code(_tar()) == "a tar archive"
    for data in (b"print('hi')\r\n\0", b"MZ is a text\n", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
                 "# ünïcode\r\n".encode(), b""):
        assert binary_code(data) is None, data


def test_compiled_names_wherever_they_are() -> None:
    compiled = ["pkg/__pycache__/m.cpython-311.pyc", "pkg/__pycache__/notes.txt", "m.pyo",
                "pkg/m.cpython-311-x86_64-linux-gnu.so", "m.abi3.so", "libx.so.1.2", "m.pyd",
                "m.dylib", "m.dll", "m.exe", "m.o", "libm.a", "dist/x-1.0-py3-none-any.whl",
                "x.egg", "x.zip", "x.tar", "x.tar.gz", "x.tgz", "x.pyz", "X.SO"]
    source = ["m.py", "so.py", "pkg/pycache.py", "docs/o.md", "zip.txt", "m.c", "m.pyi",
              "data/table.json", "README"]
    assert [p for p in compiled if not COMPILED_NAME.search(p)] == []
    assert [p for p in source if COMPILED_NAME.search(p)] == []


@pytest.mark.parametrize("line", ["!__pycache__/", "!*.py[cod]", "!*.pyc", "!*.so",
                                  "!/pkg/*.so", "!**/__pycache__/**", "!*", "!*.whl",
                                  "!*.tar.gz"])
def test_a_gitignore_that_unignores_compiled_files(line: str) -> None:
    before = b"__pycache__/\n*.py[cod]\n*.so\n"
    assert unignores_code(before, before + line.encode() + b"\n") == [line]


def test_a_gitignore_edit_that_unignores_no_compiled_file() -> None:
    before = b"*.log\n!keep.log\n"
    after = b"*.log\n!keep.log\n!important.log\n!docs/\n\\!literal\n*.so\n"
    assert unignores_code(before, after) == []
    assert unignores_code(b"!*.so\n", b"!*.so\n") == [], "the base's own line is not new"
    assert unignores_code(b"!*.so\n", None) == [], "a deleted .gitignore un-ignores nothing"


def test_compiled_code_is_read_from_the_staged_tree(tmp_path: Path) -> None:
    """Whatever .gitignore says: the tree judged is the one staged, with excludes that a
    work tree's `.gitignore` outranks (`!*.py[cod]`); a binary is known by its bytes
    under any name, a committed binary left alone is no part of the change."""
    source = make_repo(tmp_path / "r", {"pkg/m.py": "X = 1\n"})
    (source / "fixtures").mkdir()
    (source / "fixtures" / "old.zip").write_bytes(_zip())
    git(source, "add", "-A")
    git(source, "commit", "-qm", "a committed archive")
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    tree = host.work_tree
    (tree / "pkg" / "__pycache__").mkdir()
    (tree / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(_pyc("X = 2\n"))
    (tree / "pkg" / "m.py").write_text("X = 3\n")
    assert source_text_refusals(host, host.snapshot().tree, []) == [], \
        "the global excludes keep byte code out while .gitignore says nothing"
    (tree / ".gitignore").write_text("!__pycache__/\n!*.py[cod]\n")
    (tree / "pkg" / "blob.dat").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 100)
    (tree / "notes.txt").write_text("plain text\n")
    snapshot = host.snapshot()
    assert "pkg/__pycache__/m.cpython-311.pyc" in snapshot.paths
    assert compiled_code(host, snapshot.tree) == [
        "pkg/__pycache__/m.cpython-311.pyc (compiled Python)", "pkg/blob.dat (an ELF binary)"]
    reasons = source_text_refusals(host, snapshot.tree, snapshot.paths)
    assert reasons == [
        "a fix is source text: the change adds or edits compiled or binary code, which is "
        "never part of a fix, whatever .gitignore says: pkg/__pycache__/m.cpython-311.pyc "
        "(compiled Python), pkg/blob.dat (an ELF binary)",
        "a fix is source text: the change makes .gitignore un-ignore compiled or binary "
        "files (`!__pycache__/`, `!*.py[cod]`)"]


def test_deleting_a_committed_binary_is_no_compiled_change(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "r", {"pkg/m.py": "X = 1\n"})
    (source / "old.zip").write_bytes(_zip())
    git(source, "add", "-A")
    git(source, "commit", "-qm", "a committed archive")
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    (host.work_tree / "old.zip").unlink()
    snapshot = host.snapshot()
    assert snapshot.paths == ["old.zip"] and compiled_code(host, snapshot.tree) == []
    (host.work_tree / "old.zip").write_bytes(_zip() + b"edited")
    assert compiled_code(host, host.snapshot().tree) == ["old.zip (a zip archive)"]
