"""One configuration: the settings model (bot/settings.py) serves every command, the
table in docs/SETTINGS.md is generated from it, every setting, environment variable and
CLI verb or flag is documented in README.md or docs/*.md, and `solve` and the services
agree on where runs, workspaces and records go."""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

import bot.settings
from bot.settings import DEFAULT_MAX_DIFF_BYTES, GROUPS, BotSettings
from frognano.cli import _parser, _solve_options
from frognano.settings_doc import main as settings_doc
from frognano.settings_doc import replace_table, settings_table
from runstore.store import RunStore
from solver import hostgit
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import make_repo
from tests.support.paths import REPO_ROOT

SETTINGS_DOC = REPO_ROOT / "docs" / "SETTINGS.md"
# Where a newcomer looks: the README and the topic files it links.
DOCUMENTATION = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# The product's code: what reads the environment (the tests' own variables are not settings).
SOURCE_DIRS = ("bot", "workers", "solver", "sandbox", "runstore", "frognano", "bench")
SHELL_SOURCES = (REPO_ROOT / ".ci" / "run", *sorted((REPO_ROOT / "scripts").glob("*.sh")))
ENV_NAME = re.compile(r"FROGNANO_[A-Z0-9_]+")
# What a developer's shell may hold that would change the defaults under test.
SCRUBBED = ("FROGNANO_STATE_DIR", "FROGNANO_WORK_DIR", "FROGNANO_DATABASE_URL",
            "XDG_STATE_HOME", "FROGNANO_MODEL", "FROGNANO_SANDBOX")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_settings_doc_table_is_the_models() -> None:
    text = SETTINGS_DOC.read_text(encoding="utf-8")
    assert replace_table(text) == text, (
        "docs/SETTINGS.md's settings table is stale: "
        "python3 -m frognano.settings_doc --write docs/SETTINGS.md")
    assert settings_doc(["--check", str(SETTINGS_DOC)]) == 0


def test_the_check_fails_on_a_table_that_differs(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n" + settings_table().replace("`7200`", "`3600`") + "\n")
    assert settings_doc(["--check", str(readme)]) == 1
    assert settings_doc(["--write", str(readme)]) == 0
    assert settings_doc(["--check", str(readme)]) == 0


def test_every_setting_is_in_a_group_with_its_words() -> None:
    grouped = [name for _, model in GROUPS for name in model.model_fields]
    assert sorted(grouped) == sorted(BotSettings.model_fields), "a setting outside GROUPS"
    assert len(grouped) == len(set(grouped)), "a setting in two groups"
    for name, field in BotSettings.model_fields.items():
        assert field.alias and field.description, f"{name} needs an env name and a meaning"
        assert f"`{field.alias}`" in settings_table()



def _documented_text(files: list[Path]) -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in files)


def _mentions(text: str, word: str) -> bool:
    """`word` as a whole token: FROGNANO_GUARD is not documented by FROGNANO_GUARD_REPORT,
    nor `--repo` by `--repo-url`."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def settings_fields() -> set[str]:
    """The environment name of every field of every settings model in bot/settings.py."""
    models = [model for _, model in inspect.getmembers(bot.settings, inspect.isclass)
              if issubclass(model, BaseSettings) and model.__module__ == bot.settings.__name__]
    return {field.alias or name.upper() for model in models
            for name, field in model.model_fields.items()}


def python_env_reads(root: Path = REPO_ROOT) -> set[str]:
    """FROGNANO_* names the product's Python code uses as a whole string: an environment
    key (`os.environ.get("FROGNANO_X")`, `NAME_ENV = "FROGNANO_X"`), not a word inside
    a larger text (a heredoc delimiter, a regex)."""
    names: set[str] = set()
    for folder in SOURCE_DIRS:
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and ENV_NAME.fullmatch(node.value):
                    names.add(node.value)
    return names


def shell_env_reads(sources: tuple[Path, ...] = SHELL_SOURCES) -> set[str]:
    """FROGNANO_* variables the install and CI scripts expand (`$X`, `${X:-…}`)."""
    return {match for path in sources for match in
            re.findall(r"\$\{?(FROGNANO_[A-Z0-9_]+)", path.read_text(encoding="utf-8"))}


def cli_words(parser: argparse.ArgumentParser, verb: tuple[str, ...] = ()
              ) -> Iterator[tuple[tuple[str, ...], str]]:
    """(verb, word) for every verb ("frognano model pull") and long flag of the parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                named = (*verb, name)
                yield named, "frognano " + " ".join(named)
                yield from cli_words(sub, named)
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                yield verb, option


def undocumented(text: str) -> list[str]:
    """What a newcomer could meet and find nowhere in `text`."""
    env = sorted(settings_fields() | python_env_reads() | shell_env_reads())
    missing = [f"setting {name}" for name in env if not _mentions(text, name)]
    missing += [f"frognano {' '.join(verb)}: {word}" for verb, word in cli_words(_parser())
                if not _mentions(text, word)]
    return missing


def test_every_setting_variable_and_cli_word_is_documented() -> None:
    assert undocumented(_documented_text(DOCUMENTATION)) == [], \
        "document these in README.md or a docs/*.md file"


def test_the_scan_finds_what_the_code_reads() -> None:
    """The scans see real reads of every kind, so an empty list above means something."""
    assert {"FROGNANO_MODEL", "FROGNANO_DASHBOARD_TOKEN", "GITHUB_APP_ID"} <= settings_fields()
    assert {"FROGNANO_SETUP_TOKEN", "FROGNANO_GIT_TOKEN"} <= python_env_reads()
    assert {"FROGNANO_VENV", "FROGNANO_BIN_DIR", "FROGNANO_INSTALL_RECORD"} <= shell_env_reads()
    words = {word for _, word in cli_words(_parser())}
    assert {"frognano solve", "frognano model path", "--test-model", "--workers"} <= words


def test_an_undocumented_setting_fails_the_check() -> None:
    """Take one documented word out of the text, and the check names it."""
    text = _documented_text(DOCUMENTATION)
    for gone, named in (("FROGNANO_PROGRESS_SECONDS", "setting FROGNANO_PROGRESS_SECONDS"),
                        ("FROGNANO_GIT_TOKEN", "setting FROGNANO_GIT_TOKEN"),
                        ("--kv-cache-type", "frognano solve: --kv-cache-type"),
                        ("frognano doctor", "frognano doctor: frognano doctor")):
        stripped = re.sub(rf"(?<![\w-]){re.escape(gone)}(?![\w-])", "(gone)", text)
        assert named in undocumented(stripped), gone

def test_the_default_patch_limit_is_the_hosts() -> None:
    assert DEFAULT_MAX_DIFF_BYTES == hostgit.DEFAULT_MAX_DIFF_BYTES


def test_xdg_state_home_moves_the_state_for_every_command(clean_env: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    clean_env.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    settings = BotSettings()
    assert settings.state_dir == tmp_path / "xdg" / "frognano"
    assert settings.run_database_url.endswith(f"{tmp_path}/xdg/frognano/frognano.db")
    clean_env.setenv("FROGNANO_STATE_DIR", str(tmp_path / "explicit"))
    assert BotSettings().state_dir == tmp_path / "explicit"


def test_solve_and_the_worker_share_the_work_dir(clean_env: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    from frognano.worker_command import build_runtime

    clean_env.setenv("FROGNANO_STATE_DIR", str(tmp_path / "state"))
    settings = BotSettings(GITHUB_APP_ID=1, GITHUB_PRIVATE_KEY="not a key",
                           FROGNANO_MODEL="scripted:/dev/null")
    args = _parser().parse_args(["solve", ".", "--issue", "x"])
    solve = _solve_options(args, "x", settings)
    worker = build_runtime(settings)
    assert solve.work_dir == worker.work_dir == Path(f"/var/tmp/frognano-{os.getuid()}")
    assert solve.state_dir / "transcripts" == worker.transcripts_dir
    assert solve.max_diff_bytes == worker.defaults.max_diff_bytes
    assert worker.defaults.limits.max_context_tokens == solve.n_ctx  # one context choice
    worker.run_store.close()


def test_flags_override_the_settings(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("FROGNANO_MODEL", "http://server:8080")
    clean_env.setenv("FROGNANO_SANDBOX", "unsafe-local")
    clean_env.setenv("FROGNANO_N_CTX", "8192")
    settings = BotSettings()
    plain = _solve_options(_parser().parse_args(["solve", ".", "--issue", "x"]), "x",
                           settings)
    assert (plain.model, plain.sandbox, plain.n_ctx) == ("http://server:8080",
                                                          "unsafe-local", 8192)
    flagged = _solve_options(_parser().parse_args(
        ["solve", ".", "--issue", "x", "--model", "scripted:f", "--sandbox", "bubblewrap",
         "--n-ctx", "4096"]), "x", settings)
    assert (flagged.model, flagged.sandbox, flagged.n_ctx) == ("scripted:f", "bubblewrap",
                                                                4096)


def test_solves_flags_of_before_set_the_same_options(clean_env: pytest.MonkeyPatch) -> None:
    """Issue 22 §1 renamed `--max-attempts` to `--max-rounds` and `--attempts` to
    `--candidates`; a command line of before means what it meant."""
    settings = BotSettings(FROGNANO_MAX_CANDIDATES=8)
    runs = [_solve_options(_parser().parse_args(["solve", ".", "--issue", "x", *flags]), "x",
                           settings)
            for flags in (["--max-rounds", "2", "--candidates", "3"],
                          ["--max-attempts", "2", "--attempts", "3"])]
    assert [(run.flags.max_rounds, run.candidates) for run in runs] == [(2, 3), (2, 3)]


def test_solve_records_where_serve_reads_under_xdg_state_home(tmp_path: Path) -> None:
    """The bug this fixes: with XDG_STATE_HOME set, `solve` wrote its runs to one database
    and `serve` showed another."""
    repo = make_repo(tmp_path / "calc", template="calc_repo")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        think_and_call("add uses minus.", "Edit", file_path="calc.py",
                       old_string="return a - b", new_string="return a + b"),
        final_answer("Fixed.")]))
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(XDG_STATE_HOME=str(tmp_path / "xdg"), FROGNANO_WORK_DIR=str(tmp_path / "w"))
    done = subprocess.run(
        [sys.executable, "-m", "frognano", "solve", str(repo), "--issue", "add() subtracts",
         "--model", f"scripted:{script}", "--sandbox", "unsafe-local",
         "--test-cmd", f"{sys.executable} -m pytest -q -p no:cacheprovider"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    served = subprocess.run(
        [sys.executable, "-c", "from bot.settings import BotSettings; "
                               "print(BotSettings().run_database_url)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    store = RunStore(served)
    assert [run.trigger for run in store.list_runs()] == ["solve"]
    store.close()
