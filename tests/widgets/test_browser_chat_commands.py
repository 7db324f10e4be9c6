"""Issue 29 in a real JupyterLab, in headless Chromium: a command the notebook adds runs from
the chat widget's slash menu; `/doctor --send` reaches the model (counted on the loopback
server, tests/refserver.py) as a stored turn; the jump-to-latest button appears once the
reader scrolls up, stays clear of the open slash menu and the composer, and brings the
newest message back. The notebook is written by the test into a temp dir (nothing is saved
in the repository). Screenshots: test-artifacts/browser/commands-*.png.

It never skips: without Chromium or JupyterLab it fails and says how to install them.
"""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from browser.lab import NotebookPage, notebook_in_chromium

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
DUMMY_KEY = "sk-dummy-browser-commands-0123456789"
LONG = "The loader reads events.parquet, joins the orders table and retries after 30 s timeouts. " * 4

SETUP = f'''%load_ext ocw
%config Ocw.lang = 'en'
%new --name browser-commands
import ocw

@ocw.command("greet", help="say hello from the notebook", args="[NAME]")
def greet(args):
    return f"Hello {{args or 'from the notebook'}}!"

for turn in range(1, 7):  # enough messages that the conversation scrolls
    get_ipython().run_cell_magic("chat", "", f"Turn {{turn}}: {LONG}")
print("OCW-STEP setup")'''
WIDGET = '%chat\nprint("OCW-STEP widget")'

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def build_notebook(path: Path) -> dict[str, int]:
    cells = [("setup", SETUP), ("widget", WIDGET)]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src, metadata={"tags": [tag]}) for tag, src in cells]
    nbformat.write(nb, path)
    return {tag: i for i, (tag, _) in enumerate(cells)}


def test_added_command_doctor_send_and_jump_to_latest_in_jupyterlab(refserver, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("commands-*.png"):
        old.unlink()
    notebook = tmp_path / "chat_commands.ipynb"
    tags = build_notebook(notebook)
    env = {"OCW_PROVIDER": "openai", "OCW_BASE_URL": refserver.openai_url, "OPENAI_API_KEY": DUMMY_KEY}
    started = time.monotonic()
    with notebook_in_chromium(notebook, tags, ARTIFACTS / "commands-failure.png", env=env, height=1100) as nb:
        scenario(nb, refserver)
    print(f"\nbrowser test (added commands, /doctor --send, jump): {time.monotonic() - started:.1f} s")


def box(locator) -> dict:
    b = locator.bounding_box()
    assert b is not None, locator
    return b


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def scenario(nb: NotebookPage, server) -> None:
    from playwright.sync_api import expect

    nb.run_cell("setup")
    assert len(server.requests) == 6
    nb.run_cell("widget")
    cell = nb.cell("widget")
    root = cell.locator(".ocw-chat")
    expect(root).to_have_attribute("data-state", "ready", timeout=30_000)
    msgs = cell.locator(".ocw-thread .ocw-msg")
    expect(msgs).to_have_count(12)
    inp, menu, options = cell.locator(".ocw-input"), cell.locator(".ocw-menu"), cell.locator(".ocw-menu-item")
    status = cell.locator(".ocw-chat-status")

    # The added command: in the menu after the built-ins, marked; Enter runs it.
    inp.click()
    inp.press_sequentially("/", delay=30)
    expect(menu).to_be_visible()
    names = options.evaluate_all("os => os.map(o => o.dataset.name)")
    assert names[-1] == "greet" and names.count("greet") == 1, names
    inp.press_sequentially("gr", delay=30)
    expect(options).to_have_count(1)
    expect(options.nth(0).locator(".ocw-menu-by")).to_have_text("added by this notebook")
    inp.press("Enter")
    expect(cell.locator(".ocw-thread .ocw-note-output").last).to_have_text("Hello from the notebook!", timeout=30_000)
    expect(status).to_have_text("", timeout=30_000)

    # Jump to latest: hidden at the bottom, shown once the reader scrolls up ...
    conversation = cell.locator(".ocw-conversation")
    jump = cell.locator(".ocw-jump")
    expect(jump).to_be_hidden()
    conversation.evaluate("c => { c.scrollTop = 0; }")
    expect(jump).to_be_visible()
    # ... clear of the slash menu (open now) and of the composer.
    inp.click()
    inp.press_sequentially("/", delay=30)
    expect(menu).to_be_visible()
    expect(jump).to_be_visible()
    j, m, c = box(jump), box(menu), box(cell.locator(".ocw-composer"))
    assert not overlap(j, m), (j, m)
    assert not overlap(j, c), (j, c)
    assert j["y"] >= m["y"] + m["height"], (j, m)  # below the menu, which opens upward
    top = page_element_at(jump)
    assert top == "ocw-jump", top  # nothing lies over it
    root.screenshot(path=str(ARTIFACTS / "commands-jump-and-menu.png"), animations="disabled")
    inp.press("Escape")
    inp.fill("")
    jump.click()
    expect(jump).to_be_hidden()
    gap = conversation.evaluate("c => c.scrollHeight - c.scrollTop - c.clientHeight")
    assert gap < 48, gap
    last = box(msgs.last)
    view = box(conversation)
    assert last["y"] + last["height"] <= view["y"] + view["height"] + 1, (last, view)

    # /doctor --send: the report (no key in it) reaches the model as the user's message, a turn.
    before = len(server.requests)
    inp.click()
    inp.press_sequentially("/doctor --send", delay=20)
    inp.press("Enter")
    expect(msgs).to_have_count(14, timeout=60_000)
    expect(status).to_have_text("", timeout=60_000)
    assert len(server.requests) == before + 1
    sent = server.requests[-1].messages[-1]
    assert sent["role"] == "user" and sent["content"].startswith("ocw doctor\n"), sent
    assert DUMMY_KEY not in sent["content"]
    expect(msgs.nth(12)).to_contain_text("ocw doctor")
    expect(msgs.nth(13)).to_contain_text("echo: ocw doctor")
    root.screenshot(path=str(ARTIFACTS / "commands-doctor-sent.png"), animations="disabled")


def page_element_at(locator) -> str:
    """The class of the topmost element at the centre of `locator` (what a click there hits)."""
    return locator.evaluate(
        "el => { const r = el.getBoundingClientRect();"
        " const top = el.ownerDocument.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);"
        " return top ? top.className : ''; }")
