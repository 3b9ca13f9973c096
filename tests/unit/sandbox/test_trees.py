"""copy_tree and remove_tree: the host walking a tree the sandbox wrote."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandbox import trees
from sandbox.trees import copy_tree, remove_tree
from tests.support.sandbox_support import reachable_dir


def test_files_directories_links_modes_and_times_are_copied(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "venv" / "bin").mkdir(parents=True)
    tool = src / "venv" / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    os.utime(tool, ns=(1_000_000_000, 2_000_000_000))
    (src / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (src / "etc").mkdir()
    (src / "etc" / "passwd").write_text("root:x:0:0\n")

    left_out = copy_tree(src, tmp_path / "dst", skip_top=frozenset({"etc"}))

    copied = tmp_path / "dst" / "venv" / "bin" / "tool"
    assert left_out == []
    assert copied.read_text() == "#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(copied.stat().st_mode) == 0o755
    assert copied.stat().st_mtime_ns == 2_000_000_000  # .pyc caches compare mtimes
    assert os.readlink(tmp_path / "dst" / "venv" / "bin" / "python") == "/usr/bin/python3"
    assert not (tmp_path / "dst" / "etc").exists()


def test_a_link_is_copied_as_a_link_never_read_through(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("key")
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "leak").symlink_to(secret)
    (src / "d" / "up").symlink_to(tmp_path)  # a directory link: not walked

    copy_tree(src, tmp_path / "dst")

    assert (tmp_path / "dst" / "leak").is_symlink()
    assert (tmp_path / "dst" / "d" / "up").is_symlink()
    assert not any(p.is_file() and not p.is_symlink() and p.read_text() == "key"
                   for p in (tmp_path / "dst").rglob("*"))


def test_a_fifo_and_setuid_bits_do_not_survive_and_nothing_blocks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")  # shutil.copytree raised on it; a plain open would block
    (src / "suid").write_text("x")
    (src / "suid").chmod(0o4755)
    done: list[list[str]] = []
    worker = threading.Thread(target=lambda: done.append(copy_tree(src, tmp_path / "dst")))
    worker.start()
    worker.join(10)
    assert done == [["pipe"]]
    assert not (tmp_path / "dst" / "pipe").exists()
    assert stat.S_IMODE((tmp_path / "dst" / "suid").stat().st_mode) == 0o755


def _nest(root: Path, name: str, levels: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):  # one level at a time: the path may pass PATH_MAX
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def _depth(root: Path, name: str) -> int:
    depth, fd = 0, os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    while name in os.listdir(fd):
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd, depth = child, depth + 1
    os.close(fd)
    return depth


@pytest.mark.parametrize(("name", "copied"), [
    ("d", 63),  # 1,500 levels: shutil.copytree hit RecursionError; cut at max_depth
    ("d" * 200, 10),  # 300 kB of path, past PATH_MAX: cut at MAX_COPY_PATH (2,048 bytes)
])
def test_a_deep_tree_is_cut_and_the_cut_is_named(tmp_path: Path, name: str,
                                                  copied: int) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _nest(src, name, 1500)

    left_out = copy_tree(src, tmp_path / "dst", max_depth=64)

    assert _depth(tmp_path / "dst", name) == copied
    assert left_out[0].startswith("/".join([name] * copied) + "/")
    remove_tree(src)
    remove_tree(tmp_path / "dst")
    assert not src.exists() and not (tmp_path / "dst").exists()


def test_the_destination_must_be_new(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    with pytest.raises(FileExistsError):
        copy_tree(tmp_path / "src", tmp_path / "dst")


LOCKED_TREE = r"""
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from trees import remove_tree  # a copy: the checkout may not be readable by this uid
root = Path(sys.argv[1]) / "run"
for sub in ("a/b", "c/d", "e"):
    (root / sub).mkdir(parents=True)
    (root / sub / "f").write_text("x")
os.chmod(root / "a" / "b", 0o000)  # what `chmod 000` in the sandbox leaves
os.chmod(root / "a", 0o000)
os.chmod(root / "c", 0o500)        # enterable, but nothing in it can be unlinked
os.chmod(root / "e", 0o300)        # not listable
remove_tree(root)
print("left" if root.exists() else "removed")
"""


def test_directories_the_sandbox_locked_are_removed_by_a_worker_that_is_not_root() -> None:
    # As the sandbox's own uid (an unprivileged worker's), where no CAP_DAC_OVERRIDE helps.
    with reachable_dir() as root:
        user = 65534 if os.geteuid() == 0 else None
        shutil.copy(Path(trees.__file__), root / "trees.py")  # stdlib only
        if user is not None:
            os.chown(root, user, user)
        python = "/usr/bin/python3" if user is not None else sys.executable  # pyenv: root-only
        done = subprocess.run([python, "-c", LOCKED_TREE, str(root)], user=user,
                              group=user, extra_groups=[] if user is not None else None,
                              capture_output=True, text=True, timeout=60, cwd=root)
        assert done.stdout.strip() == "removed", done.stderr
