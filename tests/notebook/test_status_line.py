"""The quiet status line says when the auto-compact line cannot fire (issue 23): paused
after three failures in a row, off when turned off, and overflow recovery off when
Ocw.reactive_compact is not 'auto' — in English and Chinese."""
from __future__ import annotations

import re

from ocw.notebook.report import status_line


def test_the_line_says_auto_paused_and_off(store):
    s = store.create_session(model="tiny", provider="openai", context_window=2_000, system_prompt="Be brief.")
    s.append_many([("user", "hello"), ("assistant", "hi")])
    s.reserve_ratio = 0.8
    assert re.fullmatch(r"context \d+ % · [\d,]+ / 2,000 · auto-compact at 80 % · 0 compactions", status_line(s))
    s.auto_compact_failures = 2  # one short of the pause: still armed
    assert "auto-compact at 80 %" in status_line(s)
    s.auto_compact_failures = 3
    line = status_line(s)
    assert "auto-compact paused (%compact works)" in line and "at 80 %" not in line
    assert "自动压缩已暂停" in status_line(s, "zh")
    s.reserve_ratio = 0
    assert "auto-compact off" in status_line(s)
    s.reserve_ratio, s.auto_compact_failures = 0.8, 0
    assert "overflow recovery off" not in status_line(s, reactive="auto")
    assert status_line(s, reactive="off").endswith("auto-compact at 80 % · overflow recovery off · 0 compactions")
    assert "overflow recovery off" in status_line(s, reactive="ask")
    assert "溢出恢复已关闭" in status_line(s, "zh", reactive="off")


def test_the_figures_are_what_was_sent_and_say_how_many_were_left_out(store):
    """Issue 23: after a request that left older messages out, the status line, the
    %context table and the ring show what was sent and "N left out" (plural-correct,
    EN and ZH); the turn budget still judges the whole branch."""
    from ocw.notebook.report import context_table
    from ocw.widgets.ring import ContextWidget

    s = store.create_session(model="tiny", provider="openai", context_window=2_000, system_prompt="Be brief.")
    s.append_many([(r, f"{r} {i}: " + "the nightly load finished " * 30) for i in range(8) for r in ("user", "assistant")])
    whole = s.occupancy()
    assert whole["ratio"] > 1.0 and not whole["left_out"]
    first = s.node(s.branch()[0])["tokens"]
    s.left_out = {"head": s.head, "generation": s.generation, "messages": 1, "tokens": first}
    occ = s.occupancy()
    assert occ["left_out"] == 1 and occ["total"] < whole["total"]
    assert occ["estimated_total"] == whole["estimated_total"] - first
    assert s.occupancy(as_sent=False)["total"] == whole["total"]
    assert status_line(s).endswith(" · 1 older message left out")
    s.left_out = {**s.left_out, "messages": 3, "tokens": first * 3}
    assert status_line(s).endswith(" · 3 older messages left out")
    assert status_line(s, "zh").endswith(" · 3 条较早的消息未发送")
    assert "Left out: 3 older messages were not sent" in context_table(s)
    w = ContextWidget(s)
    assert w.left_out == 3 and w.total == s.occupancy()["total"]
    # A new HEAD (the next turn) is no longer that request's: the branch's figures again.
    s.append_many([("user", "next"), ("assistant", "ok")])
    assert not s.occupancy()["left_out"] and not status_line(s).endswith("left out")
    w.refresh()
    assert w.left_out == 0
    w.close()


def test_ring_and_table_say_paused_and_unverified_usage(store):
    from ocw.notebook.report import context_table
    from ocw.widgets.ring import ContextWidget

    s = store.create_session(model="tiny", provider="openai", context_window=2_000, system_prompt="Be brief.")
    s.append_many([("user", "hello"), ("assistant", "hi")])
    w = ContextWidget(s)
    assert (w.auto_paused, w.usage_unverified) == (False, 0)
    s.auto_compact_failures = 3
    s.note_usage(41, 45)  # an unverified report (counted)
    w.refresh()
    assert (w.auto_paused, w.usage_unverified) == (True, 1)
    table = context_table(s)
    assert "paused after 3 failed compactions" in table
    assert "Usage: 1 reports below what the request holds: unverified, not used" in table
    assert "未经核实" in context_table(s, "zh")
    w.close()


def test_the_count_of_compactions_is_plural_correct(store, fake_summarizer):
    s = store.create_session(model="tiny", provider="openai", context_window=8_000, system_prompt="Be brief.")
    for n, word in ((1, "1 compaction"), (2, "2 compactions")):
        s.append_many([(r, f"{r} round {n} {i}: " + "the nightly load finished " * 20)
                       for i in range(4) for r in ("user", "assistant")])
        assert s.compact(keep_recent_tokens=100, provider=fake_summarizer("Summary so far.")).outcome == "succeeded"
        assert s.compaction_count == n and status_line(s).endswith(f" · {word}")
    assert status_line(s, "zh").endswith(" · 已压缩 2 次")


def test_doctor_gives_up_on_a_model_list_after_3_seconds():
    """%ocw doctor asks an OpenAI-compatible server for its models; one that takes longer than
    3 s is not waited for (the list is then unknown), one that answers is listed."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ocw.notebook.report import served_models

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/slow"):
                threading.Event().wait(3.4)  # the server's own slowness, over the 3 s bound
            body = json.dumps({"data": [{"id": "m1"}]}).encode()
            try:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the slow answer: ocw stopped waiting and closed the connection
                pass

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    srv.daemon_threads = True  # closing does not wait for the slow answer
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        assert served_models(base + "/fast/v1", None) == ["m1"]
        assert served_models(base + "/slow/v1", None) is None
    finally:
        srv.shutdown()
        srv.server_close()
