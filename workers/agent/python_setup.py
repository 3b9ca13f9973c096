"""A setup command for Python projects that have no `setup:` in .github/frognano.yml.

Looks at files only. The command creates the sandbox's venv (the first entry on its PATH,
with the system's site packages so the system pytest stays usable) and installs the
project editable with its test extras and test requirement files. It is recorded as
inferred, in the transcript and the PR body, so a maintainer can see and pin it.
"""

from __future__ import annotations

import configparser
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

# Extras tried in this order; the first one the project declares is installed.
TEST_EXTRAS = ("test", "tests", "testing", "dev")
REQUIREMENT_GLOBS = ("requirements*-test*.txt", "requirements*_test*.txt",
                     "test-requirements.txt", "test_requirements.txt", "requirements-dev.txt")
# HOME is <private>/home in both backends, so the venv on PATH is its sibling.
VENV = '"${HOME%/home}/venv"'
SETUP_EXAMPLE = ("setup: python3 -m venv --system-site-packages /frognano/venv && "
                 "/frognano/venv/bin/pip install -e '.[test]'")


@dataclass(frozen=True)
class InferredSetup:
    command: str
    note: str  # what was inferred from what, in one line


def _pyproject(root: Path) -> dict:
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
    except tomllib.TOMLDecodeError:
        return {}


def _setup_cfg(root: Path) -> configparser.ConfigParser | None:
    path = root / "setup.cfg"
    if not path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8", errors="replace"))
    except configparser.Error:
        return None
    return parser


def declared_extras(root: Path) -> list[str]:
    """Extras the project declares, from pyproject.toml, setup.cfg or setup.py."""
    extras = list(_pyproject(root).get("project", {}).get("optional-dependencies", {}) or {})
    cfg = _setup_cfg(root)
    if cfg is not None and cfg.has_section("options.extras_require"):
        extras += list(cfg["options.extras_require"])
    setup_py = root / "setup.py"
    if setup_py.is_file():
        text = setup_py.read_text(encoding="utf-8", errors="replace")
        found = re.search(r"extras_require\s*=\s*(?:dict\()?\{?(.*?)(?:\}|\)\s*,)", text,
                          re.DOTALL)
        if found:
            extras += re.findall(r"""['"]([\w.-]+)['"]\s*:|\b(\w+)\s*=\s*\[""", found.group(1))
    flat = [e if isinstance(e, str) else (e[0] or e[1]) for e in extras]
    return list(dict.fromkeys(e for e in flat if e))


def _installable(root: Path) -> str | None:
    data = _pyproject(root)
    if (root / "setup.py").is_file():
        return "setup.py"
    if "project" in data or "build-system" in data:
        return "pyproject.toml"
    cfg = _setup_cfg(root)
    if cfg is not None and (cfg.has_section("metadata") or cfg.has_section("options")):
        return "setup.cfg"
    return None


def infer_python_setup(root: Path) -> InferredSetup | None:
    """The setup a Python project needs to run its tests; None if it is not one."""
    source = _installable(root)
    requirements = sorted({p.name for pattern in REQUIREMENT_GLOBS for p in root.glob(pattern)
                           if p.is_file()})
    if source is None and not requirements:
        if not (root / "requirements.txt").is_file():
            return None
        requirements = ["requirements.txt"]
    args: list[str] = []
    said = []
    if source is not None:
        extra = next((e for e in TEST_EXTRAS if e in declared_extras(root)), None)
        args += ["-e", f".[{extra}]" if extra else "."]
        said.append(f"the project ({source}) editable"
                    + (f" with its `{extra}` extra" if extra else ""))
    for name in requirements:
        args += ["-r", name]
    if requirements:
        said.append(", ".join(requirements))
    command = (f"python3 -m venv --system-site-packages {VENV} && "
               f"{VENV}/bin/python -m pip install " + " ".join(shlex.quote(a) for a in args))
    return InferredSetup(command, "inferred (no `setup:` given): a venv with "
                         + " and ".join(said))
