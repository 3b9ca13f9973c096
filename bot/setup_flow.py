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
from typing import Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

from dotenv import dotenv_values, set_key, unset_key
from dotenv.parser import parse_stream
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bot import github_client, pages
from bot.app_manifest import app_manifest
from bot.deps import url_without_token
from bot.github_api import GitHubError
from bot.pages import render_page
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


# --- the flow's state ------------------------------------------------------------------


class SetupFlow:
    """One receiver's setup: who may run it, the states handed out, where credentials go,
    and whether it is done. `create_app` keeps it on `app.state.setup`."""

    def __init__(self, settings: BotSettings, gate: _SetupGate, target: Path, refusal: str,
                 configured: bool) -> None:
        self.settings = settings
        self.gate, self.target, self.refusal = gate, target, refusal
        self.configured = configured
        self.states = _PendingStates()
        self.finished = asyncio.Lock()  # two racing callbacks must not both write
        self.web_url = github_web_url(settings.github_api_url)
        self.env = pages.environment()

    @classmethod
    def start(cls, settings: BotSettings, *, env_path: Path | None = None,
              setup_token: str | None = None) -> SetupFlow:
        """Credentials are written where `credentials_target` says (the state directory's
        credentials file by default). `setup_token` is the one-time token the operator
        was shown; without one (and no App yet) a new token is made here and logged, so
        setup is never open to everyone."""
        configured = app_configured(settings)
        if not configured and setup_token is None:
            setup_token = new_setup_token()
            log.warning("no GitHub App yet; open %s to set it up",
                        setup_link(settings.public_url or "http://<this receiver>",
                                   setup_token))
        target, refusal = _credentials_place(settings, env_path, configured)
        return cls(settings, _SetupGate(None if configured else setup_token), target,
                   refusal, configured)

    def admitted(self, request: Request, token: str | None) -> tuple[str | None, bool]:
        """(the admitted browser id or None, whether it was redeemed just now)."""
        browser = request.cookies.get(STATE_COOKIE)
        if self.gate.admits(browser):
            return browser, False
        redeemed = self.gate.redeem(token)
        return redeemed, redeemed is not None

    def without_token(self, request: Request, new_browser: str | None) -> Response:
        """The same page again, the token dropped from the address bar before any page
        links out; a browser that redeemed it just now is admitted by a cookie."""
        redirect = RedirectResponse(url_without_token(request), 303)
        if new_browser is not None:
            # Lax: GitHub's redirect back is a top-level GET, which carries Lax cookies.
            # Secure follows the scheme the browser used, so the local http link works.
            redirect.set_cookie(STATE_COOKIE, new_browser, httponly=True, samesite="lax",
                                path="/", secure=request.url.scheme == "https")
        return redirect

    def save(self, app: dict[str, Any]) -> None:
        """The App's credentials into the target file; setup is done."""
        if self.target == credentials_path(self.settings.state_dir):
            _private_folder(self.target.parent)
        merge_env_file(self.target, {
            "GITHUB_APP_ID": str(app["id"]), "GITHUB_PRIVATE_KEY": app["pem"],
            "GITHUB_WEBHOOK_SECRET": app["webhook_secret"],
            "FROGNANO_BOT_LOGIN": f"{app['slug']}[bot]"}, remove=CLEARED_KEYS)
        self.configured = True
        self.gate.close()

    # --- pages (bot/templates/setup_*.html) ---

    def page(self, template: str, title: str, status_code: int = 200,
             **context: Any) -> HTMLResponse:
        # The manifest form posts to GitHub, so GitHub is a place forms may go.
        return render_page(self.env, template, status_code, title=title,
                           form_action=f"'self' {self.web_url}", **context)

    def note(self, title: str, *lines: str, status_code: int,
             start_again: bool = False) -> HTMLResponse:
        return self.page("setup_note.html", title, status_code, lines=lines,
                         start_again=start_again)

    def locked(self, status_code: int = 200, forbidden: bool = False) -> HTMLResponse:
        return self.page("setup_locked.html", "Set up FrogNano", status_code,
                         forbidden=forbidden)

    def forbidden(self) -> HTMLResponse:
        return self.locked(403, forbidden=True)

    def already_configured(self) -> HTMLResponse:
        return self.page("setup_configured.html", "Already set up", 409)

    def refused(self) -> HTMLResponse:
        return self.note("Cannot store the App's credentials", f"{self.refusal}.",
                         status_code=500)

    def manifest_form(self, action: str, manifest: dict[str, Any], public_url: str
                      ) -> HTMLResponse:
        local = any(host in public_url for host in ("://localhost", "://127.", "://[::1]"))
        return self.page("setup_manifest.html", "Creating the GitHub App", action=action,
                         manifest=json.dumps(manifest), public_url=public_url, local=local)

    def done(self, app: dict[str, Any]) -> HTMLResponse:
        html_url = str(app.get("html_url") or f"{self.web_url}/apps/{app['slug']}")
        return self.page("setup_done.html", "Done: restart frognano", slug=app["slug"],
                         env_path=str(self.target.resolve()),
                         install_url=f"{html_url.rstrip('/')}/installations/new")


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


def setup_flow_of(request: Request) -> SetupFlow:
    flow: SetupFlow = request.app.state.setup
    return flow


Setup = Annotated[SetupFlow, Depends(setup_flow_of)]


# --- the router: `/`, `/setup` and `/setup/callback` ------------------------------------

router = APIRouter(default_response_class=HTMLResponse)


@router.get("/")
async def home(request: Request, flow: Setup, token: str | None = None) -> Response:
    if flow.configured:
        return flow.page("status_home.html", "FrogNano is running")
    browser, fresh = flow.admitted(request, token)
    if browser is None:
        return flow.forbidden() if token else flow.locked()
    if token is not None:
        return flow.without_token(request, browser if fresh else None)
    return flow.page("setup_home.html", "Set up FrogNano")


@router.get("/setup")
async def start(request: Request, flow: Setup, org: str | None = None,
                token: str | None = None) -> Response:
    if flow.configured:
        return flow.already_configured()
    browser, fresh = flow.admitted(request, token)
    if browser is None:
        return flow.forbidden()
    if token is not None:
        return flow.without_token(request, browser if fresh else None)
    if flow.refusal:  # before GitHub makes an App whose key would have nowhere to go
        return flow.refused()
    public_url = flow.settings.public_url or str(request.base_url).rstrip("/")
    try:
        manifest = app_manifest(public_url, org=org or None)
    except ValueError as exc:
        return flow.note("Cannot set up", str(exc), status_code=400)
    state = flow.states.issue(browser)
    return flow.manifest_form(manifest_form_action(flow.web_url, org or None, state),
                              manifest, public_url)


@router.get("/setup/callback")
async def callback(request: Request, flow: Setup, code: str = "", state: str = ""
                   ) -> HTMLResponse:
    async with flow.finished:
        if flow.configured:
            return flow.already_configured()
        browser = request.cookies.get(STATE_COOKIE)
        if not flow.gate.admits(browser):
            return flow.forbidden()
        if not flow.states.take(state, browser):
            return flow.note("Setup link expired or not yours",
                             "This callback does not match a setup started from this "
                             "browser in the last hour.", status_code=400, start_again=True)
        if flow.refusal:
            return flow.refused()
        if not code:
            return flow.note("No code from GitHub", "GitHub sent no code.", status_code=400,
                             start_again=True)
        try:
            app = await convert_manifest_code(flow.settings.github_api_url, code)
        except ConversionError as exc:
            return flow.note("GitHub did not create the App", str(exc),
                             "Codes expire after an hour and work once.", status_code=502,
                             start_again=True)
        flow.save(app)
    return flow.done(app)
