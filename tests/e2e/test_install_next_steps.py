"""scripts/install.sh finishes the job (issue 22 §3): it warns when FROGNANO_BIN_DIR is not
on PATH, ends with the next commands, and records the `frognano` it linked, which `.ci/run`
then uses instead of whatever `command -v` finds first. The whole script runs on a fake
virtual environment whose python logs its pip calls (tests/e2e/test_install_script.py's way)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_install_script import SCRIPT, _tool_dir
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
needs_system_tools = pytest.mark.skipif(
    not all(Path(p).exists() for p in ("/usr/bin/bwrap", "/usr/bin/git", "/usr/bin/redis-server",
                                       "/usr/bin/chromium"))
    or shutil.which("systemd-analyze") is None,
    reason="the script would run apt-get first")

# What the whole script calls beyond _tool_dir's (systemd-analyze: --dev installs what the
# tests need only when it is missing).
INSTALL_TOOLS = ("mkdir", "ln", "id", "ls", "systemd-analyze", "chmod", "stat")


def fake_venv(root: Path) -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")  # pip "installs"
    (venv / "bin" / "python").chmod(0o755)
    (venv / "bin" / "frognano").write_text("#!/bin/sh\necho fake frognano\n")
    (venv / "bin" / "frognano").chmod(0o755)
    return venv


@needs_system_tools
def test_a_bin_dir_off_path_is_warned_and_the_next_commands_printed(tmp_path: Path) -> None:
    bin_dir = _tool_dir(tmp_path, smi_output=None, nvcc=False)
    for tool in INSTALL_TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    venv, links, record = fake_venv(tmp_path), tmp_path / "links", tmp_path / "record"
    done = subprocess.run(["bash", str(SCRIPT), "--dev"], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir), "HOME": str(tmp_path),
                                           "FROGNANO_VENV": str(venv),
                                           "FROGNANO_BIN_DIR": str(links),
                                           "FROGNANO_INSTALL_RECORD": str(record)})
    assert done.returncode == 0, done.stderr
    linked = links / "frognano"
    assert linked.resolve() == venv / "bin" / "frognano"
    assert f"warning: {links} is not on your PATH" in done.stderr
    assert record.read_text() == f"{linked}\n"
    # Off PATH, the next commands name the command by its full path, so they work as shown.
    tail = done.stdout[done.stdout.index("next:"):]
    for command in ("doctor", "model pull", "up"):
        assert f"  {linked} {command}" in tail
    assert f'export FROGNANO_MODEL="$({linked} model path)"' in tail
    assert f'--model "$({linked} model path --test-model)"' in tail

    on_path = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                             timeout=60, env={"PATH": f"{bin_dir}:{links}",
                                              "HOME": str(tmp_path),
                                              "FROGNANO_VENV": str(venv),
                                              "FROGNANO_BIN_DIR": str(links)})
    assert on_path.returncode == 0 and "not on your PATH" not in on_path.stderr
    assert "  frognano doctor" in on_path.stdout and "--test-model" not in on_path.stdout


def test_ci_uses_the_frognano_the_install_reported(tmp_path: Path) -> None:
    """`.ci/run` in a copy whose install.sh only records a frognano in a fake venv (the
    venv's python answers every step): the one used is that, not the first on PATH."""
    tree = tmp_path / "tree"
    (tree / ".ci").mkdir(parents=True)
    (tree / "scripts").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tree / ".ci" / "run")
    venv = fake_venv(tmp_path)
    (venv / "bin" / "activate").write_text(f'PATH="{venv}/bin:$PATH"\n')
    (tree / "scripts" / "install.sh").write_text(
        f'printf "%s\\n" "{venv}/bin/frognano" > "$FROGNANO_INSTALL_RECORD"\n')
    done = subprocess.run(["bash", str(tree / ".ci" / "run")], capture_output=True,
                          text=True, timeout=60, env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"frognano: {venv}/bin/frognano -> {venv}" in done.stdout


@needs_system_tools
@pytest.mark.skipif(os.geteuid() != 0, reason="the repair is for root's installs")
def test_a_root_install_leaves_its_venv_readable_by_the_sandbox_uids(tmp_path: Path) -> None:
    """CI's fresh machine made a venv the sandbox's uids could not read (a hardened umask):
    commands in the sandbox then ran the system python3 without the worker's packages. The
    script now opens the venv to them, and names a parent they still cannot enter."""
    bin_dir = _tool_dir(tmp_path, smi_output=None, nvcc=False)
    for tool in INSTALL_TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    parent = tmp_path / "opt"
    venv = fake_venv(parent)
    package = venv / "lib" / "site-packages" / "psycopg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for path in (package / "__init__.py", *venv.rglob("*"), venv):  # as umask 077 makes them
        path.chmod(0o700 if path.is_dir() or path.parent.name == "bin" else 0o600)
    parent.chmod(0o700)
    done = subprocess.run(["bash", str(SCRIPT), "--dev"], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir), "HOME": str(tmp_path),
                                           "FROGNANO_VENV": str(venv),
                                           "FROGNANO_BIN_DIR": str(tmp_path / "links")})
    assert done.returncode == 0, done.stderr
    assert (venv.stat().st_mode & 0o777, package.stat().st_mode & 0o777) == (0o755, 0o755)
    assert (package / "__init__.py").stat().st_mode & 0o777 == 0o644
    assert (venv / "bin" / "python").stat().st_mode & 0o777 == 0o755
    # Not its own to open: the parent is named, with the fix.
    assert f"warning: the sandbox's uids cannot enter {parent}, so they cannot use the " \
        f"venv {venv}" in done.stderr, done.stderr
    assert f"chmod o+x {parent}" in done.stderr


@needs_system_tools
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox runs as other uids only as root")
def test_a_venv_made_by_a_python_the_sandbox_cannot_enter_is_made_again(tmp_path: Path
                                                                         ) -> None:
    """pyenv's Python lives under /root (0700): a venv made from it left every sandbox with
    the system python3 and none of the worker's packages. The script makes such a venv
    again, with a Python the sandbox's uids can enter."""
    bin_dir = _tool_dir(tmp_path, smi_output=None, nvcc=False)
    for tool in INSTALL_TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    closed = tmp_path / "root-only" / "pyenv"
    closed.mkdir(parents=True)
    closed.parent.chmod(0o700)
    log, venv = tmp_path / "calls.log", fake_venv(tmp_path)
    (venv / "bin" / "python").write_text(
        f"#!/bin/sh\ncase \"$*\" in *base_prefix*) echo {closed} ;; esac\nexit 0\n")
    # The python3 on PATH: the system's, as far as the script can tell; it logs its calls
    # and, asked for a venv, makes one whose python is open to everyone.
    (bin_dir / "python3").write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$*" in
  *base_prefix*) echo /usr ;;
  "-m venv --clear "*) printf '#!/bin/sh\\nexit 0\\n' > "$4/bin/python" ;;
esac
exit 0
""")
    (bin_dir / "python3").chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path),
                               "FROGNANO_VENV": str(venv),
                               "FROGNANO_BIN_DIR": str(tmp_path / "links")})
    assert done.returncode == 0, done.stderr
    assert f"the venv {venv} was made by a Python under {closed.parent}, which the " \
        "sandbox's uids cannot enter: making it again with python3" in done.stdout
    assert f"-m venv --clear {venv}" in log.read_text().splitlines()
    assert "base_prefix" not in (venv / "bin" / "python").read_text()
