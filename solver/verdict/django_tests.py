"""Django's own test runner as a project runs it: `runtests.py`, `manage.py test`,
`django-admin test` (issue 29 §1).

A reusable Django app configures its settings in its own `runtests.py` (or names them
with `--settings`), so pytest without them collects nothing usable. Detection reads
files only: a command the project's tox.ini, CI or Makefile runs (behind `coverage run`,
`uv run`, an environment variable), else a `runtests.py` or `manage.py` that imports
Django. A project whose pytest configuration names `DJANGO_SETTINGS_MODULE` is a
pytest-django one and stays with pytest. The command runs through the harness's
reporter (pytest_guard/frognano_django_report.py), which keeps Django's runner, its
test database (SQLite by default, created inside the sandbox) and its settings, and
adds a per-test junit report.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from solver.setup.project_files import WRAPPERS, pytest_config, tree_reader, wrapper_options

DJANGO_REPORTER = "frognano_django_report"
SCRIPTS = ("runtests.py", "tests/runtests.py")  # read when no project file runs one
# coverage run's options that take a separate value (`--source django_filters`).
_COVERAGE_VALUED = {"--source", "--rcfile", "--include", "--omit", "--context",
                    "--data-file", "--concurrency"}
_PYTHON_VALUED = {"-W", "-X"}
# Options of Django's test command the harness drops: another runner (an XML one)
# would not give its report; everything else (-v2, --parallel, --tag) is kept.
_DROPPED_VALUED = {"--testrunner"}


def _mentions_django(root: Path, script: str) -> bool:
    text = tree_reader(root)(script)
    return text is not None and re.search(r"^\s*(from|import)\s+django\b", text,
                                          re.MULTILINE) is not None


def _inside(root: Path, name: str) -> str | None:
    """`name` as a relative path of a file in the tree; None outside it or absent."""
    if os.path.isabs(name) or ".." in Path(name).parts:
        return None
    path = os.path.normpath(name)
    return path if (root / path).is_file() else None


def _unwrap(words: Sequence[str]) -> tuple[list[str], str]:
    """The words past wrappers (`coverage run`, `uv run`, `python -Wd`, variables), a
    module run with `-m` as `-m NAME …`; and the settings module that a
    `DJANGO_SETTINGS_MODULE=…` word names."""
    rest, settings = list(words), ""
    while rest and rest[0] != "-m":
        head = os.path.basename(rest[0])
        variable = re.match(r"^([A-Za-z_]\w*)=(.*)$", rest[0])
        if variable:
            if variable.group(1) == "DJANGO_SETTINGS_MODULE":
                settings = variable.group(2)
            rest = rest[1:]
        elif head in ("xvfb-run", "time", "exec", "env"):
            rest = rest[1:]
        elif head in WRAPPERS and rest[1:2] == [WRAPPERS[head]]:
            rest = wrapper_options(rest[2:])[1]  # `uv run --all-extras python runtests.py`
        elif head == "coverage" and rest[1:2] == ["run"]:
            rest = _past_options(rest[2:], _COVERAGE_VALUED)
        elif re.match(r"^(python[\d.]*|py)$", head):
            rest = _past_options(rest[1:], _PYTHON_VALUED)
        else:
            break
    return rest, settings


def _past_options(words: list[str], valued: set[str]) -> list[str]:
    """The words past a launcher's own options; `-m NAME …` stays as it is."""
    rest = list(words)
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[2:] if rest[0] in valued else rest[1:]
    return rest


def _kept(args: Sequence[str]) -> list[str]:
    """The test command's arguments but another runner's (`--testrunner X`)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _DROPPED_VALUED:
            skip = True
        elif arg.split("=", 1)[0] not in _DROPPED_VALUED:
            kept.append(arg)
    return kept


def _django_words(rest: list[str], root: Path) -> tuple[list[str], list[str]] | None:
    """(what python3 runs: `-m django test`, `manage.py test` or a runtests.py, the
    arguments after it) of a command's words past its wrappers."""
    if rest[:3] == ["-m", "django", "test"]:
        return ["-m", "django", "test"], rest[3:]
    if rest and os.path.basename(rest[0]) in ("django-admin", "django-admin.py") \
            and rest[1:2] == ["test"]:
        return ["-m", "django", "test"], rest[2:]
    name = os.path.basename(rest[0]) if rest else ""
    script = _inside(root, rest[0]) if name in ("manage.py", "runtests.py") else None
    if script is None or not _mentions_django(root, script):
        return None
    if name == "manage.py":
        return ([script, "test"], rest[2:]) if rest[1:2] == ["test"] else None
    return [script], rest[1:]


def django_command(words: Sequence[str], root: Path) -> str | None:
    """The command, as the harness runs it, of a command line that runs Django's test
    runner: `python3 runtests.py …`, `python3 manage.py test …` or `python3 -m django
    test …`; None for any other command. A `DJANGO_SETTINGS_MODULE=` word is kept: as
    `--settings` for the `test` command, in the environment for a script."""
    rest, settings = _unwrap(words)
    found = _django_words(rest, root)
    if found is None:
        return None
    head, args = found[0], _kept(found[1])
    prefix = ""
    if settings and head[-1] == "test":
        if not any(a.startswith("--settings") for a in args):
            args.insert(0, f"--settings={settings}")
    elif settings:
        prefix = f"DJANGO_SETTINGS_MODULE={shlex.quote(settings)} "
    return prefix + " ".join(shlex.quote(w) for w in ["python3", *head, *args])


def _runs_pytest(root: Path) -> bool:
    """A pytest configuration or a conftest.py: the project's tests are pytest's (with
    pytest-django, or settings its conftest.py configures), whatever manage.py says."""
    read = tree_reader(root)
    return pytest_config(read) is not None or any(
        read(name) is not None for name in ("conftest.py", "tests/conftest.py"))


def detect_django(root: Path) -> str | None:
    """Django's runner for a project no file declares a test command for: its
    `runtests.py`, else `manage.py test`, when that file imports Django and nothing says
    the tests are pytest's (a pytest configuration, a conftest.py)."""
    if _runs_pytest(root):
        return None
    for script in SCRIPTS:
        if _inside(root, script) and _mentions_django(root, script):
            return f"python3 {script}"
    if _inside(root, "manage.py") and _mentions_django(root, "manage.py"):
        return "python3 manage.py test"
    return None


_RUN = re.compile(r"^\s*(DJANGO_SETTINGS_MODULE=\S+\s+)?python3\s+(\S.*)$")


def django_with_report(command: str, report_path: str) -> str | None:
    """A command `django_command` made, through the harness's reporter, which writes a
    junit report to `report_path`; None for any other (or one with shell syntax)."""
    found = _RUN.match(command)
    if not found or re.search(r"[;&|<>`$()\n]", command):
        return None
    try:
        words = shlex.split(found.group(2))
    except ValueError:
        return None
    name = os.path.basename(words[0]) if words else ""
    runs_django = words[:3] == ["-m", "django", "test"] or name == "runtests.py" \
        or (name == "manage.py" and words[1:2] == ["test"])
    if not runs_django:
        return None
    return (f"{found.group(1) or ''}python3 -m {DJANGO_REPORTER} "
            f"--junitxml={shlex.quote(report_path)} {found.group(2)}")


# How runtests.py and manage.py name their settings: `os.environ.setdefault(
# "DJANGO_SETTINGS_MODULE", "tests.settings")` or `os.environ[…] = "…"`.
_SCRIPT_SETTINGS = re.compile(r"""["']DJANGO_SETTINGS_MODULE["']\s*(?:,|\]\s*=)\s*"""
                              r"""["']([\w.]+)["']""")


def django_settings(command: str, root: Path) -> str | None:
    """The settings module a Django runner command runs with, for running its tests
    elsewhere (outside_pytest.py): `--settings`, a `DJANGO_SETTINGS_MODULE=` word, else
    what its script sets; "" when it names none (a runtests.py that calls
    `settings.configure()`); None when the command is not Django's runner."""
    found = _RUN.match(command)
    if django_with_report(command, "") is None or found is None:
        return None
    words = shlex.split(found.group(2))
    for word, after in zip(words, [*words[1:], ""], strict=True):
        if word == "--settings":
            return after
        if word.startswith("--settings="):
            return word.split("=", 1)[1]
    if found.group(1):
        return found.group(1).strip().split("=", 1)[1]
    script = tree_reader(root)(words[0]) if words[0] != "-m" else None
    named = _SCRIPT_SETTINGS.search(script or "")
    return named.group(1) if named else ""
