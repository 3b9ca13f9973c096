"""Headless Chromium (Debian's `chromium`, driven by playwright-python) for the tests that
look at the receiver's pages, and a place to keep their screenshots."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")


@contextmanager
def chromium() -> Iterator[Any]:
    """A browser, or the test skipped where playwright or chromium is missing."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            yield browser
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """The ASGI app served by a real uvicorn on a free loopback port, for a browser."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


def keep_screenshot(page_or_element: Any, path: Path, min_bytes: int = 5_000,
                    **options: Any) -> Path:
    """Screenshot to `path`, checked not blank (a blank page is a few hundred bytes), and
    copied to $FROGNANO_SCREENSHOT_DIR when that is set (to look at them)."""
    page_or_element.screenshot(path=str(path), **options)
    assert path.stat().st_size > min_bytes, f"{path.name} looks blank"
    if os.environ.get("FROGNANO_SCREENSHOT_DIR"):
        target = Path(os.environ["FROGNANO_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
    return path
