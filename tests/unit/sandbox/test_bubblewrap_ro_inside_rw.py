"""Read-only binds that lie inside a writable tree stay read-only (issue 30 §6).

A verdict's test run gets its venv bound read-only at /frognano/venv, inside the private
area /frognano that is bound read-write, and the harness's channel folder bound
read-only at its host path under /tmp, inside the sandbox's writable /tmp tmpfs. The ro
binds come after their writable parents (a later mount covers an earlier one) and are
`--ro-bind`s: the venv is the setup cache's entry that later runs share, the channel
holds the harness's own runner. The attacker's moves, as a shell in real bubblewrap:
write, append, delete, rename and replace what is bound, then what the host holds there
must be unchanged and what the sandbox read must be the host's. What is bound is owned
by the sandbox's uid below its host-owned top, as under a worker that is not root (its
sandbox runs as its own uid, and the copies it makes are its own): there the mount's
read-only flag is all that stands between the tests and the files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import SandboxConfig, open_sandbox
from sandbox.base import Sandbox
from tests.support.sandbox_support import HAVE_BWRAP, make_git_workspace, reachable_dir

pytestmark = [pytest.mark.bwrap,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap (bwrap) is not installed")]
VENV_FILE = "VALUE = 'the cached venv'\n"
CHANNEL_FILE = "the harness's runner\n"


def attack(bind: str) -> str:
    """Every way a shell can change a folder bound at `bind` and what lies in it."""
    target = f"{bind}/lib"
    return (f"echo planted > {bind}/planted; echo planted > {target}/planted; "
            f"echo tampered >> {target}/file.txt; chmod 777 {target}; "
            f"rm -f {target}/file.txt; mv {target} {bind}/moved; mv {bind} {bind}.moved; "
            f"rm -rf {target}; mkdir -p {target}; echo planted > {target}/planted; "
            f"cat {target}/file.txt")


def contents(folder: Path) -> list[tuple[str, str, int]]:
    return sorted((str(p.relative_to(folder)), p.read_text() if p.is_file() else "",
                   p.stat().st_mode) for p in folder.rglob("*"))


@pytest.fixture
def bound() -> Iterator[tuple[Sandbox, Path, Path]]:
    with reachable_dir() as root:
        venv, channel = root / "venv-entry", root / "channel"
        for folder, text in ((venv, VENV_FILE), (channel, CHANNEL_FILE)):
            (folder / "lib").mkdir(mode=0o755, parents=True)
            folder.chmod(0o755)  # the top: host-owned, as every bind source is checked
            (folder / "lib" / "file.txt").write_text(text)
            (folder / "lib").chmod(0o755)  # whatever the umask
            (folder / "lib" / "file.txt").chmod(0o644)
        config = SandboxConfig(workspace=make_git_workspace(root), private_dir=root / "private",
                               extra_ro_binds=[channel], venv_ro=venv)
        with open_sandbox("bubblewrap", config) as sandbox:
            uid, gid = sandbox.uid, sandbox.gid  # type: ignore[attr-defined]
            for path in (venv / "lib", venv / "lib" / "file.txt", channel / "lib",
                         channel / "lib" / "file.txt"):
                os.chown(path, uid, gid)
            yield sandbox, venv, channel


def test_the_venv_inside_the_writable_private_area_stays_read_only(
        bound: tuple[Sandbox, Path, Path]) -> None:
    sandbox, venv, _ = bound
    result = sandbox.exec(attack("/frognano/venv") + "; echo home > /frognano/home/x && "
                          "cat /frognano/home/x", timeout=30)
    assert result.stdout.splitlines()[-2:] == [VENV_FILE.strip(), "home"], result
    assert contents(venv) == [("lib", "", 0o40755), ("lib/file.txt", VENV_FILE, 0o100644)]


def test_the_channel_inside_the_writable_tmp_stays_read_only(
        bound: tuple[Sandbox, Path, Path]) -> None:
    sandbox, _, channel = bound
    result = sandbox.exec(attack(str(channel)) + "; echo tmp > /tmp/x && cat /tmp/x",
                          timeout=30)
    assert result.stdout.splitlines()[-2:] == [CHANNEL_FILE.strip(), "tmp"], result
    assert contents(channel) == [("lib", "", 0o40755),
                                 ("lib/file.txt", CHANNEL_FILE, 0o100644)]
