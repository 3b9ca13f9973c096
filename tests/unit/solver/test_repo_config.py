"""`.github/frognano.yml` parsing: defaults, valid settings, and errors fit for a comment."""

from __future__ import annotations

import pytest

from solver.limits import PRESETS
from solver.repo_config import RepoConfig, RepoConfigError, parse_repo_config


@pytest.mark.parametrize("text", [None, "", "   \n", "# only a comment\n"])
def test_missing_or_empty_file_gives_defaults(text: str | None) -> None:
    assert parse_repo_config(text) == RepoConfig()
    # Unset budgets are the operator's preset's (solver/limits.py): the evaluated
    # configuration's 150 steps, or Leaf's agent default of 100.
    assert RepoConfig().max_steps is None and RepoConfig().test is None
    assert RepoConfig().limits_over(PRESETS["evaluation"]).max_steps == 150
    assert RepoConfig().limits_over(PRESETS["agent"]).max_steps == 100


def test_valid_settings() -> None:
    config = parse_repo_config(
        "test: make check\nsetup: pip install -e .\nmax_steps: 40\nmax_rounds: 2\n"
        "timeout_minutes: 30\nprotected_paths: ['docs/**', 'LICENSE']\n")
    assert config.test == "make check" and config.setup == "pip install -e ."
    assert (config.max_steps, config.max_rounds, config.timeout_minutes) == (40, 2, 30)
    assert config.protected_paths == ("docs/**", "LICENSE")


def test_a_file_of_before_with_the_old_key_names_is_read_the_same() -> None:
    """Issue 22 §1 renamed `max_attempts` to `max_rounds` and `attempts_in_parallel` to
    `candidates`; a repository's file that names the old keys keeps its meaning, and a
    bad value is reported under the key as the file spells it."""
    old = parse_repo_config("max_attempts: 2\nattempts_in_parallel: 3\n")
    new = parse_repo_config("max_rounds: 2\ncandidates: 3\n")
    assert (old.max_rounds, old.candidates) == (new.max_rounds, new.candidates) == (2, 3)
    assert old.limits_over(PRESETS["evaluation"]).max_rounds == 2
    with pytest.raises(RepoConfigError, match="`max_attempts`: Input should be greater"):
        parse_repo_config("max_attempts: 0\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("test: [unclosed", "is not valid YAML"),
        ("- a\n- b\n", "must be a mapping of settings, not a list"),
        ("tset: pytest\n", "`tset`: unknown setting"),
        ("max_steps: 0\n", "`max_steps`: Input should be greater than or equal to 1"),
        ("max_steps: lots\n", "`max_steps`: Input should be a valid integer"),
        ("test: ''\n", "`test`: String should have at least 1 character"),
    ],
)
def test_invalid_files_say_exactly_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text)
    assert expected in str(caught.value)
    assert str(caught.value).startswith(".github/frognano.yml")


def test_evidence_defaults_to_flag_and_takes_required() -> None:
    assert RepoConfig().evidence == "flag"  # unverified changes are proposed, labelled
    assert parse_repo_config("evidence: required\n").evidence == "required"
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config("evidence: strict\n")
    assert "`evidence`: Input should be 'flag' or 'required', not 'strict'" in str(caught.value)


def test_ci_defaults_to_skip_and_takes_run() -> None:
    assert RepoConfig().ci == "skip"  # the safe default: no secrets for model code
    assert parse_repo_config("ci: skip\n").ci == "skip"
    assert parse_repo_config("ci: run\n").ci == "run"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ci: Skip\n", "`ci`: Input should be 'skip' or 'run', not 'Skip'"),
        ("ci: off\n", "`ci`: Input should be 'skip' or 'run', not False"),  # YAML 1.1 bool
        ("ci: hold\n", "`ci`: Input should be 'skip' or 'run', not 'hold'"),
        ("ci: [run]\n", "`ci`: Input should be 'skip' or 'run', not ['run']"),
        ("ci:\n", "`ci`: Input should be 'skip' or 'run', not None"),
    ],
)
def test_bad_ci_values_name_the_choices(text: str, expected: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text)
    assert expected in str(caught.value)
