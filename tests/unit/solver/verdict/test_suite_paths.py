"""What the verdict run and the model's own test runs take of a change's test
configuration (suite_paths.plan_verdict_tree): the repository's tests with the base's, the
model's tests with the change's, and a pytest section edit shown, never refused."""

from __future__ import annotations

from solver.verdict.suite_paths import TreePlan, plan_verdict_tree

PYPROJECT = (b'[project]\nname = "p"\n\n[tool.pytest.ini_options]\n'
             b'addopts = ["--strict-markers"]\nmarkers = ["network: needs a network"]\n')


def plan_of(base: dict[str, bytes], change: dict[str, bytes]) -> TreePlan:
    changed = [p for p in set(base) | set(change) if base.get(p) != change.get(p)]
    return plan_verdict_tree(changed, base.get, change.get)


def test_a_marker_registration_is_the_model_tests_own() -> None:
    change = PYPROJECT.replace(b'"network: needs a network"]',
                               b'"network: needs a network", "regression: issue 7"]')
    change = change.replace(b'name = "p"', b'name = "p"\nversion = "2"')
    plan = plan_of({"pyproject.toml": PYPROJECT, "p.py": b""},
                   {"pyproject.toml": change, "p.py": b"x", "tests/test_new.py": b""})
    assert plan.refusals == [] and plan.flags == []
    assert plan.restored_files["pyproject.toml"] == PYPROJECT.replace(
        b'name = "p"', b'name = "p"\nversion = "2"'), "the base's section, the change's rest"
    assert b"regression: issue 7" in plan.on_base_files["pyproject.toml"]
    assert b"version" not in plan.on_base_files["pyproject.toml"]
    assert any("registers pytest markers in pyproject.toml" in n for n in plan.notes)
    assert "pyproject.toml" in plan.model_tests, "shown as a test configuration edit"
    assert plan.model_test_files() == ["tests/test_new.py"]


def test_a_section_edit_that_changes_the_run_is_flagged() -> None:
    change = PYPROJECT.replace(b'["--strict-markers"]', b'["--strict-markers", "-m", '
                               b'"not slow"]').replace(b'"network: needs a network"',
                                                       b'"network: x", "slow: y"')
    plan = plan_of({"pyproject.toml": PYPROJECT}, {"pyproject.toml": change})
    assert plan.refusals == [] and plan.restored_files["pyproject.toml"] == PYPROJECT
    assert len(plan.flags) == 1
    assert "ini_options.addopts, ini_options.markers" in plan.flags[0], plan.flags


def test_a_new_section_displacing_another_config_is_flagged() -> None:
    """A [tool.pytest.ini_options] in pyproject.toml makes pytest read it instead of
    setup.cfg's [tool:pytest]: even a marker-only one changes the run."""
    base = {"pyproject.toml": b'[project]\nname = "p"\n',
            "setup.cfg": b"[tool:pytest]\naddopts = --strict-markers\n"}
    change = {**base, "pyproject.toml": base["pyproject.toml"]
              + b'[tool.pytest.ini_options]\nmarkers = ["regression: x"]\n'}
    plan = plan_of(base, change)
    assert plan.restored_files["pyproject.toml"] == base["pyproject.toml"]
    assert plan.flags and "the section added" in plan.flags[0]


def test_a_section_that_cannot_be_cut_puts_the_whole_file_back() -> None:
    base = {"setup.cfg": b"[metadata]\nname = p\n[tool:pytest]\naddopts = -q\n"}
    change = {"setup.cfg": base["setup.cfg"] + b"[tool:pytest]\naddopts = -p flip\n"}
    plan = plan_of(base, change)
    assert plan.restore == ["setup.cfg"] and "setup.cfg" not in plan.restored_files
    assert any("could not be put back alone" in n for n in plan.notes)
    assert plan.model_files == ["setup.cfg"], "the model's tests keep the change's file"


def test_the_model_conftest_goes_with_its_tests_only() -> None:
    plan = plan_of({"tests/test_a.py": b""},
                   {"tests/test_a.py": b"", "tests/conftest.py": b"import pytest",
                    "tests/test_b.py": b"def test_b(fx): pass"})
    assert plan.restore == ["tests/conftest.py", "tests/test_b.py"], "the verdict: none"
    assert plan.model_files == ["tests/conftest.py", "tests/test_b.py"]
    assert plan.model_test_files() == ["tests/test_b.py"]
