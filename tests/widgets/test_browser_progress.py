"""Issue 27: progress and the stop button while compacting, in the chat widget in a real
JupyterLab (headless Chromium), on tests/browser/compaction_progress.ipynb (offline model
with a small, slow summarizer: a compaction takes several 1.5 s calls). /compact shows
"Compacting… k of n · t s" in the widget's status, the step and the seconds moving on,
and the ring says the same; then JupyterLab's stop button during a second compaction
saves nothing, and the widget says so. Screenshot: test-artifacts/browser/chat-progress.png."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from browser.lab import cell_tags, notebook_in_chromium
from test_browser_chat import Chat, used_tokens

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "compaction_progress.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
PROGRESS = re.compile(r"^Compacting… (\d+) of (\d+) · (\d+) s$")
FINISHED = re.compile(r"^Context compacted: covered (\d+) older messages?, ([\d,]+) → ([\d,]+) tokens$")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_progress_and_stop_in_the_chat_widget_in_jupyterlab():
    from playwright.sync_api import expect

    (ARTIFACTS / "chat-progress.png").unlink(missing_ok=True)
    started = time.monotonic()
    with notebook_in_chromium(NOTEBOOK, cell_tags(NOTEBOOK), ARTIFACTS / "chat-progress-failure.png",
                              height=1100) as nb:
        nb.run_cell("setup")
        nb.run_cell("widget")
        chat = Chat(nb.cell("widget"))
        expect(chat.root).to_have_attribute("data-state", "ready", timeout=30_000)
        nb.run_cell("slow-summarizer")
        before = nb.run_cell("state").split()[2:]

        chat.submit("/compact")
        expect(chat.status).to_have_text(re.compile(r"^Compacting… 2 of \d+ · \d+ s$"), timeout=30_000)
        first = PROGRESS.match(chat.status.inner_text().strip())
        ring_message = chat.cell.locator(".ocw-chat-ring .ocw-message")
        expect(ring_message).to_have_text(re.compile(r"^Compacting… [23] of \d+ · \d+\.\d s$"))
        chat.screenshot("chat-progress.png")
        # The seconds move on between steps (counted in the browser), then the next step comes.
        expect(chat.status).not_to_have_text(chat.status.inner_text(), timeout=5_000)
        expect(chat.status).to_have_text(re.compile(r"^Compacting… 3 of \d+ · [3-9] s$"), timeout=30_000)
        expect(chat.note("finished")).to_have_text(FINISHED, timeout=120_000)
        chat.idle()
        assert int(first.group(2)) >= 3
        after_first = nb.run_cell("state").split()[2:]
        assert int(after_first[0]) == int(before[0]) + 1 and int(after_first[1]) == int(before[1]) + 1

        # Undo it, compact again and press JupyterLab's stop button at the second step.
        chat.cell.locator(".ocw-thread .ocw-summary-capsule button.ocw-summary-undo").click()
        expect(chat.cell.locator(".ocw-thread .ocw-summary-capsule")).to_have_count(0, timeout=30_000)
        chat.idle()
        kept = nb.run_cell("state").split()[2:]
        ring_before = used_tokens(chat)
        chat.submit("/compact")
        expect(chat.status).to_have_text(re.compile(r"^Compacting… 2 of \d+"), timeout=30_000)
        nb.menu("Kernel", "kernelmenu:interrupt")  # the toolbar stop button runs this same command
        expect(chat.note("failed").last).to_have_text("Context compaction failed: interrupted; nothing was saved",
                                                      timeout=30_000)
        expect(chat.alert).to_contain_text("Compaction stopped: nothing was saved; the session is as it was")
        chat.idle()
        assert nb.run_cell("state").split()[2:] == kept  # nothing saved: generation, summaries, count, total
        assert used_tokens(chat) == ring_before
    print(f"\nprogress browser test: {time.monotonic() - started:.1f} s")
