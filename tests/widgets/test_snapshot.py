"""The widgets' static text/html snapshot (issue 24): what a saved or exported notebook
shows where no widget runs. Model text and names must stay inert in it."""
from __future__ import annotations

from ocw.widgets import snapshot

EVIL = "<img src=x onerror=alert(1)><script>alert(2)</script>"


def test_ring_snapshot_has_the_figure_and_the_breakdown_and_escapes_the_name():
    page = snapshot.ring_html(EVIL, 1_234, 8_192, [("Messages", 1_000, 12.2), ("Free space", 6_958, None)])
    assert "1,234 / 8,192 tokens (15.1%)" in page
    assert "<td>Messages</td><td style='text-align:right'>1,000</td><td style='text-align:right'>12.2%</td>" in page
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page


def test_chat_snapshot_shows_the_newest_messages_and_keeps_model_html_sanitized():
    messages = [{"role": "user", "time": "21:40", "text": EVIL},
                {"role": "assistant", "time": "21:40", "html": f"<p>fine</p>{EVIL}", "tools": []}]
    page = snapshot.chat_html("nb.ipynb", messages, {"html": "<p>older</p><script>x()</script>", "cover_count": 4})
    assert "<p>fine</p>" in page and "summary of 4 earlier messages" in page and "<p>older</p>" in page
    assert "<script" not in page and "onerror" not in page.replace("onerror=alert(1)&gt;", "")
    many = [{"role": "user", "time": "", "text": f"m{i}"} for i in range(snapshot.MESSAGES_SHOWN + 3)]
    page = snapshot.chat_html("nb", many)
    assert "… 3 earlier messages not shown" in page and ">m2<" not in page and ">m3<" in page
    assert "no messages yet" in snapshot.chat_html("nb", [])


def test_chat_snapshot_shows_the_newest_40_messages():
    def page(n):
        return snapshot.chat_html("nb", [{"role": "user", "time": "", "text": f"m{i}"} for i in range(n)])

    forty = page(40)
    assert ">m0<" in forty and ">m39<" in forty and "earlier messages not shown" not in forty
    forty_one = page(41)
    assert "… 1 earlier messages not shown" in forty_one and ">m0<" not in forty_one
    assert ">m1<" in forty_one and ">m40<" in forty_one


def test_chat_snapshot_shows_tool_calls_and_results_escaped_in_a_closed_frame():
    messages = [{"role": "assistant", "time": "9:01", "html": "<p>looking</p>",
                 "tools": [{"name": "read_file", "args": '{"path": "<a.txt>"}'}]},
                {"role": "tool", "time": "9:01", "tools": [{"result": "line 1 <b>bold</b>"}]}]
    page = snapshot.chat_html("nb", messages)
    assert "<div><code>read_file({&quot;path&quot;: &quot;&lt;a.txt&gt;&quot;})</code></div>" in page
    assert "<pre>line 1 &lt;b&gt;bold&lt;/b&gt;</pre>" in page
    assert page.endswith("</div>") and page.count("<div") == page.count("</div>")
