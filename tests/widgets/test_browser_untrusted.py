"""Untrusted text stays inert in a real JupyterLab, in headless Chromium (issue 11, acceptance).

JupyterLab trusts the outputs of a cell the user just ran, so anything ocw sends as
`text/markdown` or raw `text/html` would run in the page. This test starts the loopback
reference server (tests/refserver.py) and a JupyterLab whose kernel's ocw talks to it
(OCW_PROVIDER=openai, OCW_BASE_URL=<refserver>, a dummy key, the harness's own temp
OCW_DB), then runs one notebook cell per row of SURFACES: the server answers with
script payloads and `javascript:` links in replies (streamed in small chunks), in a
tool's arguments and result, in an error body, in a compaction summary, and in a
session name shown by `%sessions` and the `%context` widget.

Each payload sets its own `window.__ocw_pwned_<name>` flag if it ever runs. A positive
control in the same page (an `IPython.display.HTML` with an `onerror`) must set
`window.__ocw_control`, proving the check can see a script run. Then: the control flag
is set; no pwned flag is; no ocw output holds a script, iframe, object/embed, an `on*`
attribute, or an href/src with a scheme other than http/https/mailto; clicking each
rendered `javascript:` link text neither changes the page URL, nor opens a page, nor
sets a flag. Screenshots go to test-artifacts/browser/inert-*.png.

To cover a new surface (a `%summary` command, a chat widget), append a row to SURFACES.
It never skips: without Chromium or JupyterLab it fails and says how to install them.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from browser.lab import NotebookPage, notebook_in_chromium

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
NOTEBOOK_NAME = "untrusted.ipynb"
DUMMY_KEY = "sk-dummy-browser-0123456789"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]


def pwn(name: str) -> str:
    """JavaScript that marks payload `name` as having run."""
    return f"window.__ocw_pwned_{name}=1"


@dataclass(frozen=True)
class Surface:
    """One way model-controlled text reaches the page: a notebook cell, and what the
    reference server answers while it runs."""

    name: str  # the cell's tag
    surface: str  # what the row covers, for failure messages
    source: str  # the notebook cell
    serve: Callable = lambda server: None  # queue the server's answers (called before the cell runs)
    shows: tuple[str, ...] = ()  # texts that must reach the cell's output (the payload arrived, as text)
    click: tuple[str, ...] = ()  # `javascript:` link texts to click afterwards ("css=..." for a selector)
    open_details: bool = False  # open <details> (the tool-call view) before clicking
    error: bool = False  # the cell ends in ocw's one-line error
    check: Callable | None = field(default=None, compare=False)  # extra checks: check(cell, server)


def _reply(name: str, text: str, *, click: tuple[str, ...] = (), shows: tuple[str, ...] = (), check=None) -> Surface:
    # Small frames 60 ms apart: the view re-renders mid-stream, so unclosed tags and
    # half-written links are on the page for a moment too.
    return Surface(name, f"reply ({name})", f"%%chat\nplease show {name}",
                   lambda s: s.script(text=text, chunk_delay=0.06), shows=shows or (f"__ocw_pwned_{name}",),
                   click=click, check=check)


def _reply_renders_markdown(cell, server) -> None:
    """A positive check on the same path: Markdown still renders (a table, a code block,
    an https link with its href), so the other rows are not passing by showing nothing."""
    from playwright.sync_api import expect

    out = cell.locator(".jp-Cell-outputWrapper")
    expect(out.locator("table td").first).to_have_text("<img src=x onerror=window.__ocw_pwned_table=1>")
    expect(out.locator("pre code")).to_contain_text("<script>window.__ocw_pwned_code=1</script>")
    expect(out.locator('a[href="https://example.com/ok"]')).to_have_text("a safe link")


def _math_was_typeset(cell, server) -> None:
    """JupyterLab typesets TeX in HTML outputs: the \\href must come out as math, not a link."""
    from playwright.sync_api import expect

    math = cell.locator(".jp-Cell-outputWrapper mjx-container")
    expect(math).to_have_count(1)
    assert math.locator("a").count() == 0 and math.locator("[href]").count() == 0, math.inner_html()


def _summary_was_requested(cell, server) -> None:
    assert server.summary_requests(), "the %compact row sent no summary request: its payload never reached ocw"


def _widget_shows_the_name_as_text(cell, server) -> None:
    from playwright.sync_api import expect

    expect(cell.locator(".ocw-ring")).to_be_visible(timeout=30_000)
    expect(cell.locator(".ocw-ring-name")).to_contain_text("<img src=x onerror=")


SESSION_NAME = f'<img src=x onerror="{pwn("session_name")}">'
TOOL_RESULT = (f"<img src=x onerror={pwn('tool_result')}> <script>{pwn('tool_result_script')}</script> "
               f"[tool link](javascript:{pwn('tool_result_link')})")

SURFACES: list[Surface] = [
    _reply("script", f"Intro <script>{pwn('script')}</script> outro."),
    _reply("img_onerror", f'An image: <img src=x onerror="{pwn("img_onerror")}"> done.'),
    _reply("details_ontoggle", f'<details open ontoggle="{pwn("details_ontoggle")}">x</details>'),
    _reply("iframe_srcdoc", f'<iframe srcdoc="<script>parent.__ocw_pwned_iframe_srcdoc=1</script>"></iframe>',
           shows=("__ocw_pwned_iframe_srcdoc",)),
    _reply("svg_onload", f'<svg onload="{pwn("svg_onload")}"><circle r="4"/></svg>'),
    _reply("md_js_link", f"Go: [click md link](javascript:{pwn('md_js_link')}) now.", click=("click md link",)),
    _reply("md_js_case", f"[click case link](JaVaScRiPt:{pwn('md_js_case')})", click=("click case link",)),
    _reply("md_js_entity", f"[click entity link](&#106;avascript:{pwn('md_js_entity')})",
           click=("click entity link",), shows=("click entity link",)),
    _reply("a_js", f'<a href="javascript:{pwn("a_js")}">click raw link</a>', click=("click raw link",)),
    _reply("md_img_js", f"![img alt](javascript:{pwn('md_img_js')})", shows=("img alt",)),
    _reply("md_data_link", f"[click data link](data:text/html,<script>{pwn('md_data_link')}</script>)",
           click=("click data link",)),
    _reply("mathjax_href", f"Math: $\\href{{javascript:{pwn('mathjax_href')}}}{{click math link}}$ end.",
           click=("css=mjx-container",), shows=("Math:",), check=_math_was_typeset),
    _reply("markdown", "| col |\n|-----|\n| <img src=x onerror=window.__ocw_pwned_table=1> |\n\n"
                       "```html\n<script>window.__ocw_pwned_code=1</script>\n```\n\n"
                       "[a safe link](https://example.com/ok)", shows=("a safe link",), check=_reply_renders_markdown),
    Surface("tool_result", "tool arguments and result", "%%chat\nread the note please",
            lambda s: (s.script(tool_calls=[{"name": "fetch_note",
                                             "input": {"q": f"<img src=x onerror={pwn('tool_args')}>"}}]),
                       s.script(text="Read it.")),
            shows=("fetch_note(", "__ocw_pwned_tool_args", "__ocw_pwned_tool_result"),
            click=("tool link",), open_details=True),
    Surface("error_body", "provider error body", "%%chat\nthis one fails",
            lambda s: s.script(status=400, body={"error": {
                "message": f"<img src=x onerror={pwn('error_body')}> [error link](javascript:{pwn('error_link')})",
                "type": "invalid_request_error", "param": None, "code": None}}),
            shows=("__ocw_pwned_error_body",), click=("error link",), error=True),
    Surface("summary", "compaction summary", "%compact 1",
            lambda s: setattr(s, "summary_text", f"Summary <script>{pwn('summary')}</script> "
                                                 f"<img src=x onerror={pwn('summary_img')}>"),
            shows=("Context compacted",), check=_summary_was_requested),
    Surface("session_name", "session name in %%chat", f"%%chat --session '{SESSION_NAME}'\nhello",
            lambda s: s.script(text="hello back"), shows=("hello back",)),
    Surface("sessions", "session name in %sessions", "%sessions", shows=("<img src=x onerror=",)),
    Surface("context", "session name in the %context widget", "%context", check=_widget_shows_the_name_as_text),
]

SETUP = (
    "%load_ext ocw\n"
    "import ocw\n"
    "@ocw.tool\n"
    "def fetch_note(q: str) -> str:\n"
    "    \"The note about q.\"\n"
    f"    return {TOOL_RESULT!r}\n"
    "print('OCW-STEP setup')"
)
CONTROL = (
    "from IPython.display import HTML, display\n"
    "display(HTML(\"<img src=x onerror='window.__ocw_control=1'>\"))\n"
    "print('OCW-STEP control')"
)

# Run in the page: every element of the cells' outputs that could run or navigate.
FIND_ACTIVE = """(skip) => {
  const bad = [];
  const urlAttrs = ['href', 'src', 'xlink:href', 'action', 'formaction', 'data', 'poster', 'background', 'srcset'];
  const cells = [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')];
  cells.forEach((cell, i) => {
    if (skip.includes(i)) return;
    for (const el of cell.querySelectorAll('.jp-Cell-outputWrapper *')) {
      const tag = el.tagName.toLowerCase();
      if (['script', 'iframe', 'frame', 'object', 'embed', 'base', 'meta', 'form'].includes(tag))
        bad.push(`cell ${i}: <${tag}>`);
      for (const a of el.attributes) {
        const n = a.name.toLowerCase();
        if (n.startsWith('on')) bad.push(`cell ${i}: <${tag} ${n}=${JSON.stringify(a.value)}>`);
        if (n === 'srcdoc') bad.push(`cell ${i}: <${tag} srcdoc>`);
        if (urlAttrs.includes(n) && !/^(https?|mailto):/i.test(a.value.replace(/[\\t\\n\\r]/g, '').trim()))
          bad.push(`cell ${i}: <${tag} ${n}=${JSON.stringify(a.value)}>`);
      }
    }
  });
  return bad;
}"""
PWNED = "() => Object.keys(window).filter(k => k.startsWith('__ocw_pwned_')).sort()"


def build_notebook(path: Path) -> dict[str, int]:
    """The notebook: setup, one cell per surface, the control last. Returns tag -> index."""
    cells = [("setup", SETUP)] + [(s.name, s.source) for s in SURFACES] + [("control", CONTROL)]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src, metadata={"tags": [tag]}) for tag, src in cells]
    nbformat.write(nb, path)
    return {tag: i for i, (tag, _) in enumerate(cells)}


def test_untrusted_text_runs_nothing_in_jupyterlab(refserver, tmp_path):
    assert len({s.name for s in SURFACES}) == len(SURFACES), "surface names must be unique"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("inert-*.png"):
        old.unlink()
    notebook = tmp_path / NOTEBOOK_NAME
    tags = build_notebook(notebook)
    env = {"OCW_PROVIDER": "openai", "OCW_BASE_URL": refserver.openai_url, "OPENAI_API_KEY": DUMMY_KEY}
    started = time.monotonic()
    with notebook_in_chromium(notebook, tags, ARTIFACTS / "inert-failure.png", env=env) as nb:
        scenario(nb, refserver, nb.context)
    print(f"\nbrowser test (untrusted text): {time.monotonic() - started:.1f} s, {len(SURFACES)} surfaces; "
          f"screenshots in {ARTIFACTS}")


def scenario(nb: NotebookPage, server, context) -> None:
    page = nb.page
    nb.run_cell("setup")
    problems: list[str] = []  # per-row findings, reported after the flags (which say the most)
    for s in SURFACES:
        s.serve(server)
        out = nb.run_cell(s.name, expect_marker=False)
        cell = nb.cell(s.name)
        text = cell.locator(".jp-Cell-outputWrapper").text_content() or ""
        problems += [f"{s.surface}: {shown!r} is not in the cell's output:\n{text}"
                     for shown in s.shows if shown not in text]
        has_error = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        if s.error and ("Traceback" in text or not has_error):
            problems.append(f"{s.surface}: expected a one-line error, got:\n{text}")
        if not s.error and has_error:
            problems.append(f"{s.surface}: the cell failed:\n{out}")
        if s.check is not None:
            try:
                s.check(cell, server)
            except AssertionError as e:
                problems.append(f"{s.surface}: {e}")
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=str(ARTIFACTS / f"inert-{s.name}.png"))

    # The control: the same page runs a script from a trusted output, and the check sees it.
    nb.run_cell("control")
    page.wait_for_function("() => window.__ocw_control === 1", timeout=15_000)
    page.wait_for_timeout(1000)  # image errors and toggles fire asynchronously: give any payload time

    pwned = page.evaluate(PWNED)
    assert pwned == [], f"payloads ran in the page: {pwned}"
    active = page.evaluate(FIND_ACTIVE, [nb.tags["control"]])
    assert active == [], "active elements in ocw's outputs:\n" + "\n".join(active)
    assert problems == [], "\n".join(problems)
    # ...and the same check finds the control's own handler, so it is not blind.
    control = page.evaluate(FIND_ACTIVE, [i for t, i in nb.tags.items() if t != "control"])
    assert any("onerror" in c for c in control), control

    # Clicking the rendered javascript: link texts does nothing.
    url = page.url
    for s in SURFACES:
        if not s.click:
            continue
        cell = nb.cell(s.name)
        if s.open_details:
            for summary in cell.locator("details summary").all():
                summary.click()
        for label in s.click:
            out = cell.locator(".jp-Cell-outputWrapper")
            target = (out.locator(label[4:]) if label.startswith("css=") else out.get_by_text(label)).first
            target.scroll_into_view_if_needed()
            target.click()
            page.wait_for_timeout(300)
            assert page.url == url, f"{s.surface}: clicking {label!r} navigated to {page.url}"
            assert len(context.pages) == 1, f"{s.surface}: clicking {label!r} opened a page"
            assert page.evaluate(PWNED) == [], f"{s.surface}: clicking {label!r} ran a payload"
    page.screenshot(path=str(ARTIFACTS / "inert-page.png"), full_page=True)
    assert page.evaluate(PWNED) == [] and page.evaluate("() => window.__ocw_control") == 1
    print(json.dumps({"surfaces": [s.name for s in SURFACES], "page_errors": nb.errors}))
