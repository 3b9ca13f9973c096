"""A turn cut off before its end-of-turn token keeps its text on the dashboard's run page
(issue 22 §1): a real `frognano solve` with the real Gemma 270M under a chat template that
does not fit it records into its state directory's run database, and the receiver's
dashboard serves that run to headless Chromium (a screenshot kept)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from runstore.store import RunStore, default_database_url
from tests.support.chromium import keep_screenshot, serve_app
from tests.support.redis_server import RedisServer
from tests.support.sandbox_support import reachable_dir
from tests.unit.bot.test_dashboard import TOKEN, browser, make_app  # noqa: F401 (a fixture)
from tests.unit.frognano.test_progress_live import env_for, solve_argv


@pytest.fixture
def cut_off_run(calc_repo: Path, gemma_gguf: Path, tmp_path: Path) -> Path:
    """The state directory of a finished solve whose one turn ran out of time."""
    with reachable_dir() as work:
        subprocess.run(solve_argv(calc_repo, gemma_gguf, tmp_path / "t.jsonl"),
                       env=env_for(tmp_path, work), capture_output=True, text=True,
                       timeout=240)
    return tmp_path / "state"


def test_the_cut_off_turn_is_on_the_run_page(cut_off_run: Path, browser: Any,  # noqa: F811
                                             redis_server: RedisServer, tmp_path: Path
                                             ) -> None:
    store = RunStore(default_database_url(cut_off_run))
    app = make_app(store, redis_server, tmp_path, FROGNANO_DASHBOARD_TOKEN=TOKEN)
    try:
        with serve_app(app) as url:
            _check_the_cut_off_run_page(browser, url, tmp_path)
    finally:
        store.close()


def _check_the_cut_off_run_page(launched: Any, url: str, tmp_path: Path) -> None:
    page = launched.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/runs?token={TOKEN}")
    page.locator("a.run-link").first.click()
    page.wait_for_url("**/runs/*")
    summary = page.locator("#summary").inner_text()
    tokens = int(page.locator("#run-tokens").inner_text())
    assert tokens > 50 and "turn_timeout" in summary
    assert f"the model generated {tokens:,} tokens without ending its turn" in summary
    warning = page.locator(".turn-cut-off")
    assert warning.is_visible()
    assert warning.inner_text().startswith(
        f"The model did not end this turn: the model generated {tokens:,} tokens without "
        "ending its turn (the turn's time ran out after ")
    assert warning.inner_text().endswith("its chat template may not match the model.")
    # The partial text itself, visible without a click.
    text = page.locator("section.event-turn pre").first
    assert text.is_visible() and len(text.inner_text()) > 100
    keep_screenshot(page.locator("section.event-turn").first, tmp_path / "cut-off-turn.png")
    # A failed model run leads with its steps (issue 22 §4): the cut-off one, said so.
    steps = page.locator("#steps")
    assert steps.bounding_box()["y"] < 900, "in the first screenful"
    assert "turn_timeout" in steps.inner_text()
    assert steps.locator("tbody tr").count() >= 1
    assert "did not end its turn" in steps.locator("tbody tr").first.inner_text()
    keep_screenshot(page, tmp_path / "failed-model-run.png", full_page=True)

