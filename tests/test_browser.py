"""The context ring and panel in a real JupyterLab, in headless Chromium (issue 6, item 5).

The test starts its own JupyterLab on 127.0.0.1 (free port, temp root holding a copy of
tests/browser/context_ring.ipynb, temp OCW_DB, no OCW_* overrides: offline model) and
drives the notebook cell by cell: it chats until the ring is green, yellow, then red,
checking the arc's color class and the percent against the kernel's own occupancy; opens
the panel; presses Compact now and sees the ring busy (button disabled), then a lower
ratio, the panel's total equal to the kernel's `occupancy()["total"]`, and the success
system message. Screenshots of each state go to test-artifacts/browser/.

It never skips: without Chromium or JupyterLab it fails and says how to install them.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from browser.lab import NotebookPage, chromium_path, launch_chromium, require_python_packages, running_lab

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "tests" / "browser" / "context_ring.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
SCREENSHOTS = ("green.png", "yellow.png", "red.png", "panel-open.png", "busy.png", "after-compaction.png")

COLORS = ("ocw-ring-green", "ocw-ring-yellow", "ocw-ring-red")
FINISHED = re.compile(r"^Context compacted: covered (\d+) older messages, ([\d,]+) → ([\d,]+) tokens$")
STEP = re.compile(r"^OCW-STEP (\S+) total=(\d+) window=(\d+) percent=(\d+\.\d)%$")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


@dataclass
class Occupancy:
    """What the kernel printed: `session.occupancy()` at that step."""

    total: int
    window: int
    percent: str  # as the widget formats it, e.g. "61.2%"

    @classmethod
    def parse(cls, line: str) -> "Occupancy":
        m = STEP.match(line)
        assert m, f"unexpected step line from the notebook: {line!r}"
        return cls(int(m[2]), int(m[3]), f"{m[4]}%")

    @property
    def ratio_pct(self) -> float:
        return float(self.percent.rstrip("%"))

    @property
    def color(self) -> str:  # DESIGN.md §6: green < 50 %, yellow 50–80 %, red ≥ 80 %
        r = self.total / self.window
        return COLORS[0] if r < 0.5 else COLORS[1] if r < 0.8 else COLORS[2]

    @property
    def panel_total(self) -> str:
        return f"{self.total:,} / {self.window:,} tokens"


def cell_tags(notebook: Path) -> dict[str, int]:
    cells = json.loads(notebook.read_text())["cells"]
    return {tag: i for i, c in enumerate(cells) for tag in c.get("metadata", {}).get("tags", [])}


class Widget:
    """The ContextWidget rendered in the `%context` cell's output."""

    def __init__(self, cell):
        self.cell = cell
        self.ring = cell.locator(".ocw-ring")
        self.arc = cell.locator(".ocw-ring-arc")
        self.percent = cell.locator(".ocw-ring-percent")
        self.used = cell.locator(".ocw-ring-used")
        self.panel = cell.locator(".ocw-panel")
        self.total = cell.locator(".ocw-total")
        self.count = cell.locator(".ocw-count")
        self.compact = cell.locator("button.ocw-compact")
        self.message = cell.locator(".ocw-message")

    def row(self, category: str):
        return self.cell.locator(f'.ocw-row[data-category="{category}"]')

    def expect_occupancy(self, occ: Occupancy, timeout: int = 30_000) -> None:
        from playwright.sync_api import expect

        expect(self.percent).to_have_text(occ.percent, timeout=timeout)
        expect(self.used).to_have_text(f"{occ.total:,} / {occ.window:,}", timeout=timeout)
        expect(self.arc).to_contain_class(occ.color, timeout=timeout)
        classes = set(self.arc.get_attribute("class").split())
        assert classes & set(COLORS) == {occ.color}, f"the arc must carry exactly one color class: {classes}"

    def screenshot(self, name: str) -> None:
        self.cell.scroll_into_view_if_needed()
        self.cell.page.mouse.move(1, 999)  # no hover effects in the picture (the status bar is there)
        self.cell.screenshot(path=str(ARTIFACTS / name), animations="disabled")


def test_context_ring_lifecycle_in_jupyterlab():
    # Checked in the test body, so a missing tool is a FAILED test with a clear message.
    require_python_packages()
    chromium = chromium_path()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name in (*SCREENSHOTS, "failure.png"):
        (ARTIFACTS / name).unlink(missing_ok=True)
    started = time.monotonic()
    with running_lab(NOTEBOOK) as lab, sync_playwright() as p:
        browser = launch_chromium(p, chromium)
        nb = None
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(30_000)
            nb = NotebookPage(page, cell_tags(NOTEBOOK))
            page.on("pageerror", lambda e: nb.errors.append(str(e)))
            page.goto(lab.notebook_url, wait_until="domcontentloaded", timeout=60_000)
            nb.wait_for_kernel(timeout_ms=90_000)  # ~15 s here idle, 30 s on a loaded 2-core box
            ready = time.monotonic()
            scenario(nb)
        except (Exception, pytest.fail.Exception):
            if nb is not None:
                try:
                    nb.page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
                except Exception:
                    pass
                print(f"\n--- page errors ---\n{nb.errors}")
            print(f"--- JupyterLab log (tail) ---\n{lab.log_tail()}")
            raise
        finally:
            browser.close()
    print(f"\nbrowser test: {time.monotonic() - started:.1f} s ({ready - started:.1f} s to a ready kernel); "
          f"screenshots in {ARTIFACTS}")


def scenario(nb: NotebookPage) -> None:
    from playwright.sync_api import expect

    nb.run_cell("setup")

    # Green: five turns, then the widget.
    green = Occupancy.parse(nb.run_cell("green"))
    nb.run_cell("widget")
    w = Widget(nb.cell("widget"))
    expect(w.ring).to_be_visible(timeout=30_000)
    assert green.color == "ocw-ring-green", green
    w.expect_occupancy(green)
    expect(w.ring).to_have_attribute("aria-busy", "false")
    expect(w.panel).to_be_hidden()
    w.screenshot("green.png")

    # Yellow, then red: the same widget follows the session as the turns land.
    yellow = Occupancy.parse(nb.run_cell("yellow"))
    assert yellow.color == "ocw-ring-yellow", yellow
    w.expect_occupancy(yellow)
    w.screenshot("yellow.png")

    red = Occupancy.parse(nb.run_cell("red"))
    assert red.color == "ocw-ring-red", red
    w.expect_occupancy(red)
    w.screenshot("red.png")

    # Test setup: the summarizer sleeps 5 s per call, so the busy state can be seen.
    nb.run_cell("slow-summarizer")

    # Click the ring: the panel opens with its rows, the kernel's total and Compact now.
    w.ring.click()
    expect(w.panel).to_be_visible()
    expect(w.ring).to_have_attribute("aria-expanded", "true")
    for category in ("system", "tools", "summary", "messages", "free"):
        expect(w.row(category)).to_be_visible()
    expect(w.total).to_have_text(red.panel_total)
    expect(w.count).to_have_text("0")
    expect(w.compact).to_have_text("Compact now")
    expect(w.compact).to_be_enabled()
    w.screenshot("panel-open.png")

    # Compact now: the ring goes busy and the button is disabled while it runs.
    w.compact.click()
    expect(w.ring).to_contain_class("ocw-busy", timeout=15_000)
    expect(w.ring).to_have_attribute("aria-busy", "true")
    expect(w.compact).to_be_disabled()
    expect(w.message).to_have_text("Compacting context…")
    w.screenshot("busy.png")
    assert "ocw-busy" in w.ring.get_attribute("class").split(), (
        "the compaction finished before busy.png was taken; the screenshot may not show the busy state "
        "(lengthen the sleep in the notebook's slow-summarizer cell)")

    # Done: not busy, button back, success message, a lower ratio.
    expect(w.ring).not_to_contain_class("ocw-busy", timeout=60_000)
    expect(w.ring).to_have_attribute("aria-busy", "false")
    expect(w.compact).to_be_enabled()
    expect(w.compact).to_have_text("Compact now")
    expect(w.message).to_have_text(FINISHED)
    expect(w.count).to_have_text("1")

    # The kernel's occupancy after the compaction, printed by another executed cell.
    after = Occupancy.parse(nb.run_cell("after"))
    assert after.total < red.total and after.ratio_pct < red.ratio_pct, (red, after)
    w.expect_occupancy(after)
    expect(w.total).to_have_text(after.panel_total)
    covered, before_tokens, after_tokens = FINISHED.match(w.message.inner_text().strip()).groups()
    assert int(covered) > 0
    assert int(after_tokens.replace(",", "")) == after.total, "the message's X → Y must end at the ring's total"
    assert int(before_tokens.replace(",", "")) > after.total
    expect(w.panel).to_be_visible()
    w.screenshot("after-compaction.png")
