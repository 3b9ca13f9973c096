"""Who installs an inferred setup: uv, with pip as the fallback (FROGNANO_SETUP_INSTALLER).

uv (the PyPI wheel `uv`, which carries its binary) resolves and installs the same
requirements 3–5× faster than pip, most of a small project's first setup. The sandbox
binds its binary read-only into the setup phase alone, on PATH right after the venv's
(`SandboxConfig.setup_tools`), and gives it the same ways out as pip
(`PackageSources.sandbox_env`: the host-side index endpoint's paths, pip's index
strategy; the egress proxy through HTTPS_PROXY), and a cache directory of the setup's
own that the host removes after it (sandbox/runner_client.py): nothing of uv's persists
across runs but what the index endpoint's download cache holds.

An inferred setup with uv is one shell function, so that a `.github/frognano.yml` line
built from it (python_setup.fix_line) still adds requirements by appending them:

    uv_else_pip() { uv venv … V && uv pip install … "$@" || { echo …; pip … "$@"; }; };
    uv_else_pip -e . pytest

`uv venv` makes the venv the harness uses as before (V/bin/python, the pytest guard, the
venv cache), without pip and setuptools: `python3 -m venv` seeds them (about 1,700 files,
most of a small venv's, each an inode to create and, on a venv-cache hit, to copy), and no
test run needs them (the agent phase has no network to install with; a hint's
`.github/frognano.yml` line calls the same function). Where uv cannot do what
the project needs (an index that fails, which pip steps over; a requirement-file option
uv does not know; a build only pip manages), the same requirements go to pip in a fresh
venv, and the setup's output and note say so (`fell_back`, `FALLBACK_NOTE`); both tries are
one command, so they share the setup's timeout and its fetch budget. uv reads no
configuration of the repository's (`--no-config`, `--no-sources`): the indexes are the
operator's, as pip's are. The unsafe-local backend's login shell takes Debian's PATH from
/etc/profile, where no `uv` is: there pip, the fallback, installs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from solver.setup.python_setup import VENV, InferredSetup

INSTALLERS = ("uv", "pip")
SETTING = "FROGNANO_SETUP_INSTALLER"
FUNCTION = "uv_else_pip"
# The line the fallback prints before pip runs; `fell_back` looks for it.
FALLBACK_SAID = "uv could not install the setup; pip installs it instead"
FALLBACK_NOTE = "; uv could not install it (its output is in the setup's), so pip did"
UV_NOTE = "; installed by uv (pip where uv fails)"
# What python_setup puts before pip: variables for the build (SETUPTOOLS_SCM_PRETEND_VERSION).
_ENV = re.compile(r"(?:[A-Z_][A-Z0-9_]*=\S+ )*")


def uv_binary() -> Path | None:
    """The uv binary the `uv` package installed beside this Python, None without one."""
    try:
        from uv import find_uv_bin  # the wheel's own locator (scripts dir, user site…)
    except ImportError:
        return None
    try:
        found = Path(os.path.realpath(find_uv_bin()))
    except FileNotFoundError:
        return None
    return found if found.is_file() and os.access(found, os.X_OK) else None


def uv_command(venv: str, env: str, installs: str) -> str:
    """uv's venv and install, pip's in a fresh venv when uv fails; `installs` last."""
    uv = (f"uv venv --no-config --python python3 {venv} && "
          f"uv pip install --no-config --no-sources --python {venv}/bin/python \"$@\"")
    pip = f"python3 -m venv --clear {venv} && {venv}/bin/python -m pip install \"$@\""
    return (f"{FUNCTION}() {{ {uv} || {{ echo \"{FALLBACK_SAID} (exit $?)\"; {pip}; }}; }}; "
            f"{env}{FUNCTION} {installs}")


def with_uv(setup: InferredSetup) -> InferredSetup:
    """The inferred pip setup (python_setup's one pip run) as uv's with pip's fallback;
    as it was when its command is not that shape."""
    head = f"python3 -m venv {VENV} && "
    env, pip, installs = setup.command.removeprefix(head).partition(
        f"{VENV}/bin/python -m pip install ")
    if not setup.command.startswith(head) or not pip or not _ENV.fullmatch(env):
        return setup
    return dataclasses.replace(setup, command=uv_command(VENV, env, installs),
                               note=setup.note + UV_NOTE)


def with_installer(setup: InferredSetup, installer: str) -> InferredSetup:
    """`setup` for `installer` (INSTALLERS): python_setup infers pip's."""
    return with_uv(setup) if installer == "uv" else setup


def fell_back(output: str) -> bool:
    """Whether an inferred setup's output says uv failed and pip ran."""
    return FALLBACK_SAID in output
