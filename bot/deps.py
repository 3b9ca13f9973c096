"""What the receiver's routes depend on (as the FastAPI template's `api/deps.py`): who may
see the run dashboard, the dashboard's store and pages, and the one way a token leaves
the address bar.

The routers (bot/dashboard.py, bot/setup_flow.py) are module-level; what they need lives
on `app.state` (set by `bot.app.create_app`) and reaches them through these dependencies.
A dependency that must answer instead of the route raises `EarlyAnswer`, which the app's
handler sends as it is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlencode

from fastapi import Depends, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from bot.pages import render_page
from bot.settings import BotSettings

if TYPE_CHECKING:  # the receiver without a run store never imports SQLAlchemy
    from jinja2 import Environment

    from runstore.store import RunStore

COOKIE = "frognano_dashboard"
COOKIE_PATH = "/runs"
NOT_CONFIGURED = ("The run dashboard is off because it has no authentication configured. "
                  "Set FROGNANO_DASHBOARD_TOKEN (a shared token), or FROGNANO_DASHBOARD_USER "
                  "and FROGNANO_DASHBOARD_PASSWORD (HTTP basic auth), and restart the "
                  "receiver.")


class EarlyAnswer(Exception):
    """Raised by a dependency: send `response` instead of running the route."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


async def send_early_answer(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, EarlyAnswer)
    return exc.response


def url_without_token(request: Request) -> str:
    """The address the browser asked for, less its `token` parameter: after a token in the
    URL is traded for a cookie, it leaves the address bar before any page links out."""
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return request.url.path + (f"?{urlencode(rest)}" if rest else "")


# --- the dashboard's viewer ---------------------------------------------------------------


@dataclass(frozen=True)
class DashboardAuth:
    token: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_settings(cls, settings: BotSettings) -> DashboardAuth:
        return cls(
            token=settings.dashboard_token.get_secret_value() if settings.dashboard_token
            else None,
            user=settings.dashboard_user,
            password=settings.dashboard_password.get_secret_value()
            if settings.dashboard_password else None)

    @property
    def configured(self) -> bool:
        return bool(self.token) or self.basic_configured

    @property
    def basic_configured(self) -> bool:
        return bool(self.user and self.password)

    def session_value(self) -> str:
        """What the cookie holds: derived from the token, never the token itself."""
        assert self.token
        return hmac.new(self.token.encode(), b"frognano-dashboard-session",
                        hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str | None) -> bool:
        return bool(self.token and candidate) and hmac.compare_digest(
            candidate.encode(), self.token.encode())  # type: ignore[union-attr]

    def allows(self, request: Request) -> bool:
        if self.token:
            cookie = request.cookies.get(COOKIE)
            if cookie and hmac.compare_digest(cookie, self.session_value()):
                return True
            header = request.headers.get("authorization", "")
            if header.lower().startswith("bearer ") and self.token_matches(header[7:].strip()):
                return True
            if self.token_matches(request.headers.get("x-frognano-token")):
                return True
        return self.basic_configured and self._basic_matches(
            request.headers.get("authorization", ""))

    def _basic_matches(self, header: str) -> bool:
        if not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        assert self.user and self.password
        # Both compared, always, so the timing does not tell which one was wrong.
        user_ok = hmac.compare_digest(user.encode(), self.user.encode())
        password_ok = hmac.compare_digest(password.encode(), self.password.encode())
        return user_ok and password_ok


@dataclass(frozen=True)
class Dashboard:
    """What the dashboard's routes share: the run store, who may look, the pages."""

    store: RunStore
    auth: DashboardAuth
    env: Environment


def with_session(response: Response, auth: DashboardAuth, request: Request) -> Response:
    response.set_cookie(COOKIE, auth.session_value(), path=COOKIE_PATH, httponly=True,
                        samesite="lax", secure=request.url.scheme == "https",
                        max_age=30 * 24 * 3600)
    return response


def dashboard_of(request: Request) -> Dashboard:
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


def _denial(request: Request, dashboard: Dashboard) -> Response | None:
    """None when the viewer may see the dashboard, else the answer to send instead."""
    auth, env = dashboard.auth, dashboard.env
    if not auth.configured:
        return render_page(env, "denied.html", 403, message=NOT_CONFIGURED)
    if auth.allows(request):
        return None
    given = request.query_params.get("token")
    if given is not None and auth.token_matches(given):
        # Trade the token in the URL for a cookie.
        return with_session(RedirectResponse(url_without_token(request), 303), auth, request)
    answer = render_page(env, "login.html", 401, token_login=bool(auth.token),
                         next=request.url.path, wrong=given is not None)
    if auth.basic_configured and not auth.token:
        answer.headers["WWW-Authenticate"] = 'Basic realm="frognano dashboard"'
    return answer


def require_viewer(request: Request) -> Dashboard:
    """The dashboard, for a viewer it admits; anyone else gets the login or refusal page."""
    dashboard = dashboard_of(request)
    if (denied := _denial(request, dashboard)) is not None:
        raise EarlyAnswer(denied)
    return dashboard


def require_script_viewer(request: Request) -> Dashboard:
    """As `require_viewer`, for the page's own script: a refusal is JSON, not a page."""
    dashboard = dashboard_of(request)
    if (denied := _denial(request, dashboard)) is not None:
        raise EarlyAnswer(JSONResponse({"error": "not authorized"}, denied.status_code))
    return dashboard


Viewer = Annotated[Dashboard, Depends(require_viewer)]
ScriptViewer = Annotated[Dashboard, Depends(require_script_viewer)]
DashboardDep = Annotated[Dashboard, Depends(dashboard_of)]
