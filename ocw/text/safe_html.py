"""Model-supplied text, rendered so that nothing in it can run.

JupyterLab trusts the outputs of a cell the user just ran: `text/markdown` and
`text/html` from the kernel go into the page as they are, scripts and event
handlers included. Model replies, summaries, tool results and error bodies can
carry any text a file or web page put in front of the model, so ocw never sends
them as `text/markdown` or as unsanitized `text/html`. Everything goes through
`display_bundle` (Markdown) or `tool_call_bundle` (preformatted text) here.

Invariant: every `text/html` this module returns is the output of `sanitize`
(the tool view then adds one fixed style of ocw's own to its <pre>): an
allow-list (`ALLOWED_TAGS`, `ALLOWED_ATTRIBUTES`) enforced by nh3, in which no
tag can run code (no script, style, iframe, svg, math, form, object) or load
anything without a click (no img: a Markdown image is shown as a link), no
attribute is an event handler, a style or an `id`/`name` (which could clobber
DOM globals), and every `href`/`src` is an absolute http, https or mailto URL
or is removed. It holds because markdown-it renders with raw HTML off (a
`<script>` in the text comes out as `&lt;script&gt;`), and because the
sanitizer runs last on the rendered fragment, whatever markdown-it emitted.
The `text/plain` half is the text with terminal control characters removed, so
a reply cannot rewrite a terminal either.
"""
from __future__ import annotations

import html
import re

import nh3
from markdown_it import MarkdownIt

ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote",
    "ul", "ol", "li", "strong", "em", "s", "del", "code", "pre", "a",
    "table", "thead", "tbody", "tr", "th", "td",
    "details", "summary",  # ocw's own tool-call view
})
ALLOWED_ATTRIBUTES = {
    "*": frozenset(),  # none on every tag (nh3 would otherwise allow lang and title)
    "a": frozenset({"href", "title"}),
    "ol": frozenset({"start"}),
}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"
ALLOWED_CLASSES = {"details": frozenset({"ocw-tool-call"})}

# markdown-it stops at this block depth and drops the rest of the text (inline nesting
# past it stays as literal text). Reaching the drop needs an open block token at depth
# MAX_NESTING - 1, so a text with any block token that deep is shown preformatted
# instead: nothing the model wrote disappears.
MAX_NESTING = 20

_markdown = (MarkdownIt("commonmark", {"html": False, "maxNesting": MAX_NESTING})
             .enable(["table", "strikethrough"]))


def _image_as_link(self, tokens, idx, options, env) -> str:
    """A Markdown image becomes a link to it: an image loads without a click, and its
    URL can carry whatever the model put in it (a secret from the notebook, say) to
    any server. A link waits for the reader."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    src = token.attrGet("src") or ""
    return f'<a href="{html.escape(src, quote=True)}">[image: {html.escape(alt, quote=False)}]</a>'


_markdown.add_render_rule("image", _image_as_link)

# C0 controls but tab and newline, DEL, C1 controls: ESC starts terminal sequences
# (OSC 52 writes the clipboard, OSC 8 makes links), CR overwrites a line.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(fragment: str) -> str:
    """The allow-list pass: what is not listed here is dropped (tags keep their text)."""
    return nh3.clean(
        fragment,
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(attrs) for tag, attrs in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        url_relative="deny",  # a relative URL would resolve against the Jupyter server
        link_rel=LINK_REL,
        allowed_classes={tag: set(c) for tag, c in ALLOWED_CLASSES.items()},
        strip_comments=True,
    )


def plain_text(text: str) -> str:
    """The text for terminals and `text/plain`: control characters removed (CRLF kept as LF)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def preformatted_html(text: str) -> str:
    """The plain-text fallback: the text as it is, escaped, in a <pre>."""
    return sanitize(f"<pre>{html.escape(plain_text(text), quote=False)}</pre>")


def markdown_html(text: str) -> str:
    """Markdown (CommonMark + tables + strikethrough, raw HTML shown as text) to safe HTML."""
    text = plain_text(text)
    try:
        tokens = _markdown.parse(text)
        if any(t.level >= MAX_NESTING - 1 for t in tokens):
            return preformatted_html(text)
        rendered = _markdown.renderer.render(tokens, _markdown.options, {})
    except RecursionError:
        return preformatted_html(text)
    return sanitize(rendered)


def display_bundle(text: str) -> dict[str, str]:
    """The mime bundle for model text: safe HTML for notebooks, the text for everything else
    (jupyter console, nbconvert to text, nbval compare `text/plain`)."""
    return {"text/html": markdown_html(text), "text/plain": plain_text(text)}


TOOL_RESULT_STYLE = "max-height:24em;overflow:auto"  # a long result scrolls inside its <details>


def tool_call_bundle(line: str, content: str) -> dict[str, str]:
    """A tool call: one summary line, the full result one click away (a <details>).
    `line` and `content` are shown verbatim (escaped), never as Markdown."""
    body = sanitize(f"<details class='ocw-tool-call'><summary><code>{html.escape(plain_text(line))}</code>"
                    f"</summary><pre>{html.escape(plain_text(content))}</pre></details>")
    # ocw's own fixed style, added after the sanitizer (which keeps no style from anyone)
    body = body.replace("<pre>", f'<pre style="{TOOL_RESULT_STYLE}">', 1)
    return {"text/plain": plain_text(line), "text/html": body}


def preview(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
