"""Finding a repository's test command, and what one run of it gave.

Detection looks at files only (never runs anything): the harness runs the command
inside the sandbox, before the agent (baseline) and after it (verdict). Per-test results
come from the runner's report file (test_report.py), never from its output.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from solver.setup.project_files import (
    WRAPPERS,
    declared_test_commands,
    pytest_config,
    tree_reader,
    workflow_files,
    wrapper_options,
)
from solver.verdict.django_tests import detect_django, django_command
from solver.verdict.suite_paths import is_test_path

PYTEST_COMMAND = "python3 -m pytest -rA -p no:cacheprovider"
UNITTEST_COMMAND = "python3 -m unittest"
# The harness's unittest runner (pytest_guard/frognano_unittest_report.py, on PYTHONPATH in
# the harness's own test runs): unittest's command line, plus a junit report.
UNITTEST_REPORTER = "frognano_unittest_report"
# pytest options of a declared command that say which tests are the suite.
_PYTEST_KEPT = ("--doctest-modules", "--doctest-continue-on-failure")
_PYTEST_KEPT_VALUE = ("-m", "--ignore", "--import-mode", "--ignore-glob", "--deselect")


@dataclass(frozen=True)
class TestCommand:
    __test__ = False  # not a pytest test class
    command: str
    source: str  # "config", "cli" or the detector that found it ("pytest", "npm", …)


@dataclass
class TestVerdict:
    """One run of the test command."""

    __test__ = False  # not a pytest test class

    command: str
    exit_code: int | None
    timed_out: bool
    seconds: float
    output: str  # stdout and stderr, tail-capped by the sandbox
    # test id → passed/failed/error/skipped/xfailed, from the runner's report
    tests: dict[str, str] = field(default_factory=dict)
    # "junit", "go-json"; "none": the runner has no report; "missing": asked, none came
    report: str = "none"
    # What the harness saw of the run itself (solver/verdict/verdict_run.py): how many
    # times the report was written, what its pytest guard found (None: it was silent),
    # and the test files and configuration that changed while the tests ran.
    report_writes: int = 0
    guard: dict[str, list[str]] | None = None
    changed_during_run: list[str] = field(default_factory=list)
    # Failing test id → what its report says the failure was ("AttributeError: …", at
    # most a few hundred characters of untrusted text; junit_report.failure_summary).
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for status in self.tests.values():
            counts[status] = counts.get(status, 0) + 1
        detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        if self.report == "none":
            detail = "no per-test report"
        elif self.report == "missing":
            detail = "no readable report"
        state = "timed out" if self.timed_out else f"exit {self.exit_code}"
        return f"{'PASS' if self.passed else 'FAIL'} ({state}{'; ' + detail if detail else ''})"

    def to_dict(self, output_chars: int = 4000) -> dict[str, object]:
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "tests": self.tests,
            "report": self.report,
            "report_writes": self.report_writes,
            "guard": self.guard,
            "changed_during_run": self.changed_during_run,
            "failures": dict(list(self.failures.items())[:100]),
            "output_tail": self.output[-output_chars:],
        }


def _has_pytest_config(root: Path) -> bool:
    if (root / "pytest.ini").is_file() or (root / "conftest.py").is_file():
        return True
    return pytest_config(tree_reader(root)) is not None


# Folders of test modules as projects name them (`tests/`, `test/`, `testing/`,
# `testsuite/`): pytest's own collection recurses into any of them.
_TEST_FOLDER = re.compile(r"^(tests?|testing|test_?suite)$")
_TEST_MODULES = ("test_*.py", "*_test.py")  # pytest's default python_files


def _test_folders(root: Path) -> list[Path]:
    """The root, its test folders and those of its packages (`pkg/tests/`, a src/
    layout's `src/pkg/tests/`); links are not followed."""
    found = [root]
    for parent in (root, *_subdirs(root), *_subdirs(root / "src")):
        found += [p for p in _subdirs(parent) if _TEST_FOLDER.match(p.name)]
    return list(dict.fromkeys(found))


def _subdirs(folder: Path) -> list[Path]:
    if not folder.is_dir() or folder.is_symlink():
        return []
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                and not p.name.startswith(".")]
    except OSError:
        return []


def _has_python_tests(root: Path) -> bool:
    """Test modules pytest would collect with no configuration: at the root, in a test
    folder (`tests/`, `testsuite/`, …) or in a package's own (`colorama/tests/*_test.py`)."""
    return any(any(folder.glob(pattern)) for folder in _test_folders(root)
               for pattern in _TEST_MODULES)


# unittest files named `test.py` (`tests/test.py`), which pytest's default python_files
# misses: the command names all three patterns.
_UNNAMED_TEST_MODULE = "test.py"
_ALL_TEST_FILES = "python_files=test_*.py *_test.py test.py"
# Benchmarks pytest would collect with the tests when nothing names the test paths
# (tabulate's tox.ini leaves `benchmark/` out by hand): their own plugins, their minutes.
_BENCHMARK_FOLDERS = ("bench", "benchmark", "benchmarks")


def _unnamed_test_modules(root: Path) -> bool:
    return any((folder / _UNNAMED_TEST_MODULE).is_file()
               and not (folder / _UNNAMED_TEST_MODULE).is_symlink()
               for folder in _test_folders(root))


def _benchmark_ignores(root: Path, kept: list[str]) -> list[str]:
    """`--ignore bench` for each benchmark folder at the root, unless the configuration's
    `testpaths` says where the tests are or `kept` ignores it already."""
    config = pytest_config(tree_reader(root))
    if config is not None and config.options.get("testpaths"):
        return []
    ignores: list[str] = []
    for name in _BENCHMARK_FOLDERS:
        folder = root / name
        if folder.is_dir() and not folder.is_symlink() and not {
                name, f"{name}/", f"--ignore={name}", f"--ignore={name}/"} & set(kept):
            ignores += ["--ignore", name]
    return ignores


def _pytest_guess(root: Path) -> str | None:
    """pytest, when its configuration or test modules are there: every test module
    named as unittest's discovery would (`test.py` too), benchmarks left out."""
    config = pytest_config(tree_reader(root))
    unnamed = _unnamed_test_modules(root) and not (config and "python_files" in config.options)
    if not (unnamed or _has_pytest_config(root) or _has_python_tests(root)):
        return None
    options = ["-o", _ALL_TEST_FILES] if unnamed else []
    options += _benchmark_ignores(root, [])
    return " ".join([PYTEST_COMMAND, *(shlex.quote(o) for o in options)])


# A README's code line that runs a test script (`python tests/test.py`, `$ python3
# run_tests.py -v`, decorator's inline `` `$ python tests/test.py -v` ``): the command
# alone on its line, its options only flags.
_README_NAMES = ("README.md", "README.rst", "README.txt", "README", "readme.md")
_SCRIPT_LINE = re.compile(r"^\s*`{0,2}(?:[$>]\s*)?python[\d.]*\s+((?:[\w.-]+/)*[\w.-]+\.py)"
                          r"(?:\s+--?\w[\w-]*)*`{0,2}\s*$", re.MULTILINE)
# A module that holds tests itself, which pytest collects when it is named.
_DEFINES_TESTS = re.compile(r"^(class \w+\(.*TestCase\)|def test\w*\()", re.MULTILINE)


def _readme_script(root: Path) -> TestCommand | None:
    """The test script a README says to run: through pytest when it defines the tests
    itself (a per-test report), else as the README runs it (judged by its exit code)."""
    read = tree_reader(root)
    for name in _README_NAMES:
        for path in _SCRIPT_LINE.findall(read(name) or ""):
            # A test path (suite_paths.py): what the verdict puts back if a change edits it.
            script = read(path) if is_test_path(path) and ".." not in path else None
            if script is None:
                continue
            command = f"{PYTEST_COMMAND} {shlex.quote(path)}" \
                if _DEFINES_TESTS.search(script) else f"python3 {shlex.quote(path)}"
            return TestCommand(command=command, source=name)
    return None


def _npm_test_script(root: Path) -> bool:
    package = tree_reader(root)("package.json")  # never a committed link's target
    if package is None:
        return False
    try:
        scripts = json.loads(package).get("scripts", {})
    except (json.JSONDecodeError, AttributeError):
        return False
    test = scripts.get("test", "") if isinstance(scripts, dict) else ""
    return bool(test) and "no test specified" not in test


def _make_test_target(root: Path) -> bool:
    for name in ("Makefile", "makefile", "GNUmakefile"):
        text = tree_reader(root)(name)
        if text is not None and re.search(r"^test\s*:", text, re.MULTILINE):
            return True
    return False


def _runner(words: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """("pytest" or "unittest", the runner's own arguments) of a command line; None when
    it runs something else (a script, `setup.py test`, tox)."""
    rest = list(words)
    while rest:
        head = os.path.basename(rest[0])
        if re.match(r"^[A-Za-z_]\w*=", rest[0]) or head in ("xvfb-run", "time", "exec"):
            rest = rest[1:]
        elif head in WRAPPERS and rest[1:2] == [WRAPPERS[head]]:
            rest = wrapper_options(rest[2:])[1]  # `uv run --all-extras pytest`
        elif head == "coverage" and rest[1:2] == ["run"]:
            if "-m" not in rest:
                return None
            rest = rest[rest.index("-m") + 1:]
        elif re.match(r"^(python[\d.]*|py)$", head):
            if rest[1:2] != ["-m"]:
                return None
            rest = rest[2:]
        else:
            break
    name = os.path.basename(rest[0]) if rest else ""
    if name in ("pytest", "py.test"):
        return "pytest", rest[1:]
    if name == "unittest":
        return "unittest", rest[1:]
    return None


def _pytest_command(args: list[str], root: Path) -> str:
    """PYTEST_COMMAND with the declared command's test paths and the options that choose
    the suite (doctests, ignored paths, a marker expression); the rest is the project's
    configuration's business, which pytest reads anyway."""
    kept: list[str] = []
    pending = paths = False
    for arg in args:
        if pending:
            kept.append(arg)
            pending = False
        elif arg in _PYTEST_KEPT or ("=" in arg and arg.split("=", 1)[0] in _PYTEST_KEPT_VALUE):
            kept.append(arg)
        elif arg in _PYTEST_KEPT_VALUE:
            kept.append(arg)
            pending = True
        elif not arg.startswith("-") and (root / arg.split("::")[0]).exists() \
                and ".." not in Path(arg).parts and not os.path.isabs(arg):
            kept.append(arg)
            paths = True
    if pending:
        kept.pop()
    if not paths:  # pytest collects from the root: benchmarks too
        kept += _benchmark_ignores(root, kept)
    return " ".join([PYTEST_COMMAND, *(shlex.quote(a) for a in kept)])


def _unittest_command(args: list[str]) -> str:
    """`python3 -m unittest` as declared: discovery's start, pattern and top, or names."""
    flags = {"-v", "-q", "-b", "-c", "-f", "--verbose", "--quiet", "--buffer", "--catch",
             "--failfast", "--locals", "--durations"}
    words = [a for a in args if a not in flags]
    if words[:1] != ["discover"]:
        names = [w for w in words if not w.startswith("-")]
        return " ".join([UNITTEST_COMMAND, *(shlex.quote(n) for n in names)])
    options, positional, rest = {}, [], words[1:]
    spelled = {"--start-directory": "-s", "--pattern": "-p", "--top-level-directory": "-t"}
    while rest:
        word = rest.pop(0)
        key, _, value = word.partition("=")
        key = spelled.get(key, key)
        if key in ("-s", "-p", "-t"):
            options[key] = value or (rest.pop(0) if rest else "")
        elif not word.startswith("-"):
            positional.append(word)
    for key, value in zip(("-s", "-p", "-t"), positional, strict=False):
        options.setdefault(key, value)
    options["-s"] = options.get("-s", ".").rstrip("/") or "."
    parts = [f"{key} {shlex.quote(value)}" for key, value in options.items() if value]
    return " ".join([UNITTEST_COMMAND, "discover", *parts])


def _declared_command(root: Path) -> TestCommand | None:
    """The first test command the project's tox.ini, noxfile.py, CI workflows or Makefile
    runs, as the harness runs it: pytest with its report, unittest through the runner."""
    for declared in declared_test_commands(tree_reader(root), workflow_files(root)):
        django = django_command(declared.words, root)
        if django is not None:
            return TestCommand(command=django, source=declared.source)
        found = _runner(declared.words)
        if found is None:
            continue
        runner, args = found
        command = _pytest_command(args, root) if runner == "pytest" else _unittest_command(args)
        return TestCommand(command=command, source=declared.source)
    return None


def unittest_with_report(command: str, report_path: str) -> str | None:
    """A plain `python3 -m unittest …` command through the harness's runner, which writes
    a junit report to `report_path`; None for any other command (or one with shell
    syntax, which the harness leaves as it is)."""
    found = re.match(r"^\s*(python3?)\s+-m\s+unittest(\s.*)?$", command)
    if not found or re.search(r"[;&|<>`$()\n]", command):
        return None
    rest = (found.group(2) or "").strip()
    return (f"{found.group(1)} -m {UNITTEST_REPORTER} --junitxml={shlex.quote(report_path)}"
            + (f" {rest}" if rest else ""))


def detect_test_command(root: Path) -> TestCommand | None:
    """The test command a maintainer would run, judged from the files at the root: the
    one the project's own tox.ini, noxfile, CI, Makefile or Justfile runs, else by its
    files: pytest's, else the test script its README runs, else another ecosystem's."""
    declared = _declared_command(root)
    if declared is not None:
        return declared
    django = detect_django(root)  # before pytest's guess, which has no settings
    if django is not None:
        return TestCommand(command=django, source="django")
    guessed = _pytest_guess(root)
    if guessed is not None:
        return TestCommand(command=guessed, source="pytest")
    readme = _readme_script(root)
    if readme is not None:
        return readme
    detectors: list[tuple[str, bool, str]] = [
        ("tox", (root / "tox.ini").is_file(), "tox"),
        ("nox", (root / "noxfile.py").is_file(), "nox"),
        ("npm", _npm_test_script(root), "npm test"),
        ("go", (root / "go.mod").is_file(), "go test -v ./..."),
        ("cargo", (root / "Cargo.toml").is_file(), "cargo test"),
        ("make", _make_test_target(root), "make test"),
    ]
    for source, found, command in detectors:
        if found:
            return TestCommand(command=command, source=source)
    return None


# How many entries `has_test_files` looks at before it takes the tree for one with tests.
_TREE_SCAN_LIMIT = 50_000


def has_test_files(root: Path) -> bool:
    """Whether the tree holds any test file at all (a `tests/` folder, `test_*.py`,
    `*.test.js`, …; suite_paths.py): without one there is nothing to judge a fix by,
    which is another fact than a suite whose command was not found. Links and dot
    folders are not followed; a tree past the scan's limit is taken to have tests."""
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")
                   and not os.path.islink(os.path.join(folder, d))]
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        for name in [*files, *(f"{d}/" for d in dirs)]:
            seen += 1
            if is_test_path(prefix + name) or seen > _TREE_SCAN_LIMIT:
                return True
    return False


@dataclass(frozen=True)
class TestChange:
    __test__ = False  # not a pytest test class
    test: str
    before: str | None  # None: the test did not exist
    after: str | None  # None: the test no longer ran


def compare_results(before: dict[str, str], after: dict[str, str]) -> list[TestChange]:
    """Tests whose state changed between the baseline and the final run."""
    changes = []
    for test in sorted(set(before) | set(after)):
        if before.get(test) != after.get(test):
            changes.append(TestChange(test, before.get(test), after.get(test)))
    return changes
