"""The home page and GitHub's App manifest flow, served by the receiver.

`GET /setup` posts the manifest (bot/app_manifest.py) to GitHub; GitHub creates the App
and sends the browser back to `GET /setup/callback?code=…&state=…`, which trades the
code for the App's id, private key and webhook secret and writes them to the credentials
file under the state directory (`$FROGNANO_STATE_DIR/credentials/github-app.env`, the
file 0600, its folder 0700; bot/settings.py reads it). Never into a git work tree: `frognano
up` started from the clone has the repository as its working directory, and `git add .`
would commit the App's private key. A path the caller names inside one is refused with a
warning, for the credentials file; a state directory inside one refuses setup.

The flow only runs while the App is not configured: once credentials exist (in the
settings, or written by this process) the callback answers 409, so nobody who can reach
the receiver can swap the credentials of a running bot.

Before that, the flow belongs to the operator, not to whoever reaches the receiver first
(as with Jupyter's and Grafana's first-run tokens): the receiver makes a one-time setup
token at start and prints it (`frognano up` in its banner, `frognano serve` in its log).
`/?token=…` or `/setup?token=…` redeems it once for a cookie that admits that one browser;
`/setup` and `/setup/callback` answer 403 to any other. The state GitHub hands back is
random, single-use, short-lived and tied to that admitted browser, and the token and the
admission die when setup completes.
"""

from __future__ import annotations

import asyncio
import errno
import html
import io
import json
import logging
import os
import secrets
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from dotenv import dotenv_values, set_key, unset_key
from dotenv.parser import parse_stream
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bot import github_client
from bot.app_manifest import app_manifest
from bot.github_api import GitHubError
from bot.settings import LEGACY_ENV_FILE, BotSettings, credentials_path

log = logging.getLogger("frognano.bot.setup")

STATE_TTL_S = 3600.0  # the user may take a while on GitHub's page
MAX_PENDING = 100  # bounds memory if someone hammers GET /setup
STATE_COOKIE = "frognano_setup"  # the admitted browser's id
SETUP_TOKEN_BYTES = 32
EXCHANGE_TIMEOUT_S = 15.0
# What the callback writes, and what it clears: a key file left over from an older App
# would clash with the new inline key (BotSettings refuses both).
WRITTEN_KEYS = ("GITHUB_APP_ID", "GITHUB_PRIVATE_KEY", "GITHUB_WEBHOOK_SECRET",
                "FROGNANO_BOT_LOGIN")
CLEARED_KEYS = ("GITHUB_PRIVATE_KEY_PATH",)
SECRET_KEYS = ("GITHUB_PRIVATE_KEY", "GITHUB_WEBHOOK_SECRET")


def app_configured(settings: BotSettings) -> bool:
    has_key = settings.github_private_key is not None or \
        settings.github_private_key_path is not None
    return settings.github_app_id is not None and has_key and bool(settings.webhook_secret)


def new_setup_token() -> str:
    return secrets.token_urlsafe(SETUP_TOKEN_BYTES)


def setup_link(base_url: str, token: str) -> str:
    """The link the operator opens; printed at start, never served to a browser."""
    return f"{base_url.rstrip('/')}/?{urlencode({'token': token})}"


def github_web_url(api_url: str) -> str:
    """github.com for api.github.com, the GHES host for `/api/v3`, the fake itself in tests.

    The same rule as `bot.github_client.clone_host_url` (a test holds them equal), kept
    here so the receiver does not import githubkit (half a second of start-up).
    """
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    return f"{parts.scheme}://{parts.netloc}"


def manifest_form_action(web_url: str, org: str | None, state: str) -> str:
    where = f"/organizations/{quote(org, safe='')}" if org else ""
    return f"{web_url}{where}/settings/apps/new?{urlencode({'state': state})}"


# --- who may set up ------------------------------------------------------------------------


def _same(given: str, expected: str) -> bool:
    # Bytes: compare_digest refuses str with non-ASCII characters, which anyone can send.
    return secrets.compare_digest(given.encode(), expected.encode())


class _SetupGate:
    """The one-time token, then the one browser that redeemed it."""

    def __init__(self, token: str | None) -> None:
        self._token = token
        self._browser: str | None = None

    def redeem(self, token: str | None) -> str | None:
        """A new browser id for the right token, once; None for anything else."""
        if not token or self._token is None or not _same(token, self._token):
            return None
        self._token = None  # single-use: a leaked link (history, proxy log) is spent
        self._browser = secrets.token_urlsafe(32)
        return self._browser

    def admits(self, browser: str | None) -> bool:
        return bool(browser) and self._browser is not None and \
            _same(str(browser), self._browser)

    def close(self) -> None:
        self._token = self._browser = None


# --- pending states -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Pending:
    browser: str  # the cookie value that must come back with the state
    created: float


class _PendingStates:
    """States handed out by GET /setup (in memory: the receiver is one process)."""

    def __init__(self) -> None:
        self._by_state: dict[str, _Pending] = {}

    def issue(self, browser: str) -> str:
        self._drop_expired()
        while len(self._by_state) >= MAX_PENDING:
            self._by_state.pop(next(iter(self._by_state)))  # the oldest
        state = secrets.token_urlsafe(32)
        self._by_state[state] = _Pending(browser, time.monotonic())
        return state

    def take(self, state: str, browser: str | None) -> bool:
        """True once for a state this process issued to this browser, not yet expired."""
        self._drop_expired()
        pending = self._by_state.get(state)
        if pending is None or browser is None or \
                not secrets.compare_digest(pending.browser, browser):
            return False
        del self._by_state[state]
        return True

    def _drop_expired(self) -> None:
        cutoff = time.monotonic() - STATE_TTL_S
        for state in [s for s, p in self._by_state.items() if p.created < cutoff]:
            del self._by_state[state]


# --- where credentials go -----------------------------------------------------------------


class CredentialsRefused(Exception):
    """No place outside a git work tree to write the App's credentials to."""


def git_work_tree(path: Path) -> Path | None:
    """The top of the git work tree `path` would be in (a `.git` directory or file in it
    or a folder above), or None. By the file system alone: no git runs for this."""
    for folder in Path(os.path.abspath(path)).parents:
        if os.path.lexists(folder / ".git"):
            return folder
    return None


def credentials_target(settings: BotSettings, requested: Path | None) -> Path:
    """Where the callback writes the App's credentials: `requested` (an operator's own
    file, a test's) when it is outside every git work tree, else the state directory's
    credentials file, after a loud warning. CredentialsRefused when that one is in a git
    work tree too."""
    default = credentials_path(settings.state_dir)
    if requested is not None:
        tree = git_work_tree(requested)
        if tree is None:
            return requested
        log.warning("NOT writing the GitHub App's credentials to %s: it is inside the git "
                    "work tree %s, where `git add` would commit the private key; they go "
                    "to %s instead", os.path.abspath(requested), tree, default)
    tree = git_work_tree(default)
    if tree is not None:
        raise CredentialsRefused(
            f"FROGNANO_STATE_DIR ({settings.state_dir}) is inside the git work tree {tree}, "
            "so the GitHub App's credentials would be one `git add` away from a commit; "
            "set FROGNANO_STATE_DIR to a folder outside it and restart")
    return default


def legacy_credentials_notice() -> str | None:
    """A notice when `.env` in the working directory, where setup wrote before, holds
    the App's secrets: they are still read, but belong in the credentials file."""
    if not LEGACY_ENV_FILE.is_file():
        return None
    held = sorted(key for key in dotenv_values(LEGACY_ENV_FILE) if key in SECRET_KEYS)
    if not held:
        return None
    tree = git_work_tree(LEGACY_ENV_FILE)
    inside = f", inside the git work tree {tree}," if tree else ""
    return (f"{', '.join(held)} read from {LEGACY_ENV_FILE.resolve()}{inside} where an "
            "older frognano wrote them; move them to "
            "$FROGNANO_STATE_DIR/credentials/github-app.env (mode 0600, its folder 0700)")


def _private_folder(folder: Path) -> None:
    """The credentials' own folder: made 0700, and tightened if it was looser."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)


# --- .env ---------------------------------------------------------------------------------


def _dotenv_quote(value: str) -> str:
    """One double-quoted line; python-dotenv and Compose both turn `\\n` back into newlines."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def merge_env_file(path: Path, values: dict[str, str], remove: tuple[str, ...] = ()) -> None:
    """Set `values` in the dotenv file at `path` (mode 0600), keeping every other line.

    python-dotenv's `set_key`/`unset_key` do the editing, on a private scratch copy:
    they would replace `path` by a file of their own mode, and cannot rewrite a file
    bind-mounted into a container; `_write_private` does both.
    """
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=".env.")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(old)
        present = Counter(binding.key for binding in parse_stream(io.StringIO(old)))
        for key in remove:
            if present[key] and key not in values:
                unset_key(scratch, key)
        for key, value in values.items():
            if present[key] > 1:  # set_key would write it at each place: keep one
                unset_key(scratch, key)
            # Our own quoting: set_key's single quotes do not escape a backslash, so a
            # value ending in one would swallow its closing quote.
            set_key(scratch, key, _dotenv_quote(value), quote_mode="never")
        text = Path(scratch).read_text(encoding="utf-8")
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
    _write_private(path, text)


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=".env.")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.replace(scratch, path)  # readers never see half a file
            return
        except OSError as exc:
            # A file bind-mounted into a container cannot be replaced, only rewritten.
            if exc.errno not in (errno.EBUSY, errno.EXDEV):
                raise
        descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o600)
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


# --- the conversion -----------------------------------------------------------------------


class ConversionError(Exception):
    """GitHub did not turn the code into an App (expired, used twice, or an odd answer)."""


async def convert_manifest_code(api_url: str, code: str) -> dict[str, Any]:
    """Trade the code for the App through the GitHub client (githubkit); unauthenticated,
    the code is the credential. Checks the fields the callback writes to `.env`."""
    try:
        app = await github_client.convert_manifest_code(api_url, code,
                                                        timeout_seconds=EXCHANGE_TIMEOUT_S)
    except GitHubError as exc:
        raise ConversionError(str(exc)) from exc
    wanted = {"id": int, "slug": str, "pem": str, "webhook_secret": str}
    for field, kind in wanted.items():
        if not isinstance(app.get(field), kind):
            raise ConversionError(f"GitHub's answer has no usable {field!r}")
    return app


# --- pages --------------------------------------------------------------------------------


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)} · FrogNano</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:42rem;margin:3rem auto;"
        "padding:0 1rem;line-height:1.5}code{background:#f2f2f2;padding:0 .2rem}"
        ".button{display:inline-block;padding:.5rem 1rem;background:#1f883d;color:#fff;"
        "border:0;border-radius:6px;text-decoration:none;font-size:1rem;cursor:pointer}"
        "</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{body}</body></html>", status_code=status)


def _setup_home() -> HTMLResponse:
    return _page("Set up FrogNano", (
        "<p>This bot has no GitHub App yet. Setting one up takes a minute:</p><ol>"
        "<li>Create the App on GitHub: the button sends GitHub the App's settings "
        "(webhook URL, the events <code>issues</code>, <code>issue_comment</code>, "
        "<code>pull_request</code> and its review events, "
        "and the permissions it needs); you only confirm its name.</li>"
        "<li>GitHub sends you back here; the App's id, private key and webhook secret "
        "are saved under the state directory (<code>FROGNANO_STATE_DIR</code>), readable "
        "by its owner only.</li>"
        "<li>Install the App on your repositories and restart frognano.</li></ol>"
        "<p><a class=button href='/setup'>Create the GitHub App</a></p>"
        "<form action='/setup' method=get><p>For an organisation: "
        "<input name=org placeholder='organisation login' required> "
        "<button class=button>Create it for the organisation</button></p></form>"))


def _setup_locked(status: int = 200, why: str = "") -> HTMLResponse:
    return _page("Set up FrogNano", (
        f"{why}<p>This bot has no GitHub App yet. Setting it up is open only to its "
        "operator: open the link with <code>?token=…</code> that the receiver printed "
        "when it started (<code>frognano up</code> shows it in its banner, "
        "<code>frognano serve</code> in its log). The link works once, in one browser; "
        "restart the receiver for a new one.</p>"), status)


def _forbidden() -> HTMLResponse:
    return _setup_locked(403, "<p><strong>Not allowed:</strong> this browser did not open "
                              "the setup link, or the link was already used.</p>")


def _status_home() -> HTMLResponse:
    return _page("FrogNano is running", (
        "<p>The GitHub App is configured and webhooks are accepted.</p><ul>"
        "<li><a href='/runs'>Runs</a>: what the bot did, and why</li>"
        "<li><a href='/healthz'>Health</a> of the receiver and its dependencies</li>"
        "<li><a href='/metrics'>Metrics</a> (Prometheus)</li></ul>"))


def _already_configured() -> HTMLResponse:
    return _page("Already set up", (
        "<p>This bot already has a GitHub App, so the setup flow is closed: it would "
        "replace the running App's credentials. To start over, remove "
        "<code>GITHUB_APP_ID</code>, <code>GITHUB_PRIVATE_KEY</code> and "
        "<code>GITHUB_WEBHOOK_SECRET</code> from where they are set (the environment, "
        "<code>$FROGNANO_STATE_DIR/credentials/github-app.env</code> or <code>.env</code>) "
        "and restart.</p>"), 409)


# Without a warning to read, the user has nothing to do on this page.
_AUTO_SUBMIT = "<script>document.getElementById('manifest').submit()</script>"


def _manifest_form(action: str, manifest: dict[str, Any], public_url: str) -> HTMLResponse:
    local = any(host in public_url for host in ("://localhost", "://127.", "://[::1]"))
    warning = ("<p><strong>Note:</strong> the webhook URL is "
               f"<code>{html.escape(public_url)}</code>, which GitHub cannot reach. Set "
               "<code>FROGNANO_PUBLIC_URL</code> to this receiver's public address, or fix "
               "the webhook URL in the App's settings later.</p>") if local else ""
    return _page("Creating the GitHub App", (
        f"{warning}<form id=manifest method=post action='{html.escape(action)}'>"
        f"<input type=hidden name=manifest value='{html.escape(json.dumps(manifest))}'>"
        "<p>Sending you to GitHub… <button class=button>Continue on GitHub</button></p>"
        f"</form>{'' if local else _AUTO_SUBMIT}"))


def _done(slug: str, html_url: str, env_path: Path) -> HTMLResponse:
    install = f"{html_url.rstrip('/')}/installations/new"
    return _page("Done: restart frognano", (
        f"<p>The GitHub App <code>{html.escape(slug)}</code> was created. Its id, private "
        f"key and webhook secret are in <code>{html.escape(str(env_path.resolve()))}</code> "
        "(readable by its owner only).</p><ol>"
        f"<li><a href='{html.escape(install)}'>Install the App</a> on the repositories "
        "the bot should work on.</li>"
        "<li><strong>Restart frognano</strong> (<code>frognano up</code>, or restart the "
        "receiver and the workers) so it loads the new credentials.</li>"
        "<li>Label an issue <code>frognano</code> to get a draft pull request.</li></ol>"))


def _credentials_place(settings: BotSettings, requested: Path | None, configured: bool
                       ) -> tuple[Path, str]:
    """(where the callback writes, why setup is refused or ""), said in the log at start."""
    notice = legacy_credentials_notice()
    if notice:
        log.warning("%s", notice)
    try:
        return credentials_target(settings, requested), ""
    except CredentialsRefused as exc:
        if not configured:
            log.error("the GitHub App setup is refused: %s", exc)
        return Path(os.devnull), str(exc)


def _refused(why: str) -> HTMLResponse:
    return _page("Cannot store the App's credentials", f"<p>{html.escape(why)}.</p>", 500)


# --- the router ---------------------------------------------------------------------------


def setup_router(settings: BotSettings, *, env_path: Path | None = None,
                 setup_token: str | None = None) -> APIRouter:
    """`/`, `/setup` and `/setup/callback`; credentials are written where
    `credentials_target` says (the state directory's credentials file by default).

    `setup_token` is the one-time token the operator was shown; without one (and no App
    yet) a new token is made here and logged, so setup is never open to everyone.
    """
    router = APIRouter()
    states = _PendingStates()
    finished = asyncio.Lock()
    done = {"configured": app_configured(settings)}
    web_url = github_web_url(settings.github_api_url)
    if not done["configured"] and setup_token is None:
        setup_token = new_setup_token()
        log.warning("no GitHub App yet; open %s to set it up",
                    setup_link(settings.public_url or "http://<this receiver>", setup_token))
    gate = _SetupGate(None if done["configured"] else setup_token)
    target, refusal = _credentials_place(settings, env_path, done["configured"])

    def admitted(request: Request, token: str | None) -> tuple[str | None, bool]:
        """(the admitted browser id or None, whether it was redeemed just now)."""
        browser = request.cookies.get(STATE_COOKIE)
        if gate.admits(browser):
            return browser, False
        redeemed = gate.redeem(token)
        return redeemed, redeemed is not None

    def admit(response: Response, request: Request, browser: str) -> None:
        # Lax: GitHub's redirect back is a top-level GET, which carries Lax cookies. Secure
        # follows the scheme the browser used, so the local http link works as well.
        response.set_cookie(STATE_COOKIE, browser, httponly=True, samesite="lax", path="/",
                            secure=request.url.scheme == "https")

    def redirect_without_token(request: Request, new_browser: str | None) -> Response:
        query = urlencode([(k, v) for k, v in request.query_params.multi_items()
                           if k != "token"])
        redirect = RedirectResponse(request.url.path + (f"?{query}" if query else ""), 303)
        if new_browser is not None:
            admit(redirect, request, new_browser)
        return redirect

    @router.get("/", response_class=HTMLResponse)
    async def home(request: Request, token: str | None = None) -> Response:
        if done["configured"]:
            return _status_home()
        browser, fresh = admitted(request, token)
        if browser is None:
            return _forbidden() if token else _setup_locked()
        if token is not None:  # drop it from the address bar before any page links out
            return redirect_without_token(request, browser if fresh else None)
        return _setup_home()

    @router.get("/setup", response_class=HTMLResponse)
    async def start(request: Request, org: str | None = None, token: str | None = None,
                    ) -> Response:
        if done["configured"]:
            return _already_configured()
        browser, fresh = admitted(request, token)
        if browser is None:
            return _forbidden()
        if token is not None:
            return redirect_without_token(request, browser if fresh else None)
        if refusal:  # before GitHub makes an App whose key would have nowhere to go
            return _refused(refusal)
        public_url = settings.public_url or str(request.base_url).rstrip("/")
        try:
            manifest = app_manifest(public_url, org=org or None)
        except ValueError as exc:
            return _page("Cannot set up", f"<p>{html.escape(str(exc))}</p>", 400)
        state = states.issue(browser)
        return _manifest_form(manifest_form_action(web_url, org or None, state), manifest,
                              public_url)

    @router.get("/setup/callback", response_class=HTMLResponse)
    async def callback(request: Request, code: str = "", state: str = "") -> HTMLResponse:
        async with finished:  # two racing callbacks must not both write credentials
            if done["configured"]:
                return _already_configured()
            browser = request.cookies.get(STATE_COOKIE)
            if not gate.admits(browser):
                return _forbidden()
            if not states.take(state, browser):
                return _page("Setup link expired or not yours", (
                    "<p>This callback does not match a setup started from this browser in "
                    "the last hour. <a href='/setup'>Start again</a>.</p>"), 400)
            if refusal:
                return _refused(refusal)
            if not code:
                return _page("No code from GitHub", (
                    "<p>GitHub sent no code. <a href='/setup'>Start again</a>.</p>"), 400)
            try:
                app = await convert_manifest_code(settings.github_api_url, code)
            except ConversionError as exc:
                return _page("GitHub did not create the App", (
                    f"<p>{html.escape(str(exc))}</p><p>Codes expire after an hour and work "
                    "once. <a href='/setup'>Start again</a>.</p>"), 502)
            if target == credentials_path(settings.state_dir):
                _private_folder(target.parent)
            merge_env_file(target, {
                "GITHUB_APP_ID": str(app["id"]), "GITHUB_PRIVATE_KEY": app["pem"],
                "GITHUB_WEBHOOK_SECRET": app["webhook_secret"],
                "FROGNANO_BOT_LOGIN": f"{app['slug']}[bot]"}, remove=CLEARED_KEYS)
            done["configured"] = True
            gate.close()
        html_url = app.get("html_url") or f"{web_url}/apps/{app['slug']}"
        return _done(app["slug"], str(html_url), target)

    return router
