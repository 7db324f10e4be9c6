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

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from browser.lab import NotebookPage, cell_tags, notebook_in_chromium

ROOT = Path(__file__).resolve().parents[2]
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
        expect(self.used).to_have_text(f"{occ.total:,} / {occ.window:,} tokens", timeout=timeout)
        expect(self.arc).to_contain_class(occ.color, timeout=timeout)
        classes = set(self.arc.get_attribute("class").split())
        assert classes & set(COLORS) == {occ.color}, f"the arc must carry exactly one color class: {classes}"

    def screenshot(self, name: str) -> None:
        self.cell.scroll_into_view_if_needed()
        self.cell.page.mouse.move(1, 999)  # no hover effects in the picture (the status bar is there)
        self.cell.screenshot(path=str(ARTIFACTS / name), animations="disabled")


def test_context_ring_lifecycle_in_jupyterlab():
    for name in SCREENSHOTS:
        (ARTIFACTS / name).unlink(missing_ok=True)
    started = time.monotonic()
    with notebook_in_chromium(NOTEBOOK, cell_tags(NOTEBOOK), ARTIFACTS / "failure.png") as nb:
        ready = time.monotonic()
        scenario(nb)
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
    # Running the cell was a click outside the widget: the panel closed (issue 24); the ring opens it again.
    expect(w.panel).to_be_hidden()
    w.ring.click()
    expect(w.panel).to_be_visible()
    expect(w.total).to_have_text(after.panel_total)
    w.screenshot("after-compaction.png")



# -- issue 12: the first hour (language live, a restarted kernel, colors, highlighting) ----------------
FIRST_HOUR = ROOT / "tests" / "browser" / "first_hour.ipynb"
FIRST_HOUR_SHOTS = ("first-hour-en.png", "first-hour-zh-dark.png", "first-hour-disconnected.png")
LABEXTENSION = ROOT / "widgets" / "labextension" / "ocw-labextension"


def rgb(css: str) -> tuple[int, int, int]:
    m = re.match(r"rgba?\((\d+),\s*(\d+),\s*(\d+)", css)
    assert m, css
    return int(m[1]), int(m[2]), int(m[3])


def hue(c: tuple[int, int, int]) -> float:
    import colorsys

    return colorsys.rgb_to_hsv(*(x / 255 for x in c))[0] * 360


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    def lum(c):
        ch = [x / 255 for x in c]
        ch = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in ch]
        return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def category_colors(w: Widget) -> dict[str, tuple[int, int, int]]:
    out = {cat: rgb(w.row(cat).locator(".ocw-swatch").evaluate("e => getComputedStyle(e).backgroundColor"))
           for cat in ("system", "tools", "summary", "messages")}
    out["panel"] = rgb(w.panel.evaluate("e => getComputedStyle(e).backgroundColor"))
    return out


def assert_categories_distinct(colors: dict, theme: str) -> None:
    """System prompt and Messages (and every pair) read as different hues, and each
    swatch stands out from the panel (WCAG 3:1 for graphics)."""
    cats = ("system", "tools", "summary", "messages")
    for i, a in enumerate(cats):
        for b in cats[i + 1:]:
            d = abs(hue(colors[a]) - hue(colors[b]))
            assert min(d, 360 - d) >= 45, f"{theme}: {a} {colors[a]} and {b} {colors[b]} are alike"
        assert contrast(colors[a], colors["panel"]) >= 3, f"{theme}: {a} {colors[a]} on {colors['panel']}"
    d = abs(hue(colors["system"]) - hue(colors["messages"]))
    assert min(d, 360 - d) >= 60, f"{theme}: system prompt and messages look alike: {colors}"


def test_installed_labextension_is_the_checkouts():
    """JupyterLab loads the extension from where `make install` put it (share/jupyter/
    labextensions): a stale copy would test old code."""
    installed = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "ocw-labextension"
    for rel in ("package.json", "static/remoteEntry.js"):
        assert (installed / rel).is_file(), f"{installed / rel} is missing: run `make install`"
        assert (installed / rel).read_bytes() == (LABEXTENSION / rel).read_bytes(), \
            f"{installed / rel} is stale: run `make install`"


def test_first_hour_in_jupyterlab():
    for name in FIRST_HOUR_SHOTS:
        (ARTIFACTS / name).unlink(missing_ok=True)
    with notebook_in_chromium(FIRST_HOUR, cell_tags(FIRST_HOUR), ARTIFACTS / "first-hour-failure.png",
                              height=1100) as nb:
        first_hour_scenario(nb)


def first_hour_scenario(nb: NotebookPage) -> None:
    from playwright.sync_api import expect

    # Item 9: a %%chat cell is edited as Markdown (an apostrophe opens no Python string).
    expect(nb.cell("chat").locator(".cm-content")).to_have_attribute("data-language", "markdown")
    expect(nb.cell("python").locator(".cm-content")).to_have_attribute("data-language", "python")

    nb.run_cell("setup")
    nb.run_cell("widget")
    w = Widget(nb.cell("widget"))
    root = nb.cell("widget").locator(".ocw-context")
    expect(w.ring).to_be_visible(timeout=30_000)
    expect(w.used).to_have_text(re.compile(r"^[\d,]+ / 4,000 tokens$"))  # the ring says its unit
    w.ring.click()
    expect(w.panel).to_be_visible()
    expect(w.compact).to_have_text("Compact now")
    expect(w.compact).to_be_enabled()
    expect(root).to_have_attribute("data-state", "ready")

    # The message line keeps "X → Y tokens" on one line, even in a narrow widget.
    nb.run_cell("compact")
    expect(w.message).to_have_text(FINISHED)
    figure = w.message.locator(".ocw-nowrap", has_text="→")
    expect(figure).to_have_text(re.compile(r"^[\d,]+ → [\d,]+ tokens$"))
    w.message.evaluate("e => { e.style.width = '9em'; e.style.maxWidth = '9em'; }")
    assert figure.evaluate("e => e.getClientRects().length") == 1, "the figure broke across lines"
    assert w.message.evaluate("e => e.getClientRects()[0].height") > figure.evaluate(
        "e => e.getClientRects()[0].height") * 1.5, "the narrow message should wrap elsewhere"
    w.message.evaluate("e => { e.style.width = ''; e.style.maxWidth = ''; }")

    # Item 9: System prompt and Messages in clearly different colors (light theme).
    assert_categories_distinct(category_colors(w), "light")
    w.screenshot("first-hour-en.png")

    # Item 5: the language switches with the widget on screen, message line included.
    nb.run_cell("zh")
    expect(w.compact).to_have_text("立即压缩")
    expect(w.message).to_have_text(re.compile(r"^上下文已压缩：覆盖了 \d+ 条较早的消息，[\d,]+ → [\d,]+ tokens$"))
    expect(w.row("messages").locator(".ocw-row-name")).to_have_text("消息")
    expect(nb.cell("widget").locator(".ocw-encoding")).to_have_text("cl100k_base (估算)")
    expect(root).to_have_attribute("lang", "zh")
    panel_text = w.panel.inner_text()
    for english in ("Compact now", "estimate", "Messages", "System prompt", "Total", "Compactions"):
        assert english not in panel_text, f"{english!r} still shown in the Chinese panel:\n{panel_text}"

    # Item 9: distinct colors in the dark theme too.
    nb.change_theme("JupyterLab Dark", light=False)
    assert_categories_distinct(category_colors(w), "dark")
    w.screenshot("first-hour-zh-dark.png")
    nb.change_theme("JupyterLab Light", light=True)

    # Item 6: the kernel restarts under the widget: it says it is disconnected, its button is off.
    expect(w.compact).to_be_enabled()
    nb.restart_kernel()
    expect(root).to_have_attribute("data-state", "disconnected", timeout=30_000)
    expect(w.compact).to_be_disabled()
    expect(nb.cell("widget").locator(".ocw-ring-status")).to_have_text(re.compile(r"^已断开"))
    before = len(nb.console)
    w.compact.dispatch_event("click")  # a click on the dead widget sends nothing
    nb.page.wait_for_timeout(500)
    assert not [m for m in nb.console[before:] if "Cannot send" in m], nb.console[before:]
    w.screenshot("first-hour-disconnected.png")
