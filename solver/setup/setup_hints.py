"""Why a setup or a baseline failed, in words, and the `.github/frognano.yml` line that fixes it.

Read from the failing run's output and the repository's files (never by running anything):
a module the tests import that setup did not install, a pytest option only a plugin knows,
a pytest older than the configuration needs, a package the index does not have. Each
names the smallest line to write, built from the setup that ran (python_setup.fix_line).
"""

from __future__ import annotations

import re
import shlex

from solver.setup.project_files import (
    Reader,
    option_plugins,
    pytest_minimum,
    version_below,
)
from solver.setup.python_setup import fix_line, git_requirements, git_requirements_said

# Import names whose package is named otherwise on PyPI.
MODULE_PACKAGES = {"yaml": "pyyaml", "PIL": "pillow", "dateutil": "python-dateutil",
                   "bs4": "beautifulsoup4", "sklearn": "scikit-learn", "cv2": "opencv-python",
                   "attr": "attrs", "jwt": "pyjwt", "Crypto": "pycryptodome",
                   "dotenv": "python-dotenv", "serial": "pyserial", "OpenSSL": "pyopenssl",
                   "tidylib": "pytidylib", "google": "protobuf", "git": "gitpython",
                   "magic": "python-magic", "xdist": "pytest-xdist", "_pytest": "pytest",
                   "pytest_cov": "pytest-cov", "pytest_asyncio": "pytest-asyncio",
                   "pytest_mock": "pytest-mock", "pytest_timeout": "pytest-timeout",
                   "pytest_benchmark": "pytest-benchmark", "slugify": "python-slugify",
                   "text_unidecode": "text-unidecode", "docx": "python-docx"}
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_PYTEST_HEADER = re.compile(r"^platform \S+ -- Python \S+, pytest-(\d+(?:\.\d+)*)", re.MULTILINE)
_MINVERSION = re.compile(r"'minversion' requires pytest-(\S+?),? actual pytest-(\S+?)'?$",
                         re.MULTILINE)
_USAGE = re.compile(r"^(?:ERROR: |\S*: error: )(.+)$", re.MULTILINE)
_NOT_ON_INDEX = re.compile(r"(?:No matching distribution found for|Could not find a version "
                           r"that satisfies the requirement) (\S+)")


def _line(setup_command: str | None, add: list[str]) -> str:
    return f"; the `.github/frognano.yml` line that would fix it: `{fix_line(setup_command, add)}`"


def missing_module_hint(output: str, setup_command: str | None) -> str:
    """The tests import a module nothing installed: install its package."""
    found = _MISSING_MODULE.search(output)
    if not found:
        return ""
    module = found.group(1)
    top = module.split(".")[0]
    package = MODULE_PACKAGES.get(module, MODULE_PACKAGES.get(top, top.replace("_", "-")))
    return (f". The tests import `{module}`, which setup did not install"
            + _line(setup_command, [package]))


def usage_hint(output: str, setup_command: str | None) -> tuple[str, str]:
    """(pytest's own words, a hint) for a usage error: an option only a plugin knows, or
    a pytest older than `minversion`."""
    minversion = _MINVERSION.search(output)
    if minversion:
        needed, actual = minversion.group(1), minversion.group(2)
        return (f"the project's configuration requires pytest {needed} and pytest {actual} "
                "ran", _line(setup_command, [f"pytest>={needed}"]))
    unknown = re.search(r"unrecognized arguments: (.+)", output)
    usage = unknown or _USAGE.search(output)
    if not usage:
        return "", ""
    words = usage.group(0 if unknown else 1).strip()
    plugins = option_plugins(shlex.split(unknown.group(1))) if unknown else []
    if plugins:
        return words, (f". The option belongs to {', '.join(plugins)}, which setup did not "
                       "install" + _line(setup_command, plugins))
    return words, ""


def pytest_version_problem(output: str, read: Reader | None,
                           setup_command: str | None) -> str | None:
    """A pytest older than the configuration needs ran (it would ignore a native
    `[tool.pytest]` table without a word): the run is no baseline."""
    ran = _PYTEST_HEADER.search(output)
    minimum = pytest_minimum(read) if read is not None else None
    if not ran or minimum is None or not version_below(ran.group(1), minimum[0]):
        return None
    return (f"pytest {ran.group(1)} ran, but {minimum[1]}: the run would not follow the "
            f"project's configuration" + _line(setup_command, [f"pytest>={minimum[0]}"]))


# pip's clone of a `git+https://host/…` requirement, and its failure.
_GIT_CLONE = re.compile(r"Cloning (\w+://(?:[^/\s@]+@)?([^/:\s]+)\S*)")
_CLONE_FAILED = re.compile(r"git clone .* did not run successfully|^\s*fatal: ", re.MULTILINE)


def _git_clone_hint(command: str, output: str, read: Reader | None) -> str:
    """A git requirement pip could not clone: which line of which requirement file (read
    from the tree when the setup names it with `-r`), and what lets it through."""
    clone = _GIT_CLONE.search(output)
    if not clone or not _CLONE_FAILED.search(output):
        return ""
    words = command.split()
    files = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-r", "--requirement")]
    found = git_requirements(read, [f.strip("'\"") for f in files]) if read else []
    host = clone.group(2)
    said = git_requirements_said(found) if found else (
        f"it is cloned from {host}, which the setup phase reaches only with "
        f"FROGNANO_SETUP_EGRESS_HOSTS={host}")
    return (f"; pip could not clone the git requirement `{clone.group(1)}`: {said}; or "
            "write a `setup:` line without it")


def setup_failure_hint(command: str, output: str, read: Reader | None = None) -> str:
    """Why pip failed, when it says so: a git requirement it could not clone (`read`
    gives the tree's requirement files, to name the line), a requirement the index does
    not have, and the same setup without it when it is one of the setup's own words."""
    cloned = _git_clone_hint(command, output, read)
    if cloned:
        return cloned
    found = _NOT_ON_INDEX.search(output)
    if not found:
        return ""
    requirement = found.group(1).rstrip(")").strip("'\"")
    words = shlex.split(command) if "'" in command or '"' in command else command.split()
    said = f"; pip found no `{requirement}` on the package index the setup phase uses"
    matching = [w for w in words if w.split(";")[0].replace(" ", "").startswith(requirement)]
    if not matching:
        return said + " (FROGNANO_PIP_INDEX_URL names another index)"
    quoted = {shlex.quote(w) for w in matching} | set(matching)
    kept = " ".join(w for w in command.split(" ") if w not in quoted)
    return said + f"; the same setup without it: `{fix_line(kept, [])}`"
