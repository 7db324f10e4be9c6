"""The chat composer in Notebook 7 (issue 24), in headless Chromium.

Notebook 7 is served by the same Jupyter server as JupyterLab (tests/browser/lab.py);
its page is /notebooks/<name>. The composer owns its keys there too: Shift+Enter is a
new line in the draft, not the notebook's run-and-advance, so the `%chat` cell's
execution count does not change. Running another cell afterwards is the barrier: a
re-run the key had queued would run before it and change the count.

It never skips: without Chromium, JupyterLab or the notebook package it fails and says how
to install them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser.lab import NotebookPage, cell_tags, chromium_path, launch_chromium, require_python_packages, running_lab

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "browser" / "chat_widget.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _run(nb: NotebookPage, tag: str) -> None:
    """Select the cell and run it from the Run menu (Notebook 7 takes Ctrl+Enter only once
    the notebook has keyboard focus; the menu needs none), then wait for its count.
    A run the page did not take leaves the prompt at "[ ]:" (the first, under load, while
    the page was still connecting to a kernel the server already called idle: the fresh-
    clone CI saw it once); it is asked again, never once it took ("[*]:" or a count)."""
    from playwright.sync_api import expect

    cell = nb.cell(tag)
    prompt = cell.locator(".jp-InputArea-prompt").first
    for _ in range(4):
        _answer_the_kernel_dialog(nb)
        cell.scroll_into_view_if_needed()
        cell.locator(".jp-InputPrompt").first.click()
        nb.menu("Run", "notebook:run-cell")
        try:
            expect(prompt).not_to_have_text(re.compile(r"^\[ \]:?$"), timeout=15_000)
            break
        except AssertionError:
            continue
    expect(prompt).to_have_text(re.compile(r"^\[\d+\]:?$"), timeout=90_000)
    expect(cell.locator(".jp-Cell-outputWrapper")).to_contain_text(f"OCW-STEP {tag}", timeout=30_000)


def _answer_the_kernel_dialog(nb: NotebookPage) -> None:
    """A run the page took before it had connected to the kernel opens "Select Kernel" (the
    fresh-clone CI saw it under load: the next click waited 30 s behind the dialog). Its
    default is the notebook's own kernel: accepted, the page connects and the run is asked
    again. Any other dialog fails the test, with its text."""
    from playwright.sync_api import expect

    dialog = nb.page.locator(".jp-Dialog")
    if not dialog.count():
        return
    text = dialog.first.inner_text()
    if "Select Kernel" not in text:
        pytest.fail(f"a dialog stands in front of the notebook: {text!r}", pytrace=False)
    dialog.locator(".jp-mod-accept").first.click()
    expect(dialog).to_have_count(0, timeout=30_000)


def test_shift_enter_in_the_composer_is_a_new_line_in_notebook_7():
    require_python_packages()
    try:
        import notebook  # noqa: F401
    except ImportError:
        pytest.fail("Notebook 7 is not installed: pip install -e '.[dev]' (the notebook package)", pytrace=False)
    from playwright.sync_api import expect, sync_playwright

    chromium = chromium_path()
    with running_lab(NOTEBOOK) as lab, sync_playwright() as p:
        browser = launch_chromium(p, chromium)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
            page.set_default_timeout(30_000)
            page.goto(f"{lab.url}/notebooks/{NOTEBOOK.name}", wait_until="domcontentloaded", timeout=60_000)
            # Notebook 7's page, not JupyterLab's: its own shell id, no lab status bar.
            expect(page.locator("#main-panel, .jp-NotebookPanel").first).to_be_visible(timeout=60_000)
            assert "/lab" not in page.url, page.url
            # The kernel exists and is idle (asked of the server: no UI differences).
            page.wait_for_function(
                "async () => { const r = await fetch('/api/kernels'); const ks = await r.json();"
                " return ks.length > 0 && ks.every(k => k.execution_state === 'idle'); }", timeout=90_000, polling=500)
            nb = NotebookPage(page, cell_tags(NOTEBOOK))
            run = lambda tag: _run(nb, tag)  # noqa: E731
            run("setup")
            run("widget")
            cell = nb.cell("widget")
            composer = cell.locator(".ocw-input")
            expect(cell.locator(".ocw-chat")).to_be_visible(timeout=30_000)
            prompt = cell.locator(".jp-InputArea-prompt").first
            before = prompt.inner_text().strip()
            assert re.match(r"^\[\d+\]:?$", before), before
            composer.click()
            composer.press_sequentially("line one", delay=20)
            composer.press("Shift+Enter")
            composer.press_sequentially("line two", delay=20)
            expect(composer).to_have_value("line one\nline two")
            expect(composer).to_be_focused()
            run("state")
            assert prompt.inner_text().strip() == before, (before, prompt.inner_text())
            expect(composer).to_have_value("line one\nline two")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            cell.locator(".ocw-chat").screenshot(path=str(ARTIFACTS / "chat-notebook7.png"), animations="disabled")
        except (Exception, pytest.fail.Exception):
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "notebook7-failure.png"), full_page=True)
            print(f"--- server log (tail) ---\n{lab.log_tail()}")
            raise
        finally:
            browser.close()
