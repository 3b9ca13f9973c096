"""Hostile issue, issue 18 §6: credentials never land in a git working tree.

A new user clones the project and runs `frognano up` in the clone, so the receiver's
working directory is the repository. The setup flow runs for real (a uvicorn receiver, the
fake GitHub's manifest conversion, as tests/unit/bot/test_setup_flow.py drives it) from inside a git
work tree that carries the project's own `.gitignore`; then the user's next move, `git add
-A && git commit`, must not carry the App's private key or webhook secret.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.settings import BotSettings
from tests.conftest import git, make_repo
from tests.reliability.conftest import Recorder
from tests.support.fake_github import FakeGitHub
from tests.unit.bot.test_setup_flow import Receiver, manifest_form, redeem, unconfigured

pytestmark = [pytest.mark.reliability]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree with the project's `.gitignore`, as the working directory."""
    repo = make_repo(tmp_path / "frognano-bot", {
        ".gitignore": (ROOT / ".gitignore").read_text(), "README.md": "# frognano-bot\n"})
    monkeypatch.chdir(repo)
    return repo


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    github = FakeGitHub(tmp_path / "github").start()
    try:
        yield github
    finally:
        github.stop()


def _set_up(settings: BotSettings, env_path: Path | None) -> httpx.Response:
    """The operator's whole setup: the link, the manifest form, GitHub, the callback."""
    with Receiver(settings, env_path) as url, httpx.Client(timeout=15) as browser:
        redeem(browser, url)
        setup = browser.get(url + "/setup")
        if setup.status_code != 200:
            return setup
        action, fields = manifest_form(setup.text)
        return browser.post(action, data=fields, follow_redirects=True)


def _holding(tree: Path, secret: str) -> list[str]:
    """Files of the work tree (its `.git` aside) whose text holds `secret`."""
    return sorted(str(path.relative_to(tree)) for path in tree.rglob("*")
                  if path.is_file() and ".git" not in path.relative_to(tree).parts
                  and secret in path.read_text(errors="replace"))


def _committed(tree: Path, *secrets: str) -> list[str]:
    """The user's next move: everything in the work tree committed; the files of that
    commit holding any of `secrets`."""
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "--allow-empty", "-m", "my changes")
    found = subprocess.run(["git", "grep", "-l", "-F", *[a for s in secrets for a in ("-e", s)],
                            "HEAD", "--"], cwd=tree, capture_output=True, text=True,
                           check=False)  # exit status 1: found nothing
    assert found.returncode in (0, 1), found.stderr
    return sorted(found.stdout.split())


def test_setup_started_in_a_clone_writes_the_key_outside_it(
        clone: Path, fake: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        scorecard: Recorder) -> None:
    record = scorecard(
        "18-hostile-credentials-clone", "Hostile credentials: `frognano up` set up from the "
        "clone, then `git add -A && git commit`",
        "the App's key and webhook secret are written to $FROGNANO_STATE_DIR/credentials/ "
        "(file 0600, folder 0700), no file of the clone holds them, the commit carries "
        "neither, `.env` is ignored, and every command reads them back from there")
    state = tmp_path / "state"
    done = _set_up(unconfigured(fake, FROGNANO_STATE_DIR=str(state)), None)  # as serve/up do
    key, secret = fake.private_key_pem.strip().splitlines()[1], fake.webhook_secret or ""
    in_tree = sorted(set(_holding(clone, key)) | set(_holding(clone, secret)))
    committed = _committed(clone, key, secret)
    stored = state / "credentials" / "github-app.env"
    monkeypatch.setenv("FROGNANO_STATE_DIR", str(state))
    read_back = BotSettings()  # from the clone, as the next `frognano up` reads
    record.observed = {
        "setup": done.status_code, "files in the clone holding them": in_tree,
        "committed files holding them": committed,
        "credentials file mode": oct(stat.S_IMODE(stored.stat().st_mode)),
        "its folder's mode": oct(stat.S_IMODE(stored.parent.stat().st_mode)),
        ".env ignored": bool(git(clone, "check-ignore", ".env").strip()),
        "read back": read_back.github_app_id == fake.app_id}
    assert in_tree == [] and committed == []
    assert done.status_code == 200 and str(stored) in done.text, done.text
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700
    assert git(clone, "check-ignore", ".env", "deploy/.env").split() == [".env", "deploy/.env"]
    assert read_back.github_app_id == fake.app_id
    assert read_back.private_key() == fake.private_key_pem
    assert read_back.webhook_secret == fake.webhook_secret


def test_a_path_in_the_clone_is_refused_for_the_state_directory(
        clone: Path, fake: FakeGitHub, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        scorecard: Recorder) -> None:
    record = scorecard(
        "18-hostile-credentials-path", "Hostile credentials: setup told to write `.env` in "
        "the clone",
        "the callback does not write there: a warning naming the work tree, the "
        "credentials go to the state directory instead")
    state = tmp_path / "state"
    with caplog.at_level(logging.WARNING, logger="frognano.bot.setup"):
        done = _set_up(unconfigured(fake, FROGNANO_STATE_DIR=str(state)), clone / ".env")
    warned = [r.getMessage() for r in caplog.records if "NOT writing" in r.getMessage()]
    record.observed = {"setup": done.status_code, "`.env` in the clone": (
        clone / ".env").exists(), "warning": warned[:1],
        "in the state directory": (state / "credentials" / "github-app.env").is_file()}
    assert done.status_code == 200 and not (clone / ".env").exists()
    assert warned and str(clone) in warned[0]
    assert (state / "credentials" / "github-app.env").is_file()


def test_a_state_directory_in_the_clone_refuses_setup(
        clone: Path, fake: FakeGitHub, scorecard: Recorder) -> None:
    record = scorecard(
        "18-hostile-credentials-state", "Hostile credentials: FROGNANO_STATE_DIR inside "
        "the clone",
        "setup is refused before GitHub makes an App (500, naming the setting); nothing "
        "is written in the clone")
    done = _set_up(unconfigured(fake, FROGNANO_STATE_DIR=str(clone / "state")), None)
    written = sorted(os.listdir(clone))
    record.observed = {"setup": done.status_code, "Apps made": len(fake.manifest_codes),
                       "clone holds": written}
    assert done.status_code == 500 and "FROGNANO_STATE_DIR" in done.text
    assert fake.manifest_codes == {} and written == [".git", ".gitignore", "README.md"]


def test_an_older_installs_env_is_still_read_with_a_notice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Credentials an older frognano wrote to `.env` keep working; the receiver says where
    they belong; the credentials file, once there, wins over them."""
    home = tmp_path / "install"
    home.mkdir()
    (home / ".env").write_text('GITHUB_APP_ID=41\nGITHUB_WEBHOOK_SECRET="' + "s" * 40 + '"\n')
    monkeypatch.chdir(home)
    monkeypatch.setenv("FROGNANO_STATE_DIR", str(tmp_path / "state"))
    assert BotSettings().github_app_id == 41
    with caplog.at_level(logging.WARNING, logger="frognano.bot.setup"), \
            Receiver(BotSettings(), None):
        pass
    notices = [r.getMessage() for r in caplog.records if "older frognano" in r.getMessage()]
    assert notices and "GITHUB_WEBHOOK_SECRET" in notices[0] \
        and "credentials/github-app.env" in notices[0]
    stored = tmp_path / "state" / "credentials" / "github-app.env"
    stored.parent.mkdir(parents=True)
    stored.write_text("GITHUB_APP_ID=42\n")
    assert BotSettings().github_app_id == 42
