"""GitHub App setup: the manifest, `frognano app manifest`, and the manifest flow served by
the receiver, over real HTTP against the fake GitHub (its OpenAPI check included)."""

from __future__ import annotations

import json
import re
import stat
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from dotenv import dotenv_values

from bot.app import WEBHOOK_PATH, create_app
from bot.app_manifest import app_manifest
from bot.github_client import clone_host_url
from bot.settings import BotSettings
from bot.setup_flow import github_web_url, merge_env_file
from bot.triggers import Trigger
from frognano.app_command import run_app_manifest
from tests.support.chromium import chromium, keep_screenshot
from tests.support.fake_github import FakeGitHub

PEM_LINE = re.compile(r"^-----BEGIN (RSA )?PRIVATE KEY-----$", re.M)
TOKEN = "the-operators-one-time-setup-token-0123456789"


class _NoEnqueue:
    def enqueue(self, trigger: Trigger) -> str:
        raise AssertionError("the setup flow must not enqueue anything")


class Receiver:
    """`create_app` under uvicorn on a free port, like `frognano serve`."""

    def __init__(self, settings: BotSettings, env_path: Path | None, token: str | None = TOKEN,
                 ) -> None:
        self._redis = redis.Redis(host="127.0.0.1", port=1)  # never reached by these pages
        app = create_app(settings, enqueuer=_NoEnqueue(), redis_client=self._redis,
                         setup_env_path=env_path, setup_token=token)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "did not start"
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._redis.close()


class _Form(HTMLParser):
    """The manifest form on /setup: its action and its hidden fields."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "form" and named.get("method") == "post":
            self.action = named.get("action")
        if tag == "input" and named.get("name"):
            self.fields[str(named["name"])] = named.get("value") or ""


def manifest_form(page: str) -> tuple[str, dict[str, str]]:
    form = _Form()
    form.feed(page)
    assert form.action, page
    return form.action, form.fields


def unconfigured(fake: FakeGitHub, **extra: str) -> BotSettings:
    return BotSettings(_env_file=None, GITHUB_API_URL=fake.api_url, **extra)


@pytest.fixture
def env_path(tmp_path: Path) -> Path:
    path = tmp_path / "config" / ".env"
    path.parent.mkdir()
    path.write_text("# kept\nFROGNANO_MODEL=/models/frog.gguf\n"
                    "GITHUB_PRIVATE_KEY_PATH=/old/key.pem\n")
    return path


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15) as client:
        yield client


def redeem(browser: httpx.Client, url: str, token: str = TOKEN) -> None:
    """What the operator does first: open the link the receiver printed."""
    answer = browser.get(url + "/", params={"token": token}, follow_redirects=True)
    assert answer.status_code == 200 and "href='/setup'" in answer.text, answer.text
    assert "token" not in str(answer.url), "the token is dropped from the address bar"


# --- the manifest -------------------------------------------------------------------------


def test_manifest_asks_for_the_least_the_bot_needs() -> None:
    manifest = app_manifest("https://bot.example.com/")
    assert manifest == {
        "name": "FrogNano", "url": "https://bot.example.com",
        "hook_attributes": {"url": "https://bot.example.com/webhooks/github", "active": True},
        "redirect_url": "https://bot.example.com/setup/callback", "public": False,
        "default_events": ["issues", "issue_comment", "pull_request", "pull_request_review",
                           "pull_request_review_comment", "check_suite", "check_run"],
        "default_permissions": {"metadata": "read", "issues": "write", "contents": "write",
                                "pull_requests": "write", "checks": "read",
                                "actions": "read"},
    }
    assert "workflows" not in manifest["default_permissions"]
    assert manifest["hook_attributes"]["url"].endswith(WEBHOOK_PATH)
    assert len(app_manifest("https://x.example", org="a" * 60)["name"]) <= 34
    with pytest.raises(ValueError):
        app_manifest("bot.example.com")


def test_app_manifest_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_app_manifest("https://bot.example.com", "acme") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == app_manifest("https://bot.example.com", org="acme")
    assert run_app_manifest(None, None) == 2
    assert "FROGNANO_PUBLIC_URL" in capsys.readouterr().err


def test_web_host_follows_the_clone_host_rule() -> None:
    for api in ("https://api.github.com", "https://ghe.example.com/api/v3",
                "http://127.0.0.1:8765"):
        assert github_web_url(api) == clone_host_url(api)


# --- .env ---------------------------------------------------------------------------------


def test_env_merge_keeps_other_settings_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    pem = "-----BEGIN RSA PRIVATE KEY-----\nAAA+/=\n-----END RSA PRIVATE KEY-----\n"
    path.write_text('# comment\nexport FROGNANO_QUEUE=q\nGITHUB_APP_ID=1\n'
                    'GITHUB_PRIVATE_KEY="-----BEGIN OLD-----\nold\n-----END OLD-----"\n'
                    "FROGNANO_TRIGGER_LABEL='bot'\nGITHUB_APP_ID=2\n")
    path.chmod(0o644)
    merge_env_file(path, {"GITHUB_APP_ID": "99", "GITHUB_PRIVATE_KEY": pem,
                          "GITHUB_WEBHOOK_SECRET": 'we"ird\\'}, remove=("FROGNANO_QUEUE",))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.startswith("# comment\n") and "OLD" not in text
    assert text.count("GITHUB_APP_ID") == 1
    assert dotenv_values(path) == {"GITHUB_APP_ID": "99", "GITHUB_PRIVATE_KEY": pem,
                                   "FROGNANO_TRIGGER_LABEL": "bot",
                                   "GITHUB_WEBHOOK_SECRET": 'we"ird\\'}


# --- the flow -----------------------------------------------------------------------------


def test_manifest_flow_for_an_organisation_end_to_end(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    with Receiver(unconfigured(fake_github), env_path) as url:
        home = browser.get(url + "/")
        assert home.status_code == 200 and "href='/setup'" not in home.text
        assert "?token=" in home.text  # tells a visitor where the link is, not the token
        redeem(browser, url)

        setup = browser.get(url + "/setup", params={"org": "acme"})
        assert setup.status_code == 200
        action, fields = manifest_form(setup.text)
        assert action.startswith(f"{fake_github.api_url}/organizations/acme/settings/apps/new?")
        state = httpx.URL(action).params["state"]
        assert len(state) >= 32
        manifest = json.loads(fields["manifest"])
        assert manifest == app_manifest(url, org="acme")

        # The browser posts the form; GitHub (the fake) sends it back to the callback.
        done = browser.post(action, data=fields, follow_redirects=True)
        assert done.status_code == 200, done.text
        assert "restart frognano" in done.text.lower()
        assert f"/apps/{fake_github.app_slug}/installations/new" in done.text

        assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
        stored = dotenv_values(env_path)
        assert stored["FROGNANO_MODEL"] == "/models/frog.gguf"  # other settings survive
        assert "GITHUB_PRIVATE_KEY_PATH" not in stored  # would clash with the new key
        assert env_path.read_text().startswith("# kept\n")
        settings = BotSettings(_env_file=env_path)
        assert settings.github_app_id == fake_github.app_id
        assert settings.private_key() == fake_github.private_key_pem
        assert PEM_LINE.search(settings.private_key() or "")
        assert settings.webhook_secret == fake_github.webhook_secret
        assert settings.bot_login == "frognano-acme[bot]" == fake_github.bot_login

        # Done once: the same process now refuses to set up again.
        again = browser.get(url + "/setup")
        assert again.status_code == 409
        assert browser.get(url + "/setup/callback",
                           params={"code": "x", "state": state}).status_code == 409

    conversions = [r for r in fake_github.api_requests() if r.path.startswith("/app-manif")]
    assert [(r.method, r.status, r.credential) for r in conversions] == [("POST", 201, None)]
    assert fake_github.manifest_codes[conversions[0].path.split("/")[2]].org == "acme"


def test_user_account_flow_posts_to_settings_apps_new(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    with Receiver(unconfigured(fake_github), env_path) as url:
        redeem(browser, url)
        action, fields = manifest_form(browser.get(url + "/setup").text)
        assert action.startswith(f"{fake_github.api_url}/settings/apps/new?state=")
        assert browser.post(action, data=fields, follow_redirects=True).status_code == 200
    assert dotenv_values(env_path)["FROGNANO_BOT_LOGIN"] == "frognano[bot]"


def test_public_url_setting_is_the_webhook_address(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    settings = unconfigured(fake_github, FROGNANO_PUBLIC_URL="https://bot.example.com")
    with Receiver(settings, env_path) as url:
        redeem(browser, url)
        page = browser.get(url + "/setup").text
        _, fields = manifest_form(page)
        assert json.loads(fields["manifest"])["hook_attributes"]["url"] == \
            "https://bot.example.com/webhooks/github"
        assert "document.getElementById('manifest').submit()" in page  # nothing to read


def test_bad_state_is_refused_and_nothing_is_written(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    before = env_path.read_text()
    with Receiver(unconfigured(fake_github), env_path) as url:
        redeem(browser, url)
        action, fields = manifest_form(browser.get(url + "/setup").text)
        code = fake_github.confirm_manifest(json.loads(fields["manifest"]), None).code
        callback = url + "/setup/callback"
        assert browser.get(callback, params={"code": code, "state": "forged"}).status_code == 400
        # The right state from another browser (no cookie) is refused too.
        state = httpx.URL(action).params["state"]
        with httpx.Client() as stranger:
            assert stranger.get(callback, params={"code": code, "state": state}).status_code \
                == 403
        assert browser.get(callback, params={"state": state}).status_code == 400  # no code
        # The state was used up by that last try: a replay fails as well.
        assert browser.get(callback, params={"code": code, "state": state}).status_code == 400
    assert env_path.read_text() == before
    assert not any(r.path.startswith("/app-manifests") for r in fake_github.requests)


def test_failed_conversion_is_reported_and_setup_can_start_again(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    before = env_path.read_text()
    with Receiver(unconfigured(fake_github), env_path) as url:
        redeem(browser, url)
        action, fields = manifest_form(browser.get(url + "/setup").text)
        fake_github.fail_next("POST", r"^/app-manifests/", 422, message="code expired")
        failed = browser.post(action, data=fields, follow_redirects=True)
        assert failed.status_code == 502
        assert "422" in failed.text and "code expired" in failed.text
        assert env_path.read_text() == before

        action, fields = manifest_form(browser.get(url + "/setup").text)
        assert browser.post(action, data=fields, follow_redirects=True).status_code == 200
    assert dotenv_values(env_path)["GITHUB_APP_ID"] == str(fake_github.app_id)


def test_unknown_code_is_a_failed_conversion(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    with Receiver(unconfigured(fake_github), env_path) as url:
        redeem(browser, url)
        action, _ = manifest_form(browser.get(url + "/setup").text)
        answer = browser.get(url + "/setup/callback",
                             params={"code": "nope", "state": httpx.URL(action).params["state"]})
        assert answer.status_code == 502 and "404" in answer.text


def test_configured_bot_shows_status_and_refuses_setup(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    settings = unconfigured(fake_github, GITHUB_APP_ID="7", GITHUB_WEBHOOK_SECRET="s" * 32,
                            GITHUB_PRIVATE_KEY=fake_github.private_key_pem)
    before = env_path.read_text()
    with Receiver(settings, env_path) as url:
        home = browser.get(url + "/")
        assert home.status_code == 200
        assert "href='/runs'" in home.text and "href='/healthz'" in home.text
        assert browser.get(url + "/setup").status_code == 409
        code = fake_github.confirm_manifest(app_manifest(url), None).code
        assert browser.get(url + "/setup/callback",
                           params={"code": code, "state": "s"}).status_code == 409
    assert env_path.read_text() == before
    assert fake_github.manifest_codes[code].used is False


# --- the setup belongs to the operator ----------------------------------------------------


def test_a_stranger_without_the_token_cannot_claim_the_bot(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    """The attack: reach a fresh receiver first, make an App of one's own on GitHub and
    send its code to the callback, so that one's own credentials land in `.env`."""
    before = env_path.read_text()
    with Receiver(unconfigured(fake_github), env_path) as url, httpx.Client() as stranger:
        home = stranger.get(url + "/")
        assert home.status_code == 200 and "href='/setup'" not in home.text
        assert TOKEN not in home.text
        assert stranger.get(url + "/setup").status_code == 403
        assert stranger.get(url + "/setup", params={"org": "evil"}).status_code == 403
        for guess in ("", "x", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "é" * 40):
            assert stranger.get(url + "/", params={"token": guess}).status_code in (200, 403)
            assert stranger.get(url + "/setup", params={"token": guess}).status_code == 403
        # The stranger's own App, made on GitHub from the receiver's manifest: its code is
        # valid, but the callback does not take it from a browser that holds no token.
        code = fake_github.confirm_manifest(app_manifest(url), None).code
        for state in ("", "forged"):
            answer = stranger.get(url + "/setup/callback",
                                  params={"code": code, "state": state})
            assert answer.status_code == 403, answer.text
        # A forged cookie does not pass for the admitted browser either.
        stranger.cookies.set("frognano_setup", "forged", domain="127.0.0.1")
        assert stranger.get(url + "/setup").status_code == 403
        assert env_path.read_text() == before
        assert not any(r.path.startswith("/app-manifests") for r in fake_github.requests)

        # The operator, with the printed token, still can.
        redeem(browser, url)
        action, fields = manifest_form(browser.get(url + "/setup").text)
        assert browser.post(action, data=fields, follow_redirects=True).status_code == 200
    assert dotenv_values(env_path)["GITHUB_APP_ID"] == str(fake_github.app_id)
    assert fake_github.manifest_codes[code].used is False  # the stranger's never converted


def test_the_token_works_once_and_dies_with_the_setup(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client) -> None:
    with Receiver(unconfigured(fake_github), env_path) as url:
        redeem(browser, url)
        with httpx.Client() as stranger:  # someone who saw the link: it is spent
            assert stranger.get(url + "/", params={"token": TOKEN}).status_code == 403
            assert stranger.get(url + "/setup", params={"token": TOKEN}).status_code == 403
        # The operator's browser goes on without the token in the address bar.
        setup = browser.get(url + "/setup", params={"org": "acme", "token": TOKEN},
                            follow_redirects=True)
        assert setup.status_code == 200 and str(setup.url).endswith("/setup?org=acme")
        action, fields = manifest_form(setup.text)
        assert browser.post(action, data=fields, follow_redirects=True).status_code == 200
        # Done: neither the token nor the admitted browser opens the flow again.
        with httpx.Client() as late:
            assert late.get(url + "/setup", params={"token": TOKEN}).status_code == 409
        assert browser.get(url + "/setup").status_code == 409


def test_without_a_given_token_one_is_made_and_logged(
        fake_github: FakeGitHub, env_path: Path, browser: httpx.Client,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="frognano.bot.setup")
    with Receiver(unconfigured(fake_github), env_path, token=None) as url:
        links = [m for r in caplog.records for m in re.findall(r"\?token=(\S+)", r.getMessage())]
        assert len(links) == 1 and len(links[0]) >= 32
        assert browser.get(url + "/setup").status_code == 403
        redeem(browser, url, links[0])
        assert browser.get(url + "/setup").status_code == 200


# --- the pages in a real browser ----------------------------------------------------------


def _look(page: Any) -> tuple[int, str, str]:
    """(stylesheets, the header's background, the body's font): the same on every page
    the receiver serves, setup and dashboard alike (bot/templates/base.html)."""
    return (page.evaluate("document.styleSheets.length"),
            page.locator("header").evaluate("e => getComputedStyle(e).backgroundColor"),
            page.locator("body").evaluate("e => getComputedStyle(e).fontFamily"))


def test_the_setup_pages_in_chromium(fake_github: FakeGitHub, env_path: Path,
                                     tmp_path: Path) -> None:
    """The operator's whole flow in a browser: the locked home page, the redeemed link,
    the manifest form (its note: 127.0.0.1 is no address GitHub reaches), GitHub (the
    fake) and back, the done page, then the running bot's home page; each one kept as a
    screenshot, each with the dashboard's look, none with a script error."""
    with chromium() as browser, Receiver(unconfigured(fake_github), env_path) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/")
        look = _look(page)
        assert look[:2] == (1, "rgb(36, 41, 47)"), look
        assert "?token=" in page.locator("main").inner_text()
        keep_screenshot(page, tmp_path / "setup-locked.png", min_bytes=3_000)

        page.goto(f"{url}/?token={TOKEN}")
        assert page.url == url + "/", "the token leaves the address bar"
        create = page.locator("a.button", has_text="Create the GitHub App")
        assert create.evaluate("e => getComputedStyle(e).backgroundColor") == \
            "rgb(26, 127, 55)"
        assert _look(page) == look
        keep_screenshot(page, tmp_path / "setup-home.png")

        create.click()
        page.wait_for_url(url + "/setup")
        assert "GitHub cannot reach" in page.locator(".notice").inner_text()
        assert _look(page) == look
        keep_screenshot(page, tmp_path / "setup-manifest.png", min_bytes=3_000)

        page.locator("button", has_text="Continue on GitHub").click()
        page.wait_for_url("**/setup/callback?*")
        assert page.locator("h1").inner_text() == "Done: restart frognano"
        install = page.locator("a", has_text="Install the App").get_attribute("href")
        assert install.endswith(f"/apps/{fake_github.app_slug}/installations/new")
        assert _look(page) == look
        keep_screenshot(page, tmp_path / "setup-done.png")

        page.goto(url + "/")
        assert page.locator("h1").inner_text() == "FrogNano is running"
        assert page.locator("main a[href='/runs']").count() == 1, "home links the runs"
        assert _look(page) == look
        keep_screenshot(page, tmp_path / "status-home.png", min_bytes=3_000)
        assert errors == [], errors
    assert dotenv_values(env_path)["GITHUB_APP_ID"] == str(fake_github.app_id)


def test_the_manifest_page_sends_itself_under_its_csp_in_chromium(
        fake_github: FakeGitHub, env_path: Path) -> None:
    """With a public URL there is nothing to read: the page posts its form to GitHub by
    itself. Its script runs under the page's Content-Security-Policy (a nonce), and the
    policy lets the form go to GitHub."""
    settings = unconfigured(fake_github, FROGNANO_PUBLIC_URL="https://bot.example.com")
    with chromium() as browser, Receiver(settings, env_path) as url:
        page = browser.new_page()
        blocked: list[str] = []
        page.on("console", lambda message: blocked.append(message.text)
                if "Content Security Policy" in message.text else None)
        page.goto(f"{url}/?token={TOKEN}")
        assert "content-security-policy" in page.goto(url + "/").headers
        with page.expect_request(lambda r: "/settings/apps/new" in r.url and
                                 r.method == "POST", timeout=10_000) as sent:
            page.goto(url + "/setup", wait_until="commit")
        assert json.loads(httpx.QueryParams(sent.value.post_data)["manifest"])[
            "hook_attributes"]["url"] == "https://bot.example.com/webhooks/github"
        assert blocked == [], blocked
