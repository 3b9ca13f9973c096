"""Setup and baseline failures name their cause and the line that fixes it (issue 20 §6)."""

from __future__ import annotations

from solver.agent.harness import baseline_problem
from solver.agent.prompts import baseline_unusable_message
from solver.setup.setup_hints import setup_failure_hint
from solver.verdict.repo_tests import TestVerdict

INFERRED = ('python3 -m venv "${HOME%/home}/venv" && "${HOME%/home}/venv"/bin/python -m pip '
            "install -e '.[testing]'")
FIXED = ("setup: python3 -m venv /frognano/venv && /frognano/venv/bin/python -m pip install "
         "-e '.[testing]'")


def _run(output: str, exit_code: int, tests: dict[str, str] | None = None) -> TestVerdict:
    return TestVerdict("python3 -m pytest -rA -p no:cacheprovider", exit_code, False, 1.0,
                       output, tests or {}, report="junit")


def test_minversion_usage_error_names_the_pytest_to_install() -> None:
    # pytest 7.2's own words (its trailing quote included) for a minversion = 8.0 project.
    output = ("ERROR: /w/setup.cfg: 'minversion' requires pytest-8.0, actual pytest-7.2.1'\n")
    problem = baseline_problem(_run(output, 4), INFERRED)
    assert problem == (
        "the tests could not be collected (pytest exit 4: the project's configuration "
        "requires pytest 8.0 and pytest 7.2.1 ran); the `.github/frognano.yml` line that "
        f"would fix it: `{FIXED} 'pytest>=8.0'`")


def test_option_of_a_missing_plugin_names_the_plugin() -> None:
    output = ("ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]\n"
              "__main__.py: error: unrecognized arguments: --cov=x -n 4\n")
    problem = baseline_problem(_run(output, 4), INFERRED)
    assert problem is not None
    assert "(pytest exit 4: unrecognized arguments: --cov=x -n 4)" in problem
    assert "belongs to pytest-cov, pytest-xdist" in problem
    assert problem.endswith(f"`{FIXED} pytest-cov pytest-xdist`")


def test_missing_module_names_its_package() -> None:
    output = "E   ModuleNotFoundError: No module named 'yaml'\n"
    problem = baseline_problem(_run(output, 2, {"tests/test_a.py": "error"}), None)
    assert problem == (
        "the tests could not be collected in tests/test_a.py (pytest exit 2: "
        "ModuleNotFoundError: No module named 'yaml'). The tests import `yaml`, which setup "
        "did not install; the `.github/frognano.yml` line that would fix it: `setup: python3 "
        "-m venv /frognano/venv && /frognano/venv/bin/python -m pip install pyyaml`")
    message = baseline_unusable_message(problem, output)
    assert ".[test]" not in message and message.count("setup:") == 1


def test_pytest_older_than_a_native_toml_config_is_no_baseline() -> None:
    # pytest 7.2 ignores pytest 9's [tool.pytest] without a word and runs anyway.
    files = {"pyproject.toml": "[tool.pytest]\ntestpaths = ['tests']\naddopts = ['-x']\n"}
    output = ("platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0\n"
              "rootdir: /w\ncollected 3 items\n")
    problem = baseline_problem(_run(output, 1, {"t::a": "failed"}), INFERRED, files.get)
    assert problem is not None
    assert problem.startswith("pytest 7.2.1 ran, but pyproject.toml [tool.pytest] is read by "
                              "pytest 9 and later only")
    assert problem.endswith(f"`{FIXED} 'pytest>=9.0'`")
    newer = output.replace("pytest-7.2.1", "pytest-9.1.1")
    assert baseline_problem(_run(newer, 1, {"t::a": "failed"}), INFERRED, files.get) is None


def test_a_generic_hint_does_not_suggest_an_extra_the_project_lacks() -> None:
    message = baseline_unusable_message("the baseline test run timed out", "")
    assert ".[test]" not in message and "pip install -e . pytest" in message


def test_setup_failure_names_the_package_the_index_lacks() -> None:
    command = INFERRED + " pytidylib pytest"
    output = ("ERROR: Could not find a version that satisfies the requirement pytidylib "
              "(from versions: none)\nERROR: No matching distribution found for pytidylib\n")
    assert setup_failure_hint(command, output) == (
        "; pip found no `pytidylib` on the package index the setup phase uses; the same "
        f"setup without it: `{FIXED} pytest`")
    declared = setup_failure_hint(INFERRED, output.replace("pytidylib", "zensical"))
    assert "FROGNANO_PIP_INDEX_URL" in declared


# pip's output when the setup phase's proxy refuses the clone (a real run's, trimmed).
GIT_CLONE_OUTPUT = (
    "Collecting helpers@ git+https://github.com/example/helpers.git@main\n"
    "  Cloning https://github.com/example/helpers.git (to revision main) to /tmp/pip-x\n"
    "  Running command git clone --filter=blob:none --quiet "
    "https://github.com/example/helpers.git /tmp/pip-x\n"
    "  fatal: unable to access 'https://github.com/example/helpers.git/': CONNECT tunnel "
    "failed, response 403\n  error: subprocess-exited-with-error\n")


def test_a_git_requirement_that_was_not_cloned_is_named_with_its_line() -> None:
    """Issue 29 §1: pip says only 'exit 1'; the hint names the file, the line and the two
    ways through (the host on FROGNANO_SETUP_EGRESS_HOSTS, or a setup without it)."""
    files = {"requirements/ci.txt": "-r base.txt\npytest\n",
             "requirements/base.txt": "attrs\n# unreleased\n"
                                      "helpers @ git+https://github.com/example/helpers.git@main\n"}
    hint = setup_failure_hint("pip install -r requirements/ci.txt", GIT_CLONE_OUTPUT, files.get)
    assert hint == (
        "; pip could not clone the git requirement `https://github.com/example/helpers.git`: "
        "requirements/base.txt line 3 (`helpers @ git+https://github.com/example/helpers.git"
        "@main`) is cloned with git from github.com, which the setup phase reaches only with "
        "FROGNANO_SETUP_EGRESS_HOSTS=github.com; or write a `setup:` line without it")
    # A requirement on the command line itself: the host, from pip's own words.
    assert "FROGNANO_SETUP_EGRESS_HOSTS=github.com" in setup_failure_hint(
        "pip install git+https://github.com/example/helpers.git", GIT_CLONE_OUTPUT, None)
    assert setup_failure_hint("pip install x", GIT_CLONE_OUTPUT.split("  fatal")[0]) == ""
