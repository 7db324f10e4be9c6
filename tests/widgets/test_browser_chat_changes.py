"""The chat widget's changes in a real JupyterLab, in headless Chromium (issue 28 item 2).

Two turns with the widget open — one sent from the widget, one a `%%chat` cell run beside
it — both appear in the widget (they arrive as "ocw-changes" messages, not as the whole
list); after the notebook is saved and the page reloaded, the widget (restored from the
kernel's state) shows all of them again. It never skips: without Chromium or JupyterLab
it fails and says how to install them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from browser.lab import cell_tags, notebook_in_chromium

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "chat_changes.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
WIDGET_TURN = "Widget turn: sent from the composer."
CELL_TURN = "Cell turn: asked in a %%chat cell while the widget is open."

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_turns_with_the_widget_open_show_and_survive_a_reload():
    from playwright.sync_api import expect

    with notebook_in_chromium(NOTEBOOK, cell_tags(NOTEBOOK), ARTIFACTS / "chat-changes-failure.png",
                              height=1100) as nb:
        nb.run_cell("setup")
        nb.run_cell("widget")
        cell = nb.cell("widget")
        msgs = cell.locator(".ocw-thread .ocw-msg")
        expect(msgs).to_have_count(4, timeout=30_000)
        composer = cell.locator(".ocw-input")
        composer.click()
        composer.fill(WIDGET_TURN)
        composer.press("Enter")
        expect(msgs).to_have_count(6, timeout=60_000)
        expect(cell.locator(".ocw-live .ocw-pending")).to_have_count(0)
        nb.run_cell("cell-turn", expect_marker=False)
        expect(msgs).to_have_count(8, timeout=60_000)
        users = cell.locator(".ocw-thread .ocw-msg-user .ocw-msg-text")
        expect(users.nth(2)).to_have_text(WIDGET_TURN)
        expect(users.nth(3)).to_have_text(CELL_TURN)
        assert nb.run_cell("state").split()[2] == "8"
        # Save (the widget's output and its model id go into the file), then reload the page.
        nb.menu("File", "docmanager:save")
        expect(nb.page.locator(".jp-mod-dirty")).to_have_count(0, timeout=30_000)
        nb.page.reload(wait_until="domcontentloaded")
        nb.wait_for_kernel(timeout_ms=90_000)
        cell = nb.cell("widget")
        msgs = cell.locator(".ocw-thread .ocw-msg")
        expect(msgs).to_have_count(8, timeout=60_000)
        users = cell.locator(".ocw-thread .ocw-msg-user .ocw-msg-text")
        expect(users.nth(2)).to_have_text(WIDGET_TURN)
        expect(users.nth(3)).to_have_text(CELL_TURN)
        expect(cell.locator(".ocw-msg-assistant .ocw-msg-html")).to_have_count(4)
        assert not nb.errors, nb.errors
