"""Pins in the chat widget, in a real JupyterLab in headless Chromium (issue 22 item 6,
issue 29 item 2).

The kernel talks to this test's loopback OpenAI-compatible server (tests/refserver.py),
which records every request. A user clicks the pin button on the first message, sees the
pin counted (its own row in the ring's panel), compacts with /compact, sends a message and
the server receives the pinned text verbatim, once, in a request whose history no longer
holds that message; /memory lists the pin, its Unpin button takes it out, and the next
request no longer holds it. Screenshot: test-artifacts/browser/chat-pins.png.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser.lab import cell_tags, notebook_in_chromium
from refserver import RefServer
from waiting import until

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "pins_widget.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
FIRST = "Turn 1: the orders table stores amount_cents in cents and region_id as an integer."

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def sent_text(request) -> str:
    return "\n".join(m["content"] if isinstance(m["content"], str) else
                     "\n".join(p.get("text", "") for p in m["content"]) for m in request.body["messages"])


def chat_requests(srv) -> list:
    return [r for r in srv.requests if not r.is_summary]


def test_pin_a_message_in_the_widget_compact_and_it_is_still_sent_verbatim():
    from playwright.sync_api import expect

    srv = RefServer().start()
    srv.summary_text = "The user is planning a garden."
    env = {"OCW_PROVIDER": "openai", "OCW_BASE_URL": srv.openai_url, "OPENAI_API_KEY": "sk-dummy-browser-0123456789",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    try:
        with notebook_in_chromium(NOTEBOOK, cell_tags(NOTEBOOK), ARTIFACTS / "chat-pins-failure.png", env=env,
                                  height=1100) as nb:
            nb.run_cell("setup")
            assert len(chat_requests(srv)) == 5
            nb.run_cell("widget")
            cell = nb.cell("widget")
            root = cell.locator(".ocw-chat")
            expect(root).to_have_attribute("data-state", "ready", timeout=30_000)
            status = cell.locator(".ocw-chat-status")
            notes = cell.locator(".ocw-thread .ocw-note-output")

            # Pin the first message from the widget.
            first = cell.locator('.ocw-thread .ocw-msg[data-depth="1"]')
            expect(first).to_contain_text(FIRST)
            first.locator("button.ocw-pin").click()
            expect(notes.last).to_have_text(re.compile(r"^Pinned as 1 \(\d+ tokens\)"), timeout=30_000)
            expect(status).to_have_text("", timeout=30_000)
            pins_tokens, compactions, records = (int(x) for x in nb.run_cell("state").split()[2:])
            assert pins_tokens > 0 and compactions == 0 and records == 1
            # Counted: its own row in the ring's panel.
            cell.locator(".ocw-chat-ring .ocw-ring").click()
            row = cell.locator('.ocw-row[data-category="pins"]')
            expect(row).to_be_visible(timeout=30_000)
            expect(row.locator(".ocw-row-name")).to_have_text("Pinned")
            expect(row.locator(".ocw-row-tokens")).to_have_text(re.compile(r"^[1-9][\d,]*$"))
            cell.locator(".ocw-chat-ring .ocw-ring").click()

            # Compact from the widget; then a message: the pin reaches the model verbatim, once.
            composer = cell.locator(".ocw-input")
            composer.click()
            composer.fill("/compact 200")
            composer.press("Escape")
            composer.press("Enter")
            expect(cell.locator(".ocw-thread .ocw-note-finished")).to_have_count(1, timeout=60_000)
            assert len(srv.summary_requests()) >= 1  # a real summarizer call on the loopback server
            expect(status).to_have_text("", timeout=30_000)
            n = len(chat_requests(srv))
            composer.click()
            composer.fill("what type is region_id?")
            composer.press("Enter")
            until(lambda: len(chat_requests(srv)) > n, "the message to reach the server", timeout=60.0, poll=0.1)
            expect(status).to_have_text("", timeout=60_000)
            sent = sent_text(chat_requests(srv)[-1])
            assert sent.count(FIRST) == 1, sent
            assert "[Pinned by the user: kept verbatim whatever is compacted]\n[pin 1]\n" + FIRST in sent
            assert "The user is planning a garden." in sent  # the summary replaced the folded turns
            assert int(nb.run_cell("state").split()[3]) == 1  # one compaction

            # /memory lists the pin; its Unpin button takes it out of the next request.
            composer.click()
            composer.fill("/memory")
            composer.press("Escape")
            composer.press("Enter")
            listing = cell.locator(".ocw-thread .ocw-memory").last
            expect(listing.locator('.ocw-mem-pin[data-pin="1"]')).to_contain_text(FIRST, timeout=30_000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            listing.scroll_into_view_if_needed()
            root.screenshot(path=str(ARTIFACTS / "chat-pins.png"), animations="disabled")
            listing.locator('.ocw-mem-pin[data-pin="1"] button').click()
            expect(cell.locator(".ocw-thread .ocw-note-output", has_text="Unpinned 1:")).to_have_count(1,
                                                                                                     timeout=30_000)
            expect(status).to_have_text("", timeout=30_000)
            n = len(chat_requests(srv))
            composer.click()
            composer.fill("and now?")
            composer.press("Enter")
            until(lambda: len(chat_requests(srv)) > n, "the next message to reach the server", timeout=60.0, poll=0.1)
            expect(status).to_have_text("", timeout=60_000)
            assert FIRST not in sent_text(chat_requests(srv)[-1])
            assert nb.errors == []
    finally:
        srv.stop()
