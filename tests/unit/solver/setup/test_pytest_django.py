"""A pytest-django project's setup (issue 29 §1): its settings module in the pytest
configuration, as TOML keeps it (`DJANGO_SETTINGS_MODULE`) or an ini file lower-cases it."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.setup.project_files import pytest_config, tree_reader
from solver.setup.python_setup import infer_python_setup

PROJECT = "[project]\nname = 'p'\nversion = '1'\n"


@pytest.mark.parametrize(("name", "text"), [
    ("pyproject.toml", PROJECT + "[tool.pytest.ini_options]\n"
                                 "DJANGO_SETTINGS_MODULE = 'site.settings'\n"),
    ("pytest.ini", "[pytest]\nDJANGO_SETTINGS_MODULE = site.settings\n"),
    ("setup.cfg", "[tool:pytest]\ndjango_settings_module = site.settings\n"),
])
def test_the_settings_key_names_pytest_django_in_any_case(tmp_path: Path, name: str,
                                                          text: str) -> None:
    (tmp_path / name).write_text(text)
    config = pytest_config(tree_reader(tmp_path))
    assert config is not None and "pytest-django" in config.plugins


def test_pytest_django_and_django_are_installed_when_undeclared(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        PROJECT + "[tool.pytest.ini_options]\nDJANGO_SETTINGS_MODULE = 'site.settings'\n")
    setup = infer_python_setup(tmp_path)
    assert setup is not None
    assert setup.command.endswith("pip install -e . pytest-django Django pytest")
    assert "Django (pytest-django needs it and does not require it)" in setup.note


def test_a_declared_django_is_not_added_again(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'p'\nversion = '1'\ndependencies = ['Django>=4.2,<5']\n"
        "[project.optional-dependencies]\ntest = ['pytest-django']\n"
        "[tool.pytest.ini_options]\nDJANGO_SETTINGS_MODULE = 'site.settings'\n")
    setup = infer_python_setup(tmp_path)
    assert setup is not None
    assert "Django" not in setup.command and "[test]" in setup.command
