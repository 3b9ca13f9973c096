"""Test-command detection and per-test result parsing, on real files and real runner output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workers.agent.repo_tests import (
    PYTEST_COMMAND,
    TestChange,
    compare_results,
    detect_test_command,
    parse_test_results,
    suspicious_test_changes,
    touched_test_files,
)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pytest.ini": "[pytest]\n"}, ("pytest", PYTEST_COMMAND)),
        ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, ("pytest", PYTEST_COMMAND)),
        ({"setup.cfg": "[tool:pytest]\n"}, ("pytest", PYTEST_COMMAND)),
        ({"tests/test_x.py": ""}, ("pytest", PYTEST_COMMAND)),
        ({"tox.ini": "[tox]\nenvlist = py311\n"}, ("tox", "tox")),
        ({"noxfile.py": ""}, ("nox", "nox")),
        ({"package.json": '{"scripts": {"test": "node --test"}}'}, ("npm", "npm test")),
        ({"go.mod": "module x\n"}, ("go", "go test -v ./...")),
        ({"Cargo.toml": "[package]\n"}, ("cargo", "cargo test")),
        ({"Makefile": "all:\n\techo\ntest: all\n\t./run\n"}, ("make", "make test")),
    ],
)
def test_detects_each_ecosystem(tmp_path: Path, files: dict[str, str],
                                expected: tuple[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = detect_test_command(tmp_path)
    assert found is not None
    assert (found.source, found.command) == expected


def test_npm_placeholder_script_and_empty_tree_find_nothing(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(
        '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}')
    (tmp_path / "README.md").write_text("hello")
    assert detect_test_command(tmp_path) is None


def test_broken_pyproject_does_not_crash_detection(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("this is = = not toml")
    (tmp_path / "go.mod").write_text("module x\n")
    found = detect_test_command(tmp_path)
    assert found is not None and found.source == "go"


def test_parses_real_pytest_output(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    assert 1 == 2\n"
        "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_param(n):\n    assert n == 1\n"
    )
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    results = parse_test_results(proc.stdout)
    assert results == {
        "test_sample.py::test_ok": "passed",
        "test_sample.py::test_bad": "failed",
        "test_sample.py::test_param[1]": "passed",
        "test_sample.py::test_param[2]": "failed",
    }


def test_parses_real_unittest_output(tmp_path: Path) -> None:
    (tmp_path / "test_u.py").write_text(
        "import unittest\n"
        "class T(unittest.TestCase):\n"
        "    def test_a(self):\n        pass\n"
        "    def test_b(self):\n        self.assertEqual(1, 2)\n"
    )
    proc = subprocess.run([sys.executable, "-m", "unittest", "-v", "test_u"], cwd=tmp_path,
                          capture_output=True, text=True)
    results = parse_test_results(proc.stderr)
    assert results == {"test_u.T.test_a": "passed", "test_u.T.test_b": "failed"}


def test_parses_go_cargo_and_tap_lines() -> None:
    output = "\n".join([
        "=== RUN   TestAdd", "--- PASS: TestAdd (0.00s)", "--- FAIL: TestSub (0.00s)",
        "test tests::it_works ... ok", "test tests::broken ... FAILED",
        "test tests::slow ... ignored",
        "ok 1 - adds numbers", "not ok 2 - subtracts", "ok 3 - later # SKIP not yet",
    ])
    assert parse_test_results(output) == {
        "TestAdd": "passed", "TestSub": "failed",
        "tests::it_works": "passed", "tests::broken": "failed", "tests::slow": "skipped",
        "adds numbers": "passed", "subtracts": "failed", "later": "skipped",
    }


def test_compare_and_suspicious_changes() -> None:
    before = {"a": "failed", "b": "passed", "c": "passed", "d": "failed"}
    after = {"a": "passed", "b": "passed", "c": "skipped"}
    changes = compare_results(before, after)
    assert changes == [TestChange("a", "failed", "passed"), TestChange("c", "passed", "skipped"),
                       TestChange("d", "failed", None)]
    diff = (
        "diff --git a/tests/test_x.py b/tests/test_x.py\n"
        "deleted file mode 100644\n"
        "diff --git a/tests/test_y.py b/tests/test_y.py\n"
        "+@pytest.mark.skip(reason='flaky')\n"
        "diff --git a/src/app.py b/src/app.py\n"
        "+x = 1\n"
    )
    reasons = suspicious_test_changes(diff, changes)
    assert "test is now skipped: c" in reasons
    assert "test no longer runs: d" in reasons
    assert "test file deleted: tests/test_x.py" in reasons
    assert any("skip marker" in r for r in reasons)
    assert touched_test_files(diff) == ["tests/test_x.py", "tests/test_y.py"]
    assert suspicious_test_changes("diff --git a/src/a.py b/src/a.py\n+y = 2\n", []) == []
