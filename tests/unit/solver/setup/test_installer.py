"""Who installs the inferred setup (solver/setup/installer.py): uv with pip as its
fallback, or pip; the command's shape, the `.github/frognano.yml` lines built from it,
and the setting that picks one. The commands run for real in the sandbox in
tests/unit/solver/setup/test_package_index.py and tests/reliability/test_hostile_index.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.settings import BotSettings
from solver.setup.installer import (
    FALLBACK_SAID,
    FUNCTION,
    UV_NOTE,
    fell_back,
    uv_binary,
    with_installer,
)
from solver.setup.package_index import PackageIndex
from solver.setup.python_setup import VENV, InferredSetup, fix_line, infer_python_setup
from solver.setup.setup_hints import setup_failure_hint

SCM_PROJECT = {"pyproject.toml": "[build-system]\nrequires = ['setuptools', 'setuptools-scm']\n"
                                 "[project]\nname = 'p'\ndynamic = ['version']\n"
                                 "[project.optional-dependencies]\ntest = ['pytest', 'attrs']\n"}


def _inferred(root: Path, files: dict[str, str]) -> InferredSetup:
    for name, text in files.items():
        (root / name).write_text(text)
    inferred = infer_python_setup(root)
    assert inferred is not None
    return inferred


def _bash_parses(command: str) -> None:
    checked = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True,
                             timeout=30, check=False)
    assert checked.returncode == 0, checked.stderr


def test_uv_installs_the_same_requirements_pip_would_and_keeps_the_build_env(
        tmp_path: Path) -> None:
    pip = _inferred(tmp_path, SCM_PROJECT)
    uv = with_installer(pip, "uv")
    installs = pip.command.partition(" -m pip install ")[2]
    assert installs == "-e '.[test]'"
    # One function, then its call with the build's variable and the same words last.
    assert uv.command.endswith(f"; SETUPTOOLS_SCM_PRETEND_VERSION=0+unknown {FUNCTION} "
                               f"{installs}")
    body = uv.command.partition(f"{FUNCTION}() {{ ")[2]
    assert body.startswith(f"uv venv --no-config --python python3 {VENV} && "
                           f"uv pip install --no-config --no-sources --python {VENV}/bin/python "
                           '"$@" || { echo "' + FALLBACK_SAID)
    assert f"python3 -m venv --clear {VENV} && {VENV}/bin/python -m pip install \"$@\"" in body
    assert uv.note == pip.note + UV_NOTE and uv.requirements == pip.requirements
    _bash_parses(uv.command)


def test_pip_or_an_unknown_shape_is_left_as_inferred(tmp_path: Path) -> None:
    pip = _inferred(tmp_path, SCM_PROJECT)
    assert with_installer(pip, "pip") == pip
    other = InferredSetup("make venv && ./venv/bin/pip install -e .", "note")
    assert with_installer(other, "uv") == other


def test_a_fix_line_adds_to_the_same_call_and_a_hint_drops_from_it(tmp_path: Path) -> None:
    uv = with_installer(_inferred(tmp_path, SCM_PROJECT), "uv")
    line = fix_line(uv.command, ["pytest-mock"])
    assert line.startswith(f"setup: {FUNCTION}() {{ uv venv") and "${HOME" not in line
    assert line.endswith(f"{FUNCTION} -e '.[test]' pytest-mock")
    _bash_parses(line.removeprefix("setup: "))
    hint = setup_failure_hint(uv.command + " nosuchpkg",
                              "ERROR: No matching distribution found for nosuchpkg")
    assert hint.endswith(f"{FUNCTION} -e '.[test]'`"), hint


def test_the_fallback_is_read_from_the_setups_output() -> None:
    assert fell_back(f"error: failed\n{FALLBACK_SAID} (exit 2)\nCollecting x\n")
    assert not fell_back("Resolved 3 packages in 10ms\n")


@pytest.mark.parametrize(("setting", "expected"), [("uv", "uv"), ("pip", "pip")])
def test_the_setting_picks_the_installer_and_uv_is_bound_either_way(
        setting: str, expected: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FROGNANO_SETUP_INSTALLER", setting)
    monkeypatch.setenv("FROGNANO_STATE_DIR", str(tmp_path))
    index = PackageIndex.from_settings(BotSettings(_env_file=None))
    found = uv_binary()
    assert found is not None, "uv is a dependency of the product (pyproject.toml)"
    assert index.setup_installer() == expected
    # A repository's own `setup:` may call uv whichever the inferred setup uses.
    assert index.sandbox_fields()["setup_tools"] == (found,)
    # Without its binary there is no uv to run: pip, whatever the setting.
    assert PackageIndex(installer="uv").setup_installer() == "pip"
