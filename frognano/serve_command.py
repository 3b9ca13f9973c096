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
              log_level: str = "info", access_log: bool = False) -> int:
    """Serve until interrupted; return the process exit status.

    The receiver logs every delivery itself (with its delivery id), so uvicorn's access log
    is off by default.
    """
    configure_json_logging(log_level.upper())
    if not settings.webhook_secret:
        log.error("GITHUB_WEBHOOK_SECRET is not set; refusing to serve unsigned webhooks")
        return EXIT_NOT_CONFIGURED
    app = create_app(settings, bot_login=settings.bot_login)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level=log_level,
                            access_log=access_log, workers=1)
    server = uvicorn.Server(config)
    server.run()
    # uvicorn sets `started` once bound; False means it could not bind or start.
    return 0 if server.started else 1
