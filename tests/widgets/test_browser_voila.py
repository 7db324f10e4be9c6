"""The chat widget inside Voilà (issue 24), in headless Chromium.

Voilà serves one notebook to many visitors, each with a kernel of its own. Two visitors
open the page at once (two browser contexts, so two kernels) and each types into the
composer: Shift+Enter is a new line in the draft and sends nothing — the Enter that
follows sends the two lines as ONE message, so each thread holds exactly one question
and its reply (had Shift+Enter sent "… one", there would be two of each). Each visitor's
page shows only its own conversation, and the DuckDB file holds two sessions, one per
kernel. The reply is the offline model's; nothing downloads.

It never skips: without Chromium or Voilà it fails and says how to install them.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import duckdb
import pytest

from browser.lab import chromium_path, launch_chromium, require_python_packages, running_voila

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "voila_chat.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
WORDS = {"a": "alpha", "b": "bravo"}  # each visitor's own words, never in the other's page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _drive(page, word: str) -> None:
    from playwright.sync_api import expect

    chat = page.locator(".ocw-chat")
    expect(chat).to_be_visible(timeout=120_000)  # Voilà ran the notebook in this visitor's kernel
    composer = page.locator(".ocw-input")
    composer.click()
    composer.press_sequentially(f"{word} one", delay=20)
    composer.press("Shift+Enter")
    composer.press_sequentially(f"{word} two", delay=20)
    expect(composer).to_have_value(f"{word} one\n{word} two")
    expect(composer).to_be_focused()
    expect(page.locator(".ocw-thread .ocw-msg")).to_have_count(0)  # nothing was sent
    composer.press("Enter")
    msgs = page.locator(".ocw-thread .ocw-msg")
    expect(msgs).to_have_count(2, timeout=60_000)  # one question (both lines) and its reply
    expect(msgs.first).to_contain_text(f"{word} one")
    expect(msgs.first).to_contain_text(f"{word} two")
    expect(composer).to_have_value("")


def _open_when_released(db: Path, timeout: float = 60.0):
    """The file read-only once the stopped server's kernels have let go of it: they are
    shut down by the server, not killed with it, and exit on their own time under load."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return duckdb.connect(str(db), read_only=True)
        except duckdb.IOException as e:
            if "lock" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # polling DuckDB's lock; the condition is the kernels' exit


def test_two_voila_visitors_each_type_multi_line_and_see_only_their_own_conversation():
    require_python_packages()
    if not (Path(sys.executable).parent / "voila").exists():
        pytest.fail("Voilà is not installed: pip install -e '.[dev]' (the voila package)", pytrace=False)
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    with running_voila(NOTEBOOK) as app, sync_playwright() as p:
        browser = launch_chromium(p, chromium)
        pages = {k: browser.new_context(viewport={"width": 1100, "height": 900}).new_page() for k in WORDS}
        try:
            for page in pages.values():
                page.set_default_timeout(30_000)
            # Both pages requested at once: Voilà starts two kernels side by side. Playwright's
            # sync API is one thread, so the two visits start together and are driven in turn.
            for page in pages.values():
                page.goto(app.notebook_url, wait_until="commit", timeout=120_000)
            for k, page in pages.items():
                _drive(page, WORDS[k])
            for k, page in pages.items():
                other = next(w for j, w in WORDS.items() if j != k)
                text = page.locator(".ocw-chat").inner_text()
                assert WORDS[k] in text and other not in text, (k, text)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            pages["a"].locator(".ocw-chat").screenshot(path=str(ARTIFACTS / "chat-voila.png"), animations="disabled")
        except (Exception, pytest.fail.Exception):
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            for k, page in pages.items():
                page.screenshot(path=str(ARTIFACTS / f"voila-{k}-failure.png"), full_page=True)
            print(f"--- voila log (tail) ---\n{app.log_tail()}")
            raise
        finally:
            browser.close()
        app.stop()  # its kernels hold the DuckDB file; stopping twice is harmless
        con = _open_when_released(app.db)
        try:
            rows = con.execute("SELECT s.name, string_agg(n.role, ',' ORDER BY n.seq) FROM sessions s "
                               "JOIN nodes n ON n.session_id = s.id AND n.role IN ('user', 'assistant') "
                               "GROUP BY s.name").fetchall()
            texts = con.execute("SELECT s.name, n.content::VARCHAR FROM sessions s JOIN nodes n ON n.session_id = s.id "
                                "WHERE n.role = 'user'").fetchall()
        finally:
            con.close()
    assert len(rows) == 2 and all(roles == "user,assistant" for _, roles in rows), rows  # two sessions, one turn each
    by_session = {name: content for name, content in texts}
    assert sorted(w for c in by_session.values() for w in WORDS.values() if w in c) == sorted(WORDS.values()), texts
