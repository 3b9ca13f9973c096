"""`frognano serve`: the webhook receiver under uvicorn (one process; scale with more hosts)."""

from __future__ import annotations

import logging

import uvicorn

from bot.app import create_app
from bot.logs import configure_json_logging
from bot.settings import BotSettings

log = logging.getLogger("frognano.serve")

EXIT_NOT_CONFIGURED = 2


def run_serve(settings: BotSettings, host: str, port: int, *,
              log_level: str = "info", access_log: bool = False,
              allow_unconfigured: bool = False) -> int:
    """Serve until interrupted; return the process exit status.

    The receiver logs every delivery itself (with its delivery id), so uvicorn's access log
    is off by default. `allow_unconfigured` (used by `frognano up`) serves without a webhook
    secret so the setup pages are reachable; the webhook itself then answers 503.
    """
    configure_json_logging(log_level.upper())
    if not settings.webhook_secret:
        if not allow_unconfigured:
            log.error("GITHUB_WEBHOOK_SECRET is not set; refusing to serve unsigned webhooks")
            return EXIT_NOT_CONFIGURED
        log.warning("GITHUB_WEBHOOK_SECRET is not set: webhooks answer 503 until the "
                    "GitHub App is set up")
    app = create_app(settings, bot_login=settings.bot_login, run_store=_run_store(settings))
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level=log_level,
                            access_log=access_log, workers=1)
    server = uvicorn.Server(config)
    server.run()
    # uvicorn sets `started` once bound; False means it could not bind or start.
    return 0 if server.started else 1


def _run_store(settings: BotSettings):  # -> RunStore | None
    """The run records behind the dashboard; webhooks are still served without them."""
    from workers.run_store import RunStoreUnavailable, open_run_store

    try:
        return open_run_store(settings.run_database_url)
    except RunStoreUnavailable as exc:
        log.error("run records unavailable, serving without the dashboard: %s", exc)
        return None
