"""The receiver's HTML: one Jinja environment for the setup pages and the run dashboard,
one base template (bot/templates/base.html, with the one stylesheet), one way to answer.

Every value goes through autoescaping, and every `{{ … }}` through `_shown`: a page's text
may come from an issue, the model or a repository. Pages carry a nonce-based
Content-Security-Policy, so an injected `<script>` would not run even if it slipped through.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from bot.inert import visible

TEMPLATES = Path(__file__).parent / "templates"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def http_url(value: str | None) -> bool:
    """Only http(s) links are rendered: a stored `javascript:` URL must not become one."""
    return bool(value) and str(value).startswith(("https://", "http://"))


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _shown(value: Any) -> Any:
    """Every `{{ … }}` of every template: autoescaping stops HTML, but a run's texts (the
    model's commands and answers, test output, paths, an issue's title) may hold bidi
    overrides that reorder what a reviewer reads, and escape sequences for whoever saves
    the page to a terminal: shown as escapes (bot/inert.py). Markup is the templates' own."""
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) \
        else value


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      finalize=_shown)
    env.filters.update(duration=duration, pretty_json=pretty_json, http_url=http_url)
    return env


def security_headers(nonce: str, form_action: str = "'self'") -> dict[str, str]:
    """`form_action`: where the page's forms may post (the setup page posts to GitHub)."""
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
            f"connect-src 'self'; img-src 'self' data:; form-action {form_action}; "
            "base-uri 'none'; frame-ancestors 'none'"),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def render_page(env: Environment, template: str, status_code: int = 200, *,
                form_action: str = "'self'", **context: Any) -> HTMLResponse:
    """A whole page from `template`, with a fresh nonce for its own scripts."""
    nonce = secrets.token_urlsafe(16)
    html = env.get_template(template).render(nonce=nonce, **context)
    return HTMLResponse(html, status_code, headers=security_headers(nonce, form_action))
