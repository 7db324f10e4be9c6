"""The chat widget in a real JupyterLab, in headless Chromium (issue 15).

The test starts its own JupyterLab (tests/browser/lab.py: temp root holding a copy of
tests/browser/chat_widget.ipynb, temp OCW_DB, offline model) and drives the widget as a
user does: it types `/co`, sees the menu open upward with /compact first, picks it with
Enter and watches the four system-message states appear in the conversation — started
and finished (the ring beside the composer drops), no-op (compacting again), failed
(a summarizer that raises) — types a message and sees the reply stream in before it is
stored, keeps Shift+Enter as a new line in its draft (the cell does not re-run), rewinds by clicking a message in the graph (after its confirmation) and sees the
next message fork a branch that the graph then shows. Finally the kernel restarts under
the widget: it says it is disconnected and turns its controls off. Screenshots of each
state go to test-artifacts/browser/chat-*.png.

It never skips: without Chromium or JupyterLab it fails and says how to install them.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from browser.lab import NotebookPage, cell_tags, notebook_in_chromium

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "chat_widget.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
SHOTS = ("chat-menu.png", "chat-compaction.png", "chat-streaming.png", "chat-rewind-confirm.png",
         "chat-forked.png", "chat-overview.png", "chat-disconnected.png")
FINISHED = re.compile(r"^Context compacted: covered (\d+) older messages, ([\d,]+) → ([\d,]+) tokens$")
NO_OP = "Context is already compacted; no older messages to fold."
FAILED = "Context compaction failed: the summarizer is down"
STARTED = "Compacting context…"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_chat_widget_in_jupyterlab():
    for name in SHOTS:
        (ARTIFACTS / name).unlink(missing_ok=True)
    started = time.monotonic()
    with notebook_in_chromium(NOTEBOOK, cell_tags(NOTEBOOK), ARTIFACTS / "chat-failure.png",
                              height=1100, console_tail=60) as nb:
        scenario(nb)
    print(f"\nchat browser test: {time.monotonic() - started:.1f} s; screenshots in {ARTIFACTS}")


class Chat:
    """The ChatWidget rendered in the `%chat` cell's output."""

    def __init__(self, cell):
        self.cell = cell
        self.page = cell.page
        self.root = cell.locator(".ocw-chat")
        self.input = cell.locator(".ocw-input")
        self.menu = cell.locator(".ocw-menu")
        self.options = cell.locator(".ocw-menu-item")
        self.notes = cell.locator(".ocw-thread .ocw-note")
        self.thread_msgs = cell.locator(".ocw-thread .ocw-msg")
        self.streaming = cell.locator(".ocw-live .ocw-streaming")
        self.pending = cell.locator(".ocw-live .ocw-pending")
        self.alert = cell.locator(".ocw-chat-alert")
        self.status = cell.locator(".ocw-chat-status")
        self.ring = cell.locator(".ocw-chat-ring .ocw-ring")
        self.ring_percent = cell.locator(".ocw-chat-ring .ocw-ring-percent")
        self.ring_used = cell.locator(".ocw-chat-ring .ocw-ring-used")
        self.graph_rows = cell.locator(".ocw-graph-row")
        self.head_row = cell.locator(".ocw-graph-row.ocw-head")
        self.branches = cell.locator(".ocw-graph-branch")
        self.confirm = cell.locator(".ocw-confirm")

    def note(self, kind: str):
        return self.cell.locator(f".ocw-thread .ocw-note-{kind}")

    def submit(self, text: str) -> None:
        self.input.click()
        self.input.fill("")
        self.input.press_sequentially(text, delay=20)
        self.input.press("Enter")

    def idle(self, timeout: int = 60_000) -> None:
        from playwright.sync_api import expect

        expect(self.status).to_have_text("", timeout=timeout)

    def screenshot(self, name: str) -> None:
        self.root.scroll_into_view_if_needed()
        self.page.mouse.move(1, 1099)
        self.root.screenshot(path=str(ARTIFACTS / name), animations="disabled")


def used_tokens(chat: Chat) -> int:
    return int(chat.ring_used.inner_text().split("/")[0].strip().replace(",", ""))


def box(locator) -> dict:
    b = locator.bounding_box()
    assert b is not None, locator
    return b


def scenario(nb: NotebookPage) -> None:
    from playwright.sync_api import expect

    nb.run_cell("setup")
    nb.run_cell("widget")
    chat = Chat(nb.cell("widget"))
    expect(chat.root).to_be_visible(timeout=30_000)
    expect(chat.root).to_have_attribute("data-state", "ready")
    expect(chat.thread_msgs).to_have_count(12)  # six turns
    # The ring (the ContextWidget, rendered by the chat widget) sits beside the composer.
    expect(chat.ring).to_be_visible(timeout=30_000)
    expect(chat.ring_used).to_have_text(re.compile(r"^[\d,]+ / 6,000 tokens$"))
    ring, composer = box(chat.ring), box(chat.cell.locator(".ocw-composer"))
    assert ring["x"] >= composer["x"] + composer["width"] - 1, (ring, composer)
    assert ring["y"] < composer["y"] + composer["height"] and ring["y"] + ring["height"] > composer["y"], (ring, composer)
    before = used_tokens(chat)
    # The widget keeps its height whatever the conversation holds (it scrolls inside), so
    # the ring at its bottom is on screen whenever the widget is.
    assert box(chat.root)["height"] < 700, box(chat.root)

    # Type /co: the menu opens upward, /compact first; Enter picks it.
    chat.input.click()
    chat.input.press_sequentially("/co", delay=40)
    expect(chat.menu).to_be_visible()
    expect(chat.options).to_have_count(2)
    expect(chat.options.nth(0)).to_have_attribute("data-name", "compact")
    expect(chat.options.nth(0)).to_have_attribute("aria-selected", "true")
    expect(chat.input).to_have_attribute("aria-expanded", "true")
    assert box(chat.menu)["y"] + box(chat.menu)["height"] <= box(chat.input)["y"] + 1, "the menu must open upward"
    chat.screenshot("chat-menu.png")
    chat.input.press("Enter")

    # Started, then finished; the ring drops to the figure the message ends with.
    expect(chat.note("started")).to_have_text(STARTED, timeout=30_000)
    expect(chat.note("finished")).to_have_text(FINISHED, timeout=60_000)
    expect(chat.input).to_have_value("")
    chat.idle()
    covered, x, y = FINISHED.match(chat.note("finished").inner_text().strip()).groups()
    assert int(covered) > 0
    expect(chat.ring_used).to_have_text(re.compile(rf"^{re.escape(y)} / 6,000 tokens$"), timeout=30_000)
    assert used_tokens(chat) < before, (before, used_tokens(chat))
    expect(chat.cell.locator(".ocw-summary-capsule .ocw-summary-covers")).to_have_text(
        re.compile(r"^covers the first \d+ messages$"))
    expect(chat.cell.locator(".ocw-graph-capsule.ocw-active")).to_have_count(1)

    # Again: nothing left to fold — the no-op state.
    chat.submit("/compact")
    expect(chat.note("no_op")).to_have_text(NO_OP, timeout=30_000)
    chat.idle()

    # The composer owns its keys (issue 24): Shift+Enter is a new line in the draft, never
    # the notebook's run-and-advance; Escape does not leave for command mode. Running the
    # "state" cell afterwards is the barrier: a re-run of the widget's cell, had the key
    # reached the notebook, would be queued before it and show a new execution count.
    prompt = chat.cell.locator(".jp-InputArea-prompt").first
    count_before = prompt.inner_text().strip()
    assert re.match(r"^\[\d+\]:?$", count_before), count_before
    chat.input.click()
    chat.input.press_sequentially("line one", delay=20)
    chat.input.press("Shift+Enter")
    chat.input.press_sequentially("line two", delay=20)
    chat.input.press("Escape")
    expect(chat.input).to_have_value("line one\nline two")
    expect(chat.input).to_be_focused()
    nb.run_cell("state")
    assert prompt.inner_text().strip() == count_before, (count_before, prompt.inner_text())
    expect(chat.input).to_have_value("line one\nline two")
    chat.input.fill("")

    # A message streams in: the reply grows on screen before it is stored.
    nb.run_cell("slow-stream")
    messages = chat.thread_msgs.count()
    chat.submit("Which retries does the loader do after a timeout, and how long does it wait?")
    expect(chat.pending).to_have_text(re.compile("Which retries does the loader do"), timeout=30_000)
    expect(chat.streaming).to_be_visible(timeout=30_000)
    first = chat.streaming.inner_text()
    chat.screenshot("chat-streaming.png")
    expect(chat.streaming).not_to_have_text(first, timeout=30_000)  # more arrived
    assert chat.streaming.is_visible() or chat.thread_msgs.count() == messages + 2
    expect(chat.thread_msgs).to_have_count(messages + 2, timeout=60_000)
    expect(chat.pending).to_have_count(0)
    expect(chat.thread_msgs.last).to_contain_text("(offline model)")
    chat.idle()

    # The summarizer fails: started, then failed, and the ring says the same as before.
    used = used_tokens(chat)
    nb.run_cell("break-summarizer")
    chat.submit("/compact")
    expect(chat.note("failed")).to_have_text(FAILED, timeout=60_000)
    expect(chat.note("started")).to_have_count(2)
    chat.idle()
    assert used_tokens(chat) == used
    chat.screenshot("chat-compaction.png")
    # Each state once, in order after each other in the conversation.
    kinds = chat.notes.evaluate_all("ns => ns.map(n => n.classList[1])")
    assert kinds == ["ocw-note-started", "ocw-note-finished", "ocw-note-no_op", "ocw-note-started",
                     "ocw-note-failed"], kinds

    # Rewind: click message 4 in the graph, confirm; the next message forks a branch.
    old_head = chat.head_row.get_attribute("data-id")
    row4 = chat.cell.locator('.ocw-graph-row[data-depth="4"]')
    row4.locator(".ocw-graph-node").click()
    expect(chat.confirm).to_be_visible()
    expect(chat.confirm.locator(".ocw-confirm-text")).to_have_text(
        "Rewind to message 4? The next message starts a new branch; nothing is deleted.")
    chat.screenshot("chat-rewind-confirm.png")
    chat.confirm.locator(".ocw-confirm-yes").click()
    expect(chat.head_row).to_have_attribute("data-depth", "4", timeout=30_000)
    expect(chat.thread_msgs).to_have_count(4)
    chat.idle()
    # HEAD inside the branch: the old leaf hangs after message 4 already.
    expect(chat.branches).to_have_count(1)
    chat.submit("Let us try a different approach: read the parquet files in batches.")
    expect(chat.thread_msgs).to_have_count(6, timeout=60_000)
    chat.idle()
    expect(chat.head_row).to_have_attribute("data-depth", "6")
    branch = chat.branches.first
    expect(branch).to_have_attribute("data-id", old_head)
    expect(branch.locator(".ocw-branch-where")).to_have_text("after message 4")
    expect(branch.locator(".ocw-branch-meta")).to_have_text(re.compile(r"^14 messages · \d\d:\d\d$"))
    expect(branch.locator(".ocw-branch-preview")).to_have_text(re.compile(r"^“Turn 3: the loader reads"))
    state = nb.run_cell("state").split()
    assert state[2] == chat.head_row.get_attribute("data-id") and state[3] == "2", state  # two branches
    chat.screenshot("chat-forked.png")

    # A click on the old branch switches back to it (the same path as %branch <id>).
    branch.click()
    expect(chat.head_row).to_have_attribute("data-id", old_head, timeout=30_000)
    expect(chat.thread_msgs).to_have_count(14)
    chat.idle()

    # /context opens the ring's own panel (the ContextWidget's, Compact now and the count's
    # info note included), upward over the conversation.
    chat.submit("/context")
    panel = chat.cell.locator(".ocw-chat-ring .ocw-panel")
    expect(panel).to_be_visible(timeout=30_000)
    expect(panel.locator(".ocw-count")).to_have_text("1")  # the failed compaction is not counted
    expect(panel.locator(".ocw-info")).to_be_visible()
    expect(panel.locator("button.ocw-compact")).to_be_enabled()
    assert box(panel)["y"] + box(panel)["height"] <= box(chat.ring)["y"] + 1, "the panel must open upward"
    chat.idle()
    chat.screenshot("chat-overview.png")

    # The kernel restarts under the widget: disconnected, controls off.
    nb.restart_kernel()
    expect(chat.root).to_have_attribute("data-state", "disconnected", timeout=30_000)
    expect(chat.input).to_be_disabled()
    expect(chat.cell.locator(".ocw-send")).to_be_disabled()
    expect(chat.status).to_have_text(re.compile(r"^Disconnected"))
    chat.screenshot("chat-disconnected.png")
    assert not nb.errors, nb.errors
