"""The inferred setup on the shapes real projects have (issue 20 §2, §3), from files only."""

from __future__ import annotations

from pathlib import Path

from solver.setup.python_setup import fix_line, infer_python_setup


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _command(root: Path) -> str:
    setup = infer_python_setup(root)
    assert setup is not None
    return setup.command


PROJECT = "[project]\nname = 'p'\nversion = '1'\n"


def test_pep735_group_is_resolved_with_its_included_groups(tmp_path: Path) -> None:
    # dependency-groups 1.3.2's own shape: `test` includes `coverage`.
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[dependency-groups]\n"
                     "coverage = ['coverage[toml]']\ntest = ['pytest', "
                     "{include-group = 'coverage'}]\ndocs = ['sphinx']\n"})
    setup = infer_python_setup(tmp_path)
    assert setup is not None
    assert setup.command.endswith("pip install -e . pytest 'coverage[toml]'")
    assert "`test` dependency group" in setup.note and "sphinx" not in setup.command


def test_group_named_otherwise_counts_when_it_lists_pytest(tmp_path: Path) -> None:
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[dependency-groups]\n"
                     "lint = ['ruff']\nci = ['pytest>=8', 'pytest-benchmark']\n"})
    assert _command(tmp_path).endswith("-e . 'pytest>=8' pytest-benchmark")


def test_requirements_folder_test_file_locked_over_its_in(tmp_path: Path) -> None:
    # itsdangerous 2.2.0 / blinker 1.9.0: pip-compile's requirements/*.in and *.txt.
    _tree(tmp_path, {"pyproject.toml": PROJECT,
                     "requirements/tests.in": "pytest\nfreezegun\n",
                     "requirements/tests.txt": "freezegun==1.5.5\npytest==8.4.2\n",
                     "requirements/docs.txt": "sphinx==8\n",
                     "requirements/dev.txt": "-r tests.txt\n-r docs.txt\n"})
    command = _command(tmp_path)
    assert command.endswith("pip install -e . -r requirements/tests.txt")  # pytest is pinned


def test_requirements_folder_dev_file_when_no_test_one(tmp_path: Path) -> None:
    _tree(tmp_path, {"setup.py": "from setuptools import setup\nsetup(name='p')\n",
                     "requirements/development.txt": "hypothesis\n",
                     "requirements/docs.txt": "sphinx\n"})
    assert _command(tmp_path).endswith("-e . -r requirements/development.txt pytest")


def test_extra_named_otherwise_is_a_test_extra_when_it_lists_test_packages(
        tmp_path: Path) -> None:
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[project.optional-dependencies]\n"
                     "docs = ['sphinx']\nci = ['hypothesis', 'pytest-mock']\n"})
    assert "-e '.[ci]'" in _command(tmp_path)
    _tree(tmp_path, {"pyproject.toml": "", "setup.py": (
        "from setuptools import setup\nEXTRAS = {'docs': ['sphinx'], "
        "'check': ['pytest', 'freezegun']}\nsetup(name='q', extras_require=EXTRAS)\n")})
    assert "-e '.[check]'" in _command(tmp_path)


def test_tox_env_that_runs_the_tests_gives_its_deps_and_extras(tmp_path: Path) -> None:
    # markdown 3.11's and toml 0.10.2's shapes: extras and deps of [testenv].
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[project.optional-dependencies]\n"
                     "docs = ['mkdocs']\nextra = ['pyyaml']\n",
                     "requirements-ci.txt": "freezegun\n",
                     "tox.ini": "[tox]\nenvlist = py311, flake8\n\n[testenv]\nextras = extra\n"
                                "deps =\n    numpy\n    py38: oldthing\n"
                                "    -r{toxinidir}/requirements-ci.txt\n"
                                "    pygments=={env:PYGMENTS}\n"
                                "commands = coverage run -m pytest {posargs}\n\n"
                                "[testenv:flake8]\ndeps = flake8\ncommands = flake8\n"})
    setup = infer_python_setup(tmp_path)
    assert setup is not None
    assert setup.command.endswith("-e '.[extra]' -r requirements-ci.txt numpy pytest")
    assert "tox.ini's [testenv]" in setup.note
    assert "flake8" not in setup.command and "oldthing" not in setup.command


def test_plugins_named_only_by_the_pytest_configuration(tmp_path: Path) -> None:
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[tool.pytest.ini_options]\n"
                     "addopts = '--cov=p -n auto --timeout=30'\n"
                     "required_plugins = ['pytest-mock>=3']\nasyncio_mode = 'auto'\n"})
    command = _command(tmp_path)
    for plugin in ("'pytest-mock>=3'", "pytest-cov", "pytest-xdist", "pytest-timeout",
                   "pytest-asyncio"):
        assert f" {plugin}" in command, plugin
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[project.optional-dependencies]\n"
                     "test = ['pytest-cov>=5']\n[tool.pytest.ini_options]\naddopts = '--cov'\n"})
    assert _command(tmp_path).endswith("pip install -e '.[test]' pytest")  # declared once


def test_pytest_goes_into_the_venv_as_the_configuration_needs(tmp_path: Path) -> None:
    _tree(tmp_path, {"setup.py": "from setuptools import setup\nsetup(name='p')\n"})
    command = _command(tmp_path)
    assert "--system-site-packages" not in command  # Debian's pytest 7.2 never stands in
    assert command.endswith("pip install -e . pytest")
    _tree(tmp_path, {"setup.cfg": "[tool:pytest]\nminversion = 8.0\n"})
    assert _command(tmp_path).endswith("-e . 'pytest>=8.0'")
    _tree(tmp_path, {"pyproject.toml": "[tool.pytest]\ntestpaths = ['tests']\n"})
    setup = infer_python_setup(tmp_path)
    assert setup is not None and setup.command.endswith("-e . 'pytest>=9.0'")
    assert "read by pytest 9 and later only" in setup.note
    # The dotted spelling of ini_options is the old format (iniconfig 2.3.1).
    _tree(tmp_path, {"pyproject.toml": "[tool.pytest]\nini_options.testpaths = 'testing'\n"})
    assert _command(tmp_path).endswith("-e . pytest")


def test_fix_line_adds_to_the_setup_that_ran() -> None:
    inferred = ('python3 -m venv "${HOME%/home}/venv" && "${HOME%/home}/venv"/bin/python '
                "-m pip install -e .")
    assert fix_line(inferred, ["pytest-cov"]) == (
        "setup: python3 -m venv /frognano/venv && /frognano/venv/bin/python -m pip install "
        "-e . pytest-cov")
    assert fix_line(None, ["pyyaml"]) == (
        "setup: python3 -m venv /frognano/venv && /frognano/venv/bin/python -m pip install "
        "pyyaml")


SCM_BUILD = ('[build-system]\nrequires = ["setuptools>=61", "setuptools_scm[toml]>=3.4.1"]\n'
             'build-backend = "setuptools.build_meta"\n\n[project]\nname = "p"\n'
             'dynamic = ["version"]\n')


def test_a_version_from_git_is_given_where_setup_has_no_git(tmp_path: Path) -> None:
    """Setup runs without `.git` (inflect as cloned: setuptools-scm, no PKG-INFO): pip's
    build would stop at "unable to detect version", so the version is given."""
    _tree(tmp_path, {"pyproject.toml": SCM_BUILD, "tests/test_p.py": ""})
    setup = infer_python_setup(tmp_path)
    assert setup is not None
    assert ' && SETUPTOOLS_SCM_PRETEND_VERSION=0+unknown "${HOME%/home}/venv"/bin/python -m ' \
           'pip install -e . pytest' in setup.command
    assert "setuptools-scm would read from git given as 0+unknown" in setup.note


def test_hatch_vcs_and_use_scm_version_need_it_too(tmp_path: Path) -> None:
    hatch = _tree(tmp_path / "hatch", {"pyproject.toml": (
        '[build-system]\nrequires = ["hatchling", "hatch-vcs"]\n'
        'build-backend = "hatchling.build"\n[project]\nname = "p"\ndynamic = ["version"]\n')})
    legacy = _tree(tmp_path / "legacy", {"setup.py": (
        "from setuptools import setup\nsetup(name='p', use_scm_version=True, "
        "setup_requires=['setuptools_scm'])\n")})
    assert "SETUPTOOLS_SCM_PRETEND_VERSION=" in _command(hatch)
    assert "SETUPTOOLS_SCM_PRETEND_VERSION=" in _command(legacy)


def test_no_version_is_given_where_the_build_finds_one(tmp_path: Path) -> None:
    """An sdist's PKG-INFO (setuptools-scm reads it), a `fallback_version`, or a build
    that does not ask git."""
    sdist = _tree(tmp_path / "sdist", {"pyproject.toml": SCM_BUILD,
                                       "PKG-INFO": "Metadata-Version: 2.1\nName: p\n"
                                                   "Version: 1.2\n"})
    fallback = _tree(tmp_path / "fallback", {"pyproject.toml": SCM_BUILD
                                             + '\n[tool.setuptools_scm]\n'
                                               'fallback_version = "0.0"\n'})
    plain = _tree(tmp_path / "plain", {"pyproject.toml": PROJECT})
    for root in (sdist, fallback, plain):
        assert "SETUPTOOLS_SCM_PRETEND_VERSION" not in _command(root), root.name


def test_the_extras_a_justfiles_uv_run_installs_are_installed(tmp_path: Path) -> None:
    # Issue 29 §1: `uv run --all-extras pytest`; the tests import the extras.
    _tree(tmp_path, {"pyproject.toml": PROJECT + "[project.optional-dependencies]\n"
                     "yaml = ['pyyaml']\ntoml = ['tomli-w']\n",
                     "Justfile": "test:\n\tuv run --all-extras pytest -q\n"})
    assert _command(tmp_path).endswith("-e '.[yaml,toml]' pytest")
    _tree(tmp_path, {"Justfile": "test:\n\tuv run --extra toml --extra=nope pytest -q\n"})
    assert _command(tmp_path).endswith("-e '.[toml]' pytest")


def test_a_git_requirement_is_named_before_setup_runs(tmp_path: Path) -> None:
    # Issue 29 §1: the inferred setup's note names the line, its host and the way round.
    _tree(tmp_path, {"pyproject.toml": PROJECT,
                     "requirements-test.txt": "pytest\n# unreleased\n"
                                              "git+https://gitlab.example/h/helpers.git#egg=h\n"})
    setup = infer_python_setup(tmp_path)
    assert setup is not None and setup.command.endswith("-e . -r requirements-test.txt")
    assert setup.note.endswith(
        "; requirements-test.txt line 3 (`git+https://gitlab.example/h/helpers.git#egg=h`) "
        "is cloned with git from gitlab.example, which the setup phase reaches only with "
        "FROGNANO_SETUP_EGRESS_HOSTS=gitlab.example; or write the setup without it: `setup: "
        "python3 -m venv /frognano/venv && /frognano/venv/bin/python -m pip install -e . "
        "pytest`")
