"""A setup command for Python projects that have no `setup:` in .github/frognano.yml.

Looks at files only (never runs the repository's code on the host). The command creates
the sandbox's venv (the first entry on its PATH) and installs, in one pip run so the
project's own pins win:
- the project editable, with its test extra: one named `test`, `tests`, `testing` or `dev`,
  else every extra that lists pytest, hypothesis or a pytest plugin;
- its test requirement files, at the root (`requirements-test.txt`, …) or in a
  `requirements/` folder (`requirements/tests.txt`, else `requirements/dev.txt`);
- its PEP 735 test dependency group, resolved here (Debian's pip 23.0 has no `--group`);
- its Poetry test group (`[tool.poetry.group.test.dependencies]`, solver/setup/poetry.py);
- the `deps` and `extras` of the tox environment whose commands run the tests;
- the extras its declared test command installs (a Justfile's `uv run --all-extras pytest`);
- the pytest plugins that its pytest configuration alone names (`--cov`, `-n`,
  `--timeout`, `required_plugins`, …);
- pytest itself when nothing above declares it, at least the version the configuration
  needs (`minversion`; pytest 9 for a native `[tool.pytest]` table);
- but no lint, type or format plugin (pytest-ruff, pytest-mypy, pytest-checkdocs,
  pytest-enabler, …) that the configuration does not turn on: an extra that lists one
  goes in by its other requirements (solver/setup/lint_plugins.py).
The venv has no system site packages: Debian's pytest 7.2 would otherwise stand in for
an undeclared pytest and fail a `minversion = 8.0` project, or ignore its `[tool.pytest]`.
The command is recorded as inferred, in the transcript and the PR body, so a maintainer
can see and pin it.
"""

from __future__ import annotations

import ast
import configparser
import posixpath
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from dependency_groups import resolve as resolve_group

from solver.setup.lint_plugins import LeftOut, split_extras
from solver.setup.poetry import groups as poetry_groups
from solver.setup.project_files import (
    Reader,
    declared_test_commands,
    declared_tox_env,
    pytest_config,
    pytest_minimum,
    requirement_name,
    tree_reader,
    workflow_files,
    wrapper_extras,
)

# Extras and dependency groups tried in this order; the first one declared is installed.
TEST_EXTRAS = ("test", "tests", "testing", "dev")
REQUIREMENT_GLOBS = ("requirements*-test*.txt", "requirements*_test*.txt",
                     "test-requirements.txt", "test_requirements.txt", "requirements-dev.txt")
# Folders of requirement files (`requirements/tests.txt`), and the stems read first in them.
REQUIREMENT_DIRS = ("requirements", "reqs", "requirements.d")
_TEST_STEM = re.compile(r"(^|[-_.])(tests?|testing)([-_.]|$)")
_DEV_STEM = re.compile(r"(^|[-_.])(dev|develop|development)([-_.]|$)")
# What makes an extra or a group a test one when its name does not say so.
_TEST_PACKAGE = re.compile(r"^(pytest([-_.].*)?|hypothesis|nose2?)$")
# HOME is <private>/home in both backends, so the venv on PATH is its sibling.
VENV = '"${HOME%/home}/venv"'
# The same venv as a maintainer writes it in .github/frognano.yml (README).
CONFIG_VENV = "/frognano/venv"
# Build plugins that take the version from git: the setup phase's tree has no `.git`
# (run_path: the model's `.git` comes after setup), so without an sdist's PKG-INFO they
# fail ("unable to detect version"); all of them read SETUPTOOLS_SCM_PRETEND_VERSION.
SCM_VERSION_PLUGINS = ("setuptools-scm", "hatch-vcs", "flit-scm", "setuptools-scm-git-archive")
SCM_PLACEHOLDER_VERSION = "0+unknown"  # what versioneer says without git, too
SETUP_EXAMPLE = (f"setup: python3 -m venv {CONFIG_VENV} && "
                 f"{CONFIG_VENV}/bin/python -m pip install -e . pytest")


@dataclass(frozen=True)
class InferredSetup:
    command: str
    note: str  # what was inferred from what, in one line
    # What was detected, for a hint that names the line to write when setup fails.
    requirements: tuple[str, ...] = ()  # requirement strings passed to pip


@dataclass
class _Plan:
    """What one pip run installs, and where each piece came from (for the note)."""

    args: list[str] = field(default_factory=list)  # `-e .[x]`, `-r file`
    # Requirement lines the project's extras and files declare (pip reads them itself).
    declared: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # requirement strings given to pip
    said: list[str] = field(default_factory=list)
    left_out: LeftOut = field(default_factory=LeftOut)  # lint plugins (lint_plugins.py)

    def add(self, requirements: list[str] | tuple[str, ...], why: str) -> None:
        fresh = [r for r in requirements if r not in self.added and r not in self.declared]
        if fresh:
            self.added += fresh
            self.said.append(why)

    def names(self) -> set[str]:
        return {requirement_name(r) for r in [*self.declared, *self.added]}


# Every file is read through `tree_reader`: a committed link (`pyproject.toml ->
# /etc/...`) would make the host read its own files as the project's.
def _pyproject(root: Path) -> dict:
    text = tree_reader(root)("pyproject.toml")
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _setup_cfg(root: Path) -> configparser.ConfigParser | None:
    text = tree_reader(root)("setup.cfg")
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return parser


def _setup_py_extras(root: Path) -> dict[str, list[str]]:
    """`extras_require` of setup.py, read as literals from its syntax tree (never run):
    a dict literal in the call, or one assigned to a name the call passes."""
    text = tree_reader(root)("setup.py")
    if text is None:
        return {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return _setup_py_extra_names(text)
    assigned: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "extras_require":
                continue
            value = keyword.value
            if isinstance(value, ast.Name):
                value = assigned.get(value.id, value)
            try:
                found = ast.literal_eval(value)
            except ValueError:
                return _setup_py_extra_names(text)
            if isinstance(found, dict):
                return {str(k): [str(r) for r in v] if isinstance(v, list | tuple) else []
                        for k, v in found.items()}
    return _setup_py_extra_names(text)


def _setup_py_extra_names(text: str) -> dict[str, list[str]]:
    """The extras' names alone, where their values are not literals."""
    found = re.search(r"extras_require\s*=\s*(?:dict\()?\{?(.*?)(?:\}|\)\s*,)", text,
                      re.DOTALL)
    if not found:
        return {}
    pairs = re.findall(r"""['"]([\w.-]+)['"]\s*:|\b(\w+)\s*=\s*\[""", found.group(1))
    return {name: [] for name in (a or b for a, b in pairs) if name}


def project_extras(root: Path) -> dict[str, list[str]]:
    """Extra → its requirements, from pyproject.toml, setup.cfg and setup.py."""
    extras: dict[str, list[str]] = {}
    declared = _pyproject(root).get("project", {}).get("optional-dependencies", {}) or {}
    if isinstance(declared, dict):
        extras.update({str(k): [str(r) for r in v] for k, v in declared.items()
                       if isinstance(v, list)})
    cfg = _setup_cfg(root)
    if cfg is not None and cfg.has_section("options.extras_require"):
        for name, value in cfg["options.extras_require"].items():
            extras.setdefault(name, [line.strip() for line in value.splitlines()
                                     if line.strip() and not line.strip().startswith("#")])
    for name, requirements in _setup_py_extras(root).items():
        extras.setdefault(name, requirements)
    return extras


def declared_extras(root: Path) -> list[str]:
    """Extras the project declares, from pyproject.toml, setup.cfg or setup.py."""
    return list(project_extras(root))


def _is_test_set(requirements: list[str] | tuple[str, ...]) -> bool:
    return any(_TEST_PACKAGE.match(requirement_name(r)) for r in requirements)


def test_sets(declared: dict[str, list[str]] | dict[str, tuple[str, ...]]) -> list[str]:
    """The test extras (or groups) among those declared: the first named as one, else
    every one that lists a test package."""
    named = next((name for name in TEST_EXTRAS if name in declared), None)
    if named is not None:
        return [named]
    return [name for name, requirements in declared.items() if _is_test_set(requirements)]


def dependency_groups(root: Path) -> dict[str, tuple[str, ...]]:
    """PEP 735 group → its requirements with `include-group`s resolved; a group that does
    not resolve (a cycle, a bad requirement) is left out."""
    table = _pyproject(root).get("dependency-groups", {})
    if not isinstance(table, dict):
        return {}
    groups: dict[str, tuple[str, ...]] = {}
    for name in table:
        try:
            groups[str(name)] = resolve_group(table, str(name))
        except (ValueError, TypeError, LookupError):
            continue  # packaging's InvalidRequirement is a ValueError
    return groups


def requirement_files(root: Path) -> list[str]:
    """Test requirement files: the root's, and a `requirements/` folder's test files (its
    dev files when it has none); a pip-compile `.in` only where no `.txt` locks it."""
    found = sorted({p.name for pattern in REQUIREMENT_GLOBS for p in root.glob(pattern)
                    if p.is_file()})
    for folder in REQUIREMENT_DIRS:
        base = root / folder
        if not base.is_dir() or base.is_symlink():
            continue
        files = sorted(p for p in base.iterdir() if p.is_file() and p.suffix in (".txt", ".in"))
        stems = {p.stem for p in files if p.suffix == ".txt"}
        files = [p for p in files if p.suffix == ".txt" or p.stem not in stems]
        chosen = [p for p in files if _TEST_STEM.search(p.stem)] \
            or [p for p in files if _DEV_STEM.search(p.stem)]
        found += [f"{folder}/{p.name}" for p in chosen]
    return found


@dataclass(frozen=True)
class RequirementLine:
    file: str  # relative to the root
    number: int  # from 1, as pip counts them
    text: str


def _file_requirements(read: Reader, name: str, depth: int = 0) -> list[RequirementLine]:
    """Requirement lines of a file and the files it includes (`-r`), in the tree only."""
    name = posixpath.normpath(name)
    text = read(name) if depth <= 3 and not name.startswith(("..", "/")) else None
    lines: list[RequirementLine] = []
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.split(" #")[0].strip()
        include = re.match(r"^(?:-r|--requirement)[=\s]*(\S+)", line)
        if include:
            lines += _file_requirements(read, posixpath.join(posixpath.dirname(name),
                                                             include.group(1)), depth + 1)
        elif line and not line.startswith(("#", "-")):
            lines.append(RequirementLine(name, number, line))
    return lines


# A requirement pip fetches with git (`name @ git+https://host/…`, `git+https://…#egg=x`):
# from the host it names, which the setup phase's proxy refuses unless an operator lists it.
_VCS_REQUIREMENT = re.compile(r"(?:^|[\s@])git\+(?:https?|ssh|git)://(?:[^/@\s]+@)?([^/:\s]+)")


def _venv_command(args: list[str], scm: bool) -> str:
    """The venv, and one pip run installing `args` (with a version for setuptools-scm)."""
    pip = f"SETUPTOOLS_SCM_PRETEND_VERSION={SCM_PLACEHOLDER_VERSION} " if scm else ""
    return (f"python3 -m venv {VENV} && {pip}"
            f"{VENV}/bin/python -m pip install " + " ".join(shlex.quote(a) for a in args))


def git_requirements(read: Reader, files: list[str]) -> list[tuple[RequirementLine, str]]:
    """The git requirements of these requirement files (and their `-r` includes), each
    with the host it is cloned from."""
    return [(line, host.group(1)) for name in files for line in _file_requirements(read, name)
            if (host := _VCS_REQUIREMENT.search(line.text))]


def git_requirements_said(found: list[tuple[RequirementLine, str]]) -> str:
    """Which lines, from where, and the setting that lets the setup phase reach it."""
    hosts = ",".join(sorted({host for _, host in found}))
    where = "; ".join(f"{line.file} line {line.number} (`{line.text}`)" for line, _ in found[:3])
    return (f"{where} is cloned with git from {hosts.replace(',', ', ')}, which the setup "
            f"phase reaches only with FROGNANO_SETUP_EGRESS_HOSTS={hosts}")


def _git_requirements_note(root: Path, plan: _Plan, scm: bool) -> str:
    """Where the requirement files name a git requirement, and the two ways through: its
    host on FROGNANO_SETUP_EGRESS_HOSTS, or the same setup without it."""
    read = tree_reader(root)
    files = [plan.args[i + 1] for i, arg in enumerate(plan.args[:-1]) if arg == "-r"]
    found = git_requirements(read, files)
    if not found:
        return ""
    kept = [line.text for name in files for line in _file_requirements(read, name)
            if not _VCS_REQUIREMENT.search(line.text)]
    args = [a for i, a in enumerate(plan.args) if a != "-r"
            and (i == 0 or plan.args[i - 1] != "-r")] + kept + plan.added
    without = fix_line(_venv_command(args, scm), [])
    return f"; {git_requirements_said(found)}; or write the setup without it: `{without}`"


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


def _project_name(root: Path) -> str:
    """The project's normalised name, from pyproject.toml or setup.cfg ("" unknown)."""
    name = _pyproject(root).get("project", {}).get("name")
    cfg = _setup_cfg(root)
    if not isinstance(name, str) and cfg is not None and cfg.has_section("metadata"):
        name = cfg["metadata"].get("name")
    return requirement_name(name) if isinstance(name, str) else ""


def _project_args(root: Path, source: str, plan: _Plan) -> None:
    """`-e .[extras]`: the test extras, and those of the tox environment that runs the
    tests; an extra that lists a lint plugin goes in by its other requirements."""
    extras = project_extras(root)
    chosen = test_sets(extras)
    tox = declared_tox_env(tree_reader(root))
    chosen += [e for e in (tox.extras if tox else ()) if e not in chosen and e in extras]
    asked = _command_extras(root)
    chosen += [e for e in (list(extras) if "*" in asked else asked)
               if e not in chosen and e in extras]
    split = split_extras(extras, chosen, _project_name(root), plan.left_out)
    for extra in split.whole:
        plan.declared += extras.get(extra, [])
    plan.args += ["-e", f".[{','.join(split.whole)}]" if split.whole else "."]
    named = " and ".join(f"`{e}`" for e in split.whole)
    plan.said.append(f"the project ({source}) editable" + (
        f" with its {named} extra{'s' if len(split.whole) > 1 else ''}"
        if split.whole else ""))
    named = " and ".join(f"`{e}`" for e in split.split)
    plan.add(split.by_name, f"the other requirements of its {named} "
                            f"extra{'s' if len(split.split) > 1 else ''}")


def _command_extras(root: Path) -> tuple[str, ...]:
    """The extras the project's own test command installs (a Justfile's `uv run
    --all-extras pytest`): its tests import them."""
    declared = declared_test_commands(tree_reader(root), workflow_files(root))
    return wrapper_extras(declared[0].words) if declared else ()


def _add_files(root: Path, plan: _Plan, files: list[str]) -> None:
    read = tree_reader(root)
    fresh = [name for name in files if name not in plan.args and read(name) is not None]
    for name in fresh:
        plan.args += ["-r", name]
        plan.declared += [line.text for line in _file_requirements(read, name)]
    if fresh:
        plan.said.append(", ".join(fresh))


def infer_python_setup(root: Path) -> InferredSetup | None:
    """The setup a Python project needs to run its tests; None if it is not one."""
    source = _installable(root)
    files = requirement_files(root)
    if source is None and not files:
        if not (root / "requirements.txt").is_file():
            return None
        files = ["requirements.txt"]
    plan = _Plan()
    if source is not None:
        _project_args(root, source, plan)
    _add_files(root, plan, files)
    _add_test_requirements(root, plan)
    scm = source is not None and _needs_scm_version(root)
    command = _venv_command(plan.args + plan.added, scm)
    note = "inferred (no `setup:` given): a venv with " + " and ".join(plan.said)
    note += plan.left_out.note()
    note += _git_requirements_note(root, plan, scm)
    if scm:
        note += (f"; the version setuptools-scm would read from git given as "
                 f"{SCM_PLACEHOLDER_VERSION} (setup runs without .git, and there is no PKG-INFO)")
    return InferredSetup(command, note, tuple(plan.added))


def _table(data: dict, key: str) -> dict:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _needs_scm_version(root: Path) -> bool:
    """The build takes its version from git, and nothing else gives it one: no PKG-INFO
    (an sdist's, which setuptools-scm reads instead) and no `fallback_version`."""
    if (root / "PKG-INFO").is_file():
        return False
    data = _pyproject(root)
    requires = data.get("build-system", {}).get("requires", [])
    names = {requirement_name(str(r)) for r in requires} if isinstance(requires, list) else set()
    tool = _table(data, "tool")
    hatch = _table(tool, "hatch")
    for table, key in ((tool.get("setuptools_scm"), "fallback_version"),
                       (hatch.get("version"), "fallback-version")):
        if isinstance(table, dict) and table.get(key):
            return False
    uses_scm_kwarg = "use_scm_version" in (tree_reader(root)("setup.py") or "")
    return bool(names & set(SCM_VERSION_PLUGINS)) or uses_scm_kwarg


def _add_test_requirements(root: Path, plan: _Plan) -> None:
    """Groups, tox deps, config-only plugins and pytest: requirement strings given to pip
    after what the project declares (its pins still win: one resolver run)."""
    groups = dependency_groups(root)
    for group in test_sets(groups):
        plan.add(plan.left_out.drop(groups[group], f"the `{group}` group"),
                 f"its `{group}` dependency group")
    poetry = poetry_groups(_pyproject(root))
    for group in test_sets({name: found.requirements for name, found in poetry.items()}):
        left_out = poetry[group].left_out
        more = f" and {len(left_out) - 5} more" if len(left_out) > 5 else ""
        plan.add(plan.left_out.drop(poetry[group].requirements, f"the Poetry `{group}` "
                                    "group"), f"its Poetry `{group}` group" + (
            f" (left out: {', '.join(left_out[:5])}{more}; a path, git or url dependency, "
            "or no package name)" if left_out else ""))
    read = tree_reader(root)
    tox = declared_tox_env(read)
    if tox is not None:
        _add_files(root, plan, list(tox.requirement_files))
        plan.add(plan.left_out.drop(tox.deps, f"tox.ini's [{tox.name}]"),
                 f"the deps of tox.ini's [{tox.name}]")
    config = pytest_config(read)
    plugins = [*(config.plugins if config else ()), *(tox.plugins if tox else ())]
    known = plan.names()
    plan.add([p for p in dict.fromkeys(plugins) if requirement_name(p) not in known],
             "the pytest plugins its configuration names")
    plan.left_out.keep(plan.names())  # `addopts = --ruff`: pytest needs pytest-ruff
    _add_django(root, plan, plugins)
    minimum = pytest_minimum(read)
    if minimum is not None:
        plan.add([f"pytest>={minimum[0]}"], f"pytest>={minimum[0]} ({minimum[1]})")
    elif "pytest" not in known:
        plan.add(["pytest"], "pytest")


def _add_django(root: Path, plan: _Plan, plugins: list[str]) -> None:
    """Django beside pytest-django, which does not require it, when the project does not
    declare it (one pip run: a project's own `Django>=…` in setup.py still wins)."""
    if "pytest-django" not in {requirement_name(p) for p in plugins}:
        return
    declared = _pyproject(root).get("project", {}).get("dependencies", [])
    names = plan.names() | {requirement_name(str(r)) for r in
                            (declared if isinstance(declared, list) else [])}
    if "django" not in names:
        plan.add(["Django"], "Django (pytest-django needs it and does not require it)")


def fix_line(setup_command: str | None, add: list[str]) -> str:
    """The `.github/frognano.yml` line that installs `add` on top of the setup that ran:
    the same pip run with more requirements, or a venv with them when there was none."""
    packages = " ".join(shlex.quote(p) for p in add)
    if not setup_command:
        return (f"setup: python3 -m venv {CONFIG_VENV} && "
                f"{CONFIG_VENV}/bin/python -m pip install {packages}")
    written = setup_command.replace(VENV, CONFIG_VENV)
    if not add:
        return f"setup: {written}"
    return f"setup: {written} {packages}" if "pip install" in written \
        else f"setup: {written} && {CONFIG_VENV}/bin/python -m pip install {packages}"
