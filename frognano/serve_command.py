"""`frognano serve`: the webhook receiver under uvicorn (one process; scale with more hosts)."""

from __future__ import annotations

import logging

import uvicorn

from bot.app import create_app
from bot.logs import configure_json_logging
from bot.settings import BotSettings, webhook_secret_problem
from bot.setup_flow import app_configured, new_setup_token, setup_link

log = logging.getLogger("frognano.serve")

EXIT_NOT_CONFIGURED = 2


def run_serve(settings: BotSettings, host: str, port: int, *,
              log_level: str = "info", access_log: bool = False,
              allow_unconfigured: bool = False, setup_token: str | None = None) -> int:
    """Serve until interrupted; return the process exit status.

    The receiver logs every delivery itself (with its delivery id), so uvicorn's access log
    is off by default. `allow_unconfigured` (used by `frognano up`) serves without a webhook
    secret so the setup pages are reachable; the webhook itself then answers 503.
    Until the App exists, the setup pages need the one-time `setup_token` (`up` passes
    the one it printed; otherwise one is made here), whose link is logged.
    """
    configure_json_logging(log_level.upper())
    problem = webhook_secret_problem(settings.webhook_secret)
    if problem:
        log.error("refusing to serve: %s", problem)
        return EXIT_NOT_CONFIGURED
    if not settings.webhook_secret:
        if not allow_unconfigured:
            log.error("GITHUB_WEBHOOK_SECRET is not set; refusing to serve unsigned webhooks")
            return EXIT_NOT_CONFIGURED
        log.warning("GITHUB_WEBHOOK_SECRET is not set: webhooks answer 503 until the "
                    "GitHub App is set up")
    token = None
    if not app_configured(settings):
        token = setup_token or new_setup_token()
        log.warning("no GitHub App yet: open %s to create it (the link works once, in one "
                    "browser)", setup_link(settings.public_url or f"http://{host}:{port}", token))
    app = create_app(settings, bot_login=settings.bot_login, run_store=_run_store(settings),
                     setup_token=token)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level=log_level,
                            access_log=access_log, workers=1)
    server = uvicorn.Server(config)
    server.run()
    # uvicorn sets `started` once bound; False means it could not bind or start.
    return 0 if server.started else 1


def _run_store(settings: BotSettings):  # -> RunStore | None
    """The run records behind the dashboard; webhooks are still served without them."""
    from runstore.store import RunStoreUnavailable, open_run_store

    try:
        return open_run_store(settings.run_database_url)
    except RunStoreUnavailable as exc:
        log.error("run records unavailable, serving without the dashboard: %s", exc)
        return None
