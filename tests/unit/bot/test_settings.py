"""One configuration: the settings model (bot/settings.py) serves every command, the
README's table is generated from it, and `solve` and the services agree on where runs,
workspaces and records go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import DEFAULT_MAX_DIFF_BYTES, GROUPS, BotSettings
from frognano.cli import _parser, _solve_options
from frognano.settings_doc import main as settings_doc
from frognano.settings_doc import replace_table, settings_table
from runstore.store import RunStore
from solver import hostgit
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import make_repo
from tests.support.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
# What a developer's shell may hold that would change the defaults under test.
SCRUBBED = ("FROGNANO_STATE_DIR", "FROGNANO_WORK_DIR", "FROGNANO_DATABASE_URL",
            "XDG_STATE_HOME", "FROGNANO_MODEL", "FROGNANO_SANDBOX")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_readme_table_is_the_models() -> None:
    text = README.read_text(encoding="utf-8")
    assert replace_table(text) == text, \
        "README.md's settings table is stale: python3 -m frognano.settings_doc --write README.md"
    assert settings_doc(["--check", str(README)]) == 0


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
    assert solve.max_diff_bytes == worker.max_diff_bytes
    assert worker.context_tokens == settings.n_ctx
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
