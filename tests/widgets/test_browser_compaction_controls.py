"""Issue 27: Undo on the chat widget's summary capsule, in a real JupyterLab (headless
Chromium), on tests/browser/chat_widget.ipynb (offline model, six turns, 6,000-token
window). /compact makes a summary; a click on the capsule's Undo runs /compact --undo:
the widget says so in one note, the capsule goes (no summary is active now), the graph
marks the summary undone and the ring goes back up to the figure the note ends with.
Then `/new --from-summary 1` typed in the composer: the widget follows the new session,
shows the seed and the last turn, and its graph names the session it continues.
Screenshots go to test-artifacts/browser/chat-undo.png and chat-from-summary.png."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from browser.lab import cell_tags, notebook_in_chromium
from test_browser_chat import Chat, used_tokens

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "chat_widget.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
FINISHED = re.compile(r"^Context compacted: covered (\d+) older messages?, ([\d,]+) → ([\d,]+) tokens$")
UNDONE = re.compile(r"^Undid compaction (n_\w+): no summary is active now, the whole branch is read again, "
                    r"([\d,]+) → ([\d,]+) tokens \(nothing deleted; compactions so far: 1, 1 undone\)\.$")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_undo_and_from_summary_in_the_chat_widget_in_jupyterlab():
    from playwright.sync_api import expect

    for name in ("chat-undo.png", "chat-from-summary.png"):
        (ARTIFACTS / name).unlink(missing_ok=True)
    started = time.monotonic()
    with notebook_in_chromium(NOTEBOOK, cell_tags(NOTEBOOK), ARTIFACTS / "chat-undo-failure.png", height=1100) as nb:
        nb.run_cell("setup")
        nb.run_cell("widget")
        chat = Chat(nb.cell("widget"))
        expect(chat.root).to_have_attribute("data-state", "ready", timeout=30_000)
        chat.submit("/compact")
        expect(chat.note("finished")).to_have_text(FINISHED, timeout=60_000)
        chat.idle()
        _, _, y = FINISHED.match(chat.note("finished").inner_text().strip()).groups()
        expect(chat.ring_used).to_have_text(re.compile(rf"^{re.escape(y)} / 6,000 tokens$"), timeout=30_000)
        capsule = chat.cell.locator(".ocw-thread .ocw-summary-capsule")
        summary_id = capsule.get_attribute("data-id")

        capsule.locator("button.ocw-summary-undo").click()
        note = chat.cell.locator(".ocw-thread .ocw-note-output").last
        expect(note).to_have_text(UNDONE, timeout=60_000)
        chat.idle()
        undone, before, after = UNDONE.match(note.inner_text().strip()).groups()
        assert undone == summary_id and before == y and int(after.replace(",", "")) > int(y.replace(",", ""))
        expect(capsule).to_have_count(0)  # no summary is active: no capsule
        expect(chat.ring_used).to_have_text(re.compile(rf"^{re.escape(after)} / 6,000 tokens$"), timeout=30_000)
        graph_capsule = chat.cell.locator(f".ocw-graph-capsule[data-id='{summary_id}']")
        expect(graph_capsule).to_have_text(re.compile(r"· undone$"))
        expect(chat.cell.locator(".ocw-thread .ocw-msg.ocw-covered")).to_have_count(0)
        assert used_tokens(chat) == int(after.replace(",", ""))
        chat.screenshot("chat-undo.png")
        state = nb.run_cell("state")
        assert state.split()[-1] == after.replace(",", ""), state  # the kernel's figure is the ring's

        # Continue in a fresh session from a summary, from the composer.
        chat.submit("/compact")
        expect(chat.note("finished")).to_have_count(2, timeout=60_000)
        chat.idle()
        chat.submit("/new --from-summary 1")
        note = chat.cell.locator(".ocw-thread .ocw-note-output").last
        expect(note).to_have_text(re.compile(r"^New session 'browser-chat' continues 'browser-chat @ [^']+': its "
                                             r"active summary and memory, the last 1 turn; "), timeout=60_000)
        chat.idle()
        expect(chat.cell.locator(".ocw-graph-origin")).to_have_text(
            re.compile(r"^Continues browser-chat @ .+ \(its summary and last turns\)$"))
        expect(chat.thread_msgs).to_have_count(3, timeout=30_000)  # the seed note, the last question and reply
        expect(chat.thread_msgs.first).to_contain_text("This conversation continues session 'browser-chat'")
        chat.screenshot("chat-from-summary.png")
        state = nb.run_cell("state")
        assert state.split()[3] == "1", state  # the new session: one branch
    print(f"\nundo browser test: {time.monotonic() - started:.1f} s")
