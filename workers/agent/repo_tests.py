"""Finding a repository's test command, and what one run of it gave.

Detection looks at files only (never runs anything): the harness runs the command
inside the sandbox, before the agent (baseline) and after it (verdict). Per-test results
come from the runner's report file (test_report.py), never from its output.
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PYTEST_COMMAND = "python3 -m pytest -rA -p no:cacheprovider"


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
    # What the harness saw of the run itself (workers/agent/verdict_run.py): how many
    # times the report was written, what its pytest guard found (None: it was silent),
    # and the test files and configuration that changed while the tests ran.
    report_writes: int = 0
    guard: dict[str, list[str]] | None = None
    changed_during_run: list[str] = field(default_factory=list)

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
            "output_tail": self.output[-output_chars:],
        }


def _has_pytest_config(root: Path) -> bool:
    if (root / "pytest.ini").is_file() or (root / "conftest.py").is_file():
        return True
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8", errors="replace"))
        except tomllib.TOMLDecodeError:
            data = {}
        if "pytest" in data.get("tool", {}):
            return True
    for name in ("setup.cfg", "tox.ini"):
        cfg = root / name
        if cfg.is_file():
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read_string(cfg.read_text(encoding="utf-8", errors="replace"))
            except configparser.Error:
                continue
            if parser.has_section("tool:pytest") or parser.has_section("pytest"):
                return True
    return False


def _has_python_tests(root: Path) -> bool:
    for folder in ("tests", "test", "."):
        base = root / folder
        if base.is_dir() and (any(base.glob("test_*.py")) or any(base.glob("*_test.py"))):
            return True
    return any(p for p in root.glob("*/tests/test_*.py"))


def _npm_test_script(root: Path) -> bool:
    package = root / "package.json"
    if not package.is_file():
        return False
    try:
        scripts = json.loads(package.read_text(encoding="utf-8")).get("scripts", {})
    except (json.JSONDecodeError, AttributeError):
        return False
    test = scripts.get("test", "") if isinstance(scripts, dict) else ""
    return bool(test) and "no test specified" not in test


def _make_test_target(root: Path) -> bool:
    for name in ("Makefile", "makefile", "GNUmakefile"):
        makefile = root / name
        if makefile.is_file():
            text = makefile.read_text(encoding="utf-8", errors="replace")
            if re.search(r"^test\s*:", text, re.MULTILINE):
                return True
    return False


def detect_test_command(root: Path) -> TestCommand | None:
    """The test command a maintainer would run, judged from the files at the root."""
    detectors: list[tuple[str, bool, str]] = [
        ("pytest", _has_pytest_config(root) or _has_python_tests(root), PYTEST_COMMAND),
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
