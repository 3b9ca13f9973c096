"""Finding a repository's test command, and reading per-test results from its output.

Detection looks at files only (never runs anything): the harness runs the command
inside the sandbox, before the agent (baseline) and after it (verdict).
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
    tests: dict[str, str] = field(default_factory=dict)  # test id → passed/failed/error/skipped

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for status in self.tests.values():
            counts[status] = counts.get(status, 0) + 1
        detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
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


# Per-test result lines of the runners we know. Each pattern yields (status, test id).
_PYTEST_RA = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+\.py(?:::\S+)?)", re.MULTILINE)
_GO_TEST = re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+)", re.MULTILINE)
_CARGO_TEST = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)$", re.MULTILINE)
_UNITTEST = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n.*?)? \.\.\. (ok|FAIL|ERROR|skipped.*)$",
                       re.MULTILINE)
_TAP = re.compile(r"^(ok|not ok) \d+ - (.+?)(?: # (SKIP|TODO).*)?$", re.MULTILINE)

_NORMALISE = {
    "PASSED": "passed", "PASS": "passed", "ok": "passed", "XFAIL": "passed",
    "FAILED": "failed", "FAIL": "failed", "XPASS": "failed", "not ok": "failed",
    "ERROR": "error", "SKIP": "skipped", "ignored": "skipped",
}


def parse_test_results(output: str) -> dict[str, str]:
    """Per-test statuses found in a runner's output; empty when the format is unknown."""
    results: dict[str, str] = {}
    for status, test_id in _PYTEST_RA.findall(output):
        results[test_id] = _NORMALISE[status]
    for status, test_id in _GO_TEST.findall(output):
        results[test_id] = _NORMALISE[status]
    for test_id, status in _CARGO_TEST.findall(output):
        results[test_id] = _NORMALISE[status]
    for name, where, status in _UNITTEST.findall(output):
        key = f"{where}.{name}" if not where.endswith(name) else where
        results[key] = "skipped" if status.startswith("skipped") else _NORMALISE[status]
    for status, name, directive in _TAP.findall(output):
        results[name.strip()] = "skipped" if directive else _NORMALISE[status]
    return results


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


_ADDED_SKIP = re.compile(
    r"^\+(?!\+\+).*(@pytest\.mark\.skip|pytest\.skip\(|@unittest\.skip|\.skip\(|t\.Skip\(|"
    r"#\[ignore\]|\bxit\(|\bxdescribe\(|it\.skip\(|describe\.skip\()",
    re.MULTILINE,
)
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)
_TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*$|[^/]*_test\.\w+$|[^/]*\.test\.\w+$|"
                        r"[^/]*\.spec\.\w+$)")


def touched_test_files(diff: str) -> list[str]:
    return sorted({b for _, b in _DIFF_FILE.findall(diff) if _TEST_PATH.search(b)})


def suspicious_test_changes(diff: str, changes: list[TestChange]) -> list[str]:
    """Reasons to distrust "the tests pass": tests removed, newly skipped, or skips added."""
    reasons = []
    for change in changes:
        if change.before in ("passed", "failed", "error") and change.after is None:
            reasons.append(f"test no longer runs: {change.test}")
        elif change.before in ("passed", "failed", "error") and change.after == "skipped":
            reasons.append(f"test is now skipped: {change.test}")
    for match in _ADDED_SKIP.finditer(diff):
        reasons.append(f"the diff adds a skip marker: {match.group(0)[1:].strip()[:120]}")
    for path in re.findall(r"^diff --git a/(\S+) b/\S+\ndeleted file mode", diff, re.MULTILINE):
        if _TEST_PATH.search(path):
            reasons.append(f"test file deleted: {path}")
    return reasons
