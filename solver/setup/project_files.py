"""What a Python project's own files say about running its tests, read as text only.

Nothing here runs the repository's code: tox.ini, noxfile.py (its syntax tree), the CI
workflows, the Makefile, the Justfile and the pytest configuration are parsed, so the setup
(python_setup.py) and the test command (repo_tests.py) follow what the maintainers run.
A reader gives a file's text by its path in the tree, or None: the work tree on the host
before a run (`tree_reader`), or the base commit's blobs (`HostRepo.read_base`).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

Reader = Callable[[str], str | None]

# Options of the pytest configuration (or a tox command) that only a plugin knows.
_OPTION_PLUGINS = (
    (re.compile(r"^--(no-)?cov(\b|-|=)"), "pytest-cov"),
    (re.compile(r"^(-n\S*|--numprocesses\b.*|--maxprocesses\b.*|--dist\b.*)$"), "pytest-xdist"),
    (re.compile(r"^--timeout(\b|=|_)"), "pytest-timeout"),
    (re.compile(r"^--benchmark-"), "pytest-benchmark"),
    (re.compile(r"^--reruns\b"), "pytest-rerunfailures"),
    (re.compile(r"^--randomly-"), "pytest-randomly"),
    # Lint plugins the configuration turns on itself: without them pytest does not start
    # (the inferred setup leaves them out otherwise, solver/setup/lint_plugins.py).
    (re.compile(r"^--ruff(-format)?$"), "pytest-ruff"),
    (re.compile(r"^--mypy$"), "pytest-mypy"),
    (re.compile(r"^--flake8$"), "pytest-flake8"),
    (re.compile(r"^--black$"), "pytest-black"),
    (re.compile(r"^--isort$"), "pytest-isort"),
    (re.compile(r"^--pylint$"), "pytest-pylint"),
    (re.compile(r"^--pycodestyle$"), "pytest-pycodestyle"),
    (re.compile(r"^--pydocstyle$"), "pytest-pydocstyle"),
    (re.compile(r"^--mccabe$"), "pytest-mccabe"),
)
# Configuration keys that only a plugin reads.
_KEY_PLUGINS = {"timeout": "pytest-timeout", "timeout_method": "pytest-timeout",
                "asyncio_mode": "pytest-asyncio",
                "asyncio_default_fixture_loop_scope": "pytest-asyncio",
                "mock_use_standalone_module": "pytest-mock", "env": "pytest-env",
                "django_settings_module": "pytest-django"}
# pytest reads `[tool.pytest]` (not `.ini_options`) and pytest.toml from version 9 on.
NATIVE_TOML_PYTEST = "9.0"
_RUNS_TESTS = re.compile(r"(^|[\s/])(py\.?test|pytest)(\s|$)|-m\s+(pytest|unittest)\b"
                         r"|(^|\s)unittest\s+discover\b"
                         # Django's runner (solver/verdict/django_tests.py)
                         r"|(^|[\s/])runtests\.py(\s|$)|(^|[\s/])manage\.py\s+test\b"
                         r"|(^|[\s/])django-admin(\.py)?\s+test\b|-m\s+django\s+test\b")


def tree_reader(root: Path) -> Reader:
    """Files of a work tree by relative path; links and anything outside are unread."""
    base = root.resolve()

    def read(name: str) -> str | None:
        path = root / name
        try:
            if path.is_symlink() or not path.is_file() \
                    or not path.resolve().is_relative_to(base):
                return None
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    return read


def bytes_reader(read: Callable[[str], bytes | None]) -> Reader:
    """A reader over one that gives bytes (HostRepo.read_base)."""
    def text(name: str) -> str | None:
        data = read(name)
        return None if data is None else data.decode("utf-8", "replace")
    return text


def requirement_name(requirement: str) -> str:
    """The normalised project name of a requirement line ("" when it has none)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", found.group(1)).lower() if found else ""


def _ini(read: Reader, name: str) -> configparser.ConfigParser | None:
    return _parse_ini(read(name))


def _parse_ini(text: str | None) -> configparser.ConfigParser | None:
    """INI text as a parser (no interpolation, duplicates allowed); None if unreadable."""
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return parser


def _toml(read: Reader, name: str) -> dict:
    text = read(name)
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


@dataclass(frozen=True)
class PytestConfig:
    """The pytest configuration pytest itself would pick (its rootdir rules, simplified)."""

    file: str  # "pyproject.toml [tool.pytest]", "setup.cfg [tool:pytest]", …
    options: dict[str, object]
    native_toml: bool  # pytest 9's own TOML format: older pytest ignores it silently

    @property
    def addopts(self) -> list[str]:
        value = self.options.get("addopts", "")
        if isinstance(value, list):
            return [str(v) for v in value]
        try:
            return shlex.split(str(value))
        except ValueError:
            return str(value).split()

    @property
    def plugins(self) -> list[str]:
        """Plugins the configuration needs: `required_plugins`, and those its options name."""
        required = self.options.get("required_plugins", "")
        found = [str(r) for r in required] if isinstance(required, list) \
            else str(required).split()
        found += option_plugins(self.addopts)
        # An ini file's keys come lower-cased, TOML's as written (DJANGO_SETTINGS_MODULE).
        keys = {str(key).lower() for key in self.options}
        found += [plugin for key, plugin in _KEY_PLUGINS.items() if key in keys]
        return list(dict.fromkeys(found))


def option_plugins(args: list[str]) -> list[str]:
    """The plugins that command-line options of pytest belong to."""
    return list(dict.fromkeys(plugin for arg in args for pattern, plugin in _OPTION_PLUGINS
                              if pattern.match(arg)))


def pytest_config(read: Reader) -> PytestConfig | None:
    """pytest.ini, pytest.toml, pyproject.toml, tox.ini, setup.cfg, in pytest's order."""
    for name in ("pytest.ini", ".pytest.ini"):
        parser = _ini(read, name)
        if parser is not None:
            options: dict[str, object] = dict(parser["pytest"]) \
                if parser.has_section("pytest") else {}
            return PytestConfig(f"{name} [pytest]", options, False)
    for name in ("pytest.toml", ".pytest.toml"):
        table = _toml(read, name).get("pytest")
        if isinstance(table, dict):
            return PytestConfig(f"{name} [pytest]", table, True)
    table = _toml(read, "pyproject.toml").get("tool", {}).get("pytest")
    if isinstance(table, dict):
        ini = table.get("ini_options")
        if isinstance(ini, dict) and len(table) == 1:
            return PytestConfig("pyproject.toml [tool.pytest.ini_options]", ini, False)
        native = {k: v for k, v in table.items() if k != "ini_options"}
        return PytestConfig("pyproject.toml [tool.pytest]", native, True)
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        parser = _ini(read, name)
        if parser is not None and parser.has_section(section):
            return PytestConfig(f"{name} [{section}]", {**parser[section]}, False)
    return None


def pytest_minimum(read: Reader) -> tuple[str, str] | None:
    """The lowest pytest the configuration works with, and why; None: any."""
    config = pytest_config(read)
    if config is None:
        return None
    found = re.match(r"\s*(\d+(?:\.\d+)*)", str(config.options.get("minversion", "")))
    minversion = found.group(1) if found else ""
    if config.native_toml and _version(NATIVE_TOML_PYTEST) > _version(minversion or "0"):
        return NATIVE_TOML_PYTEST, f"{config.file} is read by pytest 9 and later only"
    if minversion:
        return minversion, f"minversion = {minversion} in {config.file}"
    return None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3]) or (0,)


def version_below(found: str, minimum: str) -> bool:
    return _version(found) < _version(minimum)


@dataclass(frozen=True)
class ToxEnv:
    """The tox environment whose commands run the tests."""

    name: str  # "testenv", "testenv:py"
    commands: tuple[str, ...]
    deps: tuple[str, ...]  # requirement strings
    requirement_files: tuple[str, ...]  # `-r` files, relative to the root
    extras: tuple[str, ...]

    @property
    def plugins(self) -> list[str]:
        args = [a for command in self.commands for a in _split(command)]
        return option_plugins(args)


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _tox_parser(read: Reader) -> configparser.ConfigParser | None:
    parser = _ini(read, "tox.ini")
    if parser is not None:
        return parser
    legacy = _toml(read, "pyproject.toml").get("tool", {}).get("tox", {})
    text = legacy.get("legacy_tox_ini") if isinstance(legacy, dict) else None
    return _parse_ini(text if isinstance(text, str) else None)


def _lines(value: str) -> list[str]:
    """A tox multi-line value: comments and line continuations handled."""
    lines, current = [], ""
    for raw in value.splitlines():
        line = raw.split(" #")[0].strip()
        if line.startswith("#"):
            continue
        current = f"{current} {line}".strip() if current else line
        if current.endswith("\\"):
            current = current[:-1].strip()
            continue
        if current:
            lines.append(current)
        current = ""
    return lines + ([current] if current else [])


def declared_tox_env(read: Reader) -> ToxEnv | None:
    """[testenv] when its commands run the tests, else the first [testenv:…] that does;
    an environment takes what it does not set from [testenv], as tox does."""
    parser = _tox_parser(read)
    if parser is None:
        return None
    base = dict(parser["testenv"]) if parser.has_section("testenv") else {}
    names = (["testenv"] if base else []) + [s for s in parser.sections()
                                             if s.startswith("testenv:")]
    for name in names:
        values = {**base, **dict(parser[name])}
        commands = [_tox_text(c) for c in _lines(values.get("commands", ""))]
        if any(_RUNS_TESTS.search(c) for c in commands):
            return _tox_env(name, values, base, commands)
    return None


def _tox_text(text: str) -> str:
    """tox's substitutions that have a meaning here; `{posargs}` is nothing."""
    text = re.sub(r"\{posargs(:[^}]*)?\}", "", text)
    text = re.sub(r"\{env:[^:}]+:([^}]*)\}", r"\1", text)  # a variable's default
    text = text.replace("{envpython}", "python").replace("{toxinidir}/", "")
    return text.replace("{toxinidir}", ".").strip()


def _tox_env(name: str, values: dict[str, str], base: dict[str, str],
             commands: list[str]) -> ToxEnv:
    deps_text = values.get("deps", "").replace("{[testenv]deps}", base.get("deps", ""))
    deps: list[str] = []
    files: list[str] = []
    extras = [e.strip() for e in re.split(r"[,\s]+", values.get("extras", "")) if e.strip()]
    for line in _lines(deps_text):
        line = _tox_text(line)
        include = re.match(r"^(?:-r|--requirement)[=\s]*(\S+)$", line)
        project = re.match(r"^(?:-e\s*)?\.\[([\w,\s-]+)\]$", line)
        if include:
            files.append(include.group(1))
        elif project:
            extras += [e.strip() for e in project.group(1).split(",") if e.strip()]
        elif re.match(r"^[\w{},.!-]+:\s", line) or "{" in line or line.startswith(("-", ".")):
            continue  # a factor's line, a substitution we cannot resolve, a pip option
        elif requirement_name(line):
            deps.append(line)
    return ToxEnv(name, tuple(commands), tuple(deps), tuple(files), tuple(extras))


@dataclass(frozen=True)
class DeclaredCommand:
    """A test command a project file runs, split into words, and where it was found."""

    words: tuple[str, ...]
    source: str


def _nox_commands(read: Reader) -> list[tuple[str, ...]]:
    """`session.run("pytest", …)` and `session.run("python", "-m", …)` calls of noxfile.py
    whose arguments are string literals, from its syntax tree."""
    text = read("noxfile.py")
    if text is None:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "run":
            words = tuple(a.value for a in node.args
                          if isinstance(a, ast.Constant) and isinstance(a.value, str))
            if words and len(words) == len(node.args):
                found.append(words)
    return found


def _workflow_commands(read: Reader, names: list[str]) -> list[tuple[str, str]]:
    """(command line, workflow) for each `run:` line of the CI workflows."""
    found = []
    for name in names:
        text = read(name)
        try:
            data = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            continue
        jobs = data.get("jobs", {}) if isinstance(data, dict) else {}
        for job in jobs.values() if isinstance(jobs, dict) else []:
            steps = job.get("steps", []) if isinstance(job, dict) else []
            for step in steps if isinstance(steps, list) else []:
                run = step.get("run") if isinstance(step, dict) else None
                if isinstance(run, str):
                    found += [(line, name) for line in _lines(run)]
    return found


def _make_commands(read: Reader) -> list[tuple[str, str]]:
    """The recipe lines of the Makefile's `test` target; make's variables dropped."""
    for name in ("Makefile", "makefile", "GNUmakefile"):
        text = read(name)
        if text is None:
            continue
        recipe = re.search(r"^test\s*:[^\n]*\n((?:\t[^\n]*\n?)+)", text, re.MULTILINE)
        if recipe:
            lines = [re.sub(r"\$[({][^)}]*[)}]", "", line).strip(" \t@-")
                     for line in recipe.group(1).splitlines()]
            return [(line, name) for line in lines if line]
    return []


def _just_commands(read: Reader) -> list[tuple[str, str]]:
    """The recipe lines of the Justfile's `test` recipe (`test *args:`, its body the
    indented lines below); just's `{{…}}` interpolations dropped."""
    for name in ("justfile", "Justfile", ".justfile"):
        text = read(name)
        if text is None:
            continue
        recipe = re.search(r"^@?test\b[^:\n=]*:(?!=)[^\n]*\n((?:[ \t]+[^\n]*\n?|\n)+)", text,
                           re.MULTILINE)
        if recipe:
            lines = [re.sub(r"\{\{[^}]*\}\}", "", line).strip(" \t@-")
                     for line in recipe.group(1).splitlines()]
            return [(line, name) for line in lines if line and not line.startswith("#")]
    return []


# Options of `uv run` (and its kind) that take a value, so the command after them is found.
WRAPPER_VALUE_OPTIONS = frozenset({
    "--extra", "--no-extra", "--group", "--no-group", "--only-group", "--with",
    "--with-editable", "--with-requirements", "--python", "-p", "--package", "--env-file",
    "--directory", "--project", "--index", "--index-url", "--default-index",
    "--extra-index-url", "--env"})
# Words that start a command that starts another: `uv run pytest`, `poetry run pytest`.
WRAPPERS = {"uv": "run", "poetry": "run", "pdm": "run", "pipenv": "run", "hatch": "run",
            "rye": "run"}


def wrapper_options(words: list[str]) -> tuple[list[str], list[str]]:
    """(the options, the command it starts) of the words after a wrapper's `run`:
    `--all-extras pytest -x` is (["--all-extras"], ["pytest", "-x"])."""
    rest = list(words)
    options: list[str] = []
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        options.append(word)
        if word in WRAPPER_VALUE_OPTIONS and rest:
            options.append(rest.pop(0))
    return options, rest


def wrapper_extras(words: tuple[str, ...]) -> tuple[str, ...]:
    """The project extras that a declared `uv run --all-extras pytest` (or `--extra x`)
    asks for, "*" for all: the tests it starts import them, so setup installs them."""
    if len(words) < 2 or words[0] not in WRAPPERS or words[1] != WRAPPERS[words[0]]:
        return ()
    options, _ = wrapper_options(list(words[2:]))
    found: list[str] = []
    for index, word in enumerate(options):
        key, equals, value = word.partition("=")
        if word == "--all-extras":
            found.append("*")
        elif key == "--extra" and (equals or index + 1 < len(options)):
            found.append(value if equals else options[index + 1])
    return tuple(dict.fromkeys(found))


def workflow_files(root: Path) -> list[str]:
    """The CI workflows' paths (`.github/workflows/*.yml`), never through a link."""
    folder = root / ".github" / "workflows"
    if not folder.is_dir() or folder.is_symlink() or (root / ".github").is_symlink():
        return []
    return sorted(f".github/workflows/{p.name}" for p in folder.glob("*.y*ml"))


def declared_test_commands(read: Reader, workflows: list[str]) -> list[DeclaredCommand]:
    """Commands that run the tests, as tox.ini, noxfile.py, the CI workflows, the
    Makefile and the Justfile say, in that order (each reduced to the words of its test
    runner)."""
    found: list[DeclaredCommand] = []
    tox = declared_tox_env(read)
    if tox is not None:
        found += [DeclaredCommand(tuple(_split(c)), f"tox.ini [{tox.name}]")
                  for c in tox.commands]
    found += [DeclaredCommand(words, "noxfile.py") for words in _nox_commands(read)]
    for line, name in [*_workflow_commands(read, workflows), *_make_commands(read),
                       *_just_commands(read)]:
        found.append(DeclaredCommand(tuple(_split(line)), name))
    return [command for command in found if _RUNS_TESTS.search(" ".join(command.words))]
