"""Test-command detection on real files; comparing per-test results."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.agent.repo_tests import (
    PYTEST_COMMAND,
    TestChange,
    compare_results,
    detect_test_command,
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


def test_compare_results() -> None:
    before = {"a": "failed", "b": "passed", "c": "passed", "d": "failed"}
    after = {"a": "passed", "b": "passed", "c": "skipped"}
    changes = compare_results(before, after)
    assert changes == [TestChange("a", "failed", "passed"), TestChange("c", "passed", "skipped"),
                       TestChange("d", "failed", None)]
