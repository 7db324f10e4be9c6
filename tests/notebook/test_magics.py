"""Issue 5: the notebook surface in a real IPython InteractiveShell.

Every test drives the magics the way a user does (`shell.run_cell("%%chat ...")`),
configured through environment variables, against the loopback reference server
(tests/refserver.py), and checks what the user sees (captured output) and what
the DuckDB file holds. The same flows in a real kernel are in test_kernel.py.
"""
from __future__ import annotations

import _thread
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from IPython.core.error import UsageError

import ocw
import ocw.notebook.magics
from ocw.text.errors import AuthError
from ocw.text.i18n import MESSAGES

DUMMY_KEY = "sk-dummy-KEY-0123456789abcdef"  # what tests/conftest.py's openai_env sets


def read_ocw_db(path):
    """tests/conftest.py's reader (conftest modules are not imported by name)."""
    return _READER(path)


_READER = None


@pytest.fixture(autouse=True)
def _reader(ocw_db_reader, dummy_key):
    global _READER
    assert dummy_key == DUMMY_KEY
    _READER = ocw_db_reader


def reload(shell):
    """Unload and load ocw again: settings read from the environment are read anew."""
    shell.run_line_magic("unload_ext", "ocw")
    shell.run_line_magic("load_ext", "ocw")


USER = "Please keep notes about the garden plan: " + "tomatoes basil " * 45  # ~100 tokens
REPLY = "green leaves grow " * 150  # ~450 tokens


def run(shell, cell, capsys):
    """Run one cell; return (result, stdout, stderr)."""
    res = shell.run_cell(cell)
    cap = capsys.readouterr()
    return res, cap.out, cap.err


def chat(shell, text, capsys, options=""):
    res, out, err = run(shell, f"%%chat {options}\n{text}", capsys)
    assert res.error_in_exec is None, (out, err)
    return out


def three_long_turns(shell, srv, capsys) -> list[str]:
    """Three turns of ~100-token questions and ~450-token replies: 1,725 tokens on a
    2,000-token window, under the 80 % auto threshold before each request."""
    outs = []
    for i in range(3):
        srv.script(text=f"Reply {i}: " + REPLY)
        outs.append(chat(shell, f"Turn {i}. " + USER, capsys))
    return outs


def session():
    s = ocw.current_session()
    assert s is not None
    s.sync()
    return s


def one_line_usage_error(res, err: str, out: str) -> str:
    """The cell failed with a UsageError shown as one line, no traceback."""
    assert isinstance(res.error_in_exec, UsageError), (type(res.error_in_exec), out, err)
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: "), err
    return lines[0]


# -- a conversation ---------------------------------------------------------------------


def test_three_turn_chat_streams_and_persists(oip, openai_env, ocw_env, capsys):
    srv = openai_env
    replies = ["First answer, streamed in pieces.", "Second answer here.", "Third and last answer."]
    outs = []
    for i, r in enumerate(replies):
        srv.script(text=r)
        outs.append(chat(oip, f"question {i}", capsys))

    # The server saw three streamed chat requests, each carrying the history so far.
    assert [(r.path, r.stream, r.is_summary) for r in srv.requests] == [("/v1/chat/completions", True, False)] * 3
    assert [m["role"] for m in srv.requests[2].messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    # The streamed text reached the output.
    for r, out in zip(replies, outs):
        assert r in out
    # Six nodes, user/assistant in order, one chain ending at HEAD.
    oip.run_line_magic("unload_ext", "ocw")  # close the file before reading it here
    db = read_ocw_db(ocw_env)
    assert len(db["sessions"]) == 1 and db["sessions"][0]["name"] == "default"
    nodes = db["nodes"]
    assert [(n["role"], n["text"].strip()) for n in nodes] == [
        (role, text) for i, r in enumerate(replies) for role, text in (("user", f"question {i}"), ("assistant", r))]
    assert [n["parent_id"] for n in nodes] == [None] + [n["id"] for n in nodes[:-1]]
    assert db["sessions"][0]["head"] == nodes[-1]["id"]
    # The provider's usage was recorded against that HEAD (measured basis).
    sample = db["sessions"][0]["metadata"]["context_window"]
    assert sample["head"] == nodes[-1]["id"] and sample["used"] > 0


def test_anthropic_three_turn_chat(anthropic_env, ocw_env, ip, capsys):
    srv = anthropic_env
    outs = []
    for i in range(3):
        srv.script(text=f"Claude says {i}.")
        outs.append(chat(ip, f"hello {i}", capsys))
    assert [(r.path, r.stream) for r in srv.requests] == [("/v1/messages", True)] * 3
    # no model named and a local base URL: the server's own model (its /v1/models), not claude-sonnet-4-5
    assert all(r.body["model"] == "ref-model" and r.auth for r in srv.requests)
    assert srv.requests[-1].system.startswith("You are a helpful assistant")
    assert [m["role"] for m in srv.requests[-1].messages] == ["user", "assistant"] * 2 + ["user"]
    assert [f"Claude says {i}." in o for i, o in enumerate(outs)] == [True] * 3
    assert session().occupancy()["basis"] == "measured"
    ip.run_line_magic("unload_ext", "ocw")
    db = read_ocw_db(ocw_env)
    assert [(n["role"], n["text"].strip()) for n in db["nodes"]] == [
        (r, t) for i in range(3) for r, t in (("user", f"hello {i}"), ("assistant", f"Claude says {i}."))]
    assert db["sessions"][0]["metadata"]["context_window"]["head"] == db["nodes"][-1]["id"]


# -- %compact ---------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_compact_reports_success_then_nothing_to_fold(lang, openai_env, monkeypatch, ip, capsys):
    srv = openai_env
    if lang == "zh":
        monkeypatch.setenv("OCW_LANG", "zh")
        reload(ip)
    three_long_turns(ip, srv, capsys)
    s = session()
    before = s.occupancy()
    assert before["ratio"] < 0.9 and s.compaction_count == 0

    srv.script(text="Summary: the user plans a garden with tomatoes and basil.")
    n_requests = len(srv.requests)
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    after = s.occupancy()
    # One summary request, nothing else.
    assert len(srv.requests) == n_requests + 1 and srv.requests[-1].is_summary
    # N is what the summary node covers: on a 2,000-token window the tail is its last
    # quarter (500 tokens), widened toward five messages only while they fit in half
    # the window (1,000): the last question and reply stay, four of six are folded.
    summary = next(n for n in read_nodes(s) if n["name"] == "context/summary")
    n_covered = len(summary["covers"])
    assert n_covered == 4
    # X is what the ring showed before (the one entry point, DESIGN §3);
    # Y is the occupancy total after (estimated basis until the next request).
    x, y = before["total"], after["total"]
    assert after["basis"] == "estimated" and y < x
    expected = MESSAGES[lang]["finished"].format(n=n_covered, s="" if n_covered == 1 else "s", before=f"{x:,}",
                                                 after=f"{y:,}")
    # The scripted summary has no structured memory block: the deterministic memory is used, said in one line.
    expected += ("。" if lang == "zh" else ". ") + MESSAGES[lang]["memory_fallback"]
    assert out.strip() == expected
    if lang == "zh":
        assert out.startswith("上下文已压缩：覆盖了 4 条较早的消息")
    else:
        assert out.startswith("Context compacted: covered 4 older messages")
    assert s.compaction_count == 1 and s.generation == before["generation"] + 1
    assert s.head == before["head"]  # compaction never moves HEAD

    # Again: already summary + tail. The no-op message, and no request at all.
    res, out, err = run(ip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert out.strip() == MESSAGES[lang]["no_op"]
    assert out.strip() == ("当前上下文已是压缩状态，没有可压缩的旧消息。" if lang == "zh"
                           else "Context is already compacted; no older messages to fold.")
    assert len(srv.requests) == n_requests + 1
    assert s.compaction_count == 1 and s.occupancy()["total"] == y


def read_nodes(s):
    """All nodes of session `s`, through its own store (the kernel-side view)."""
    import json

    with s.store.db.connect() as con:
        rows = con.execute("SELECT id, role, name, parent_id FROM nodes WHERE session_id = ? ORDER BY seq",
                           [s.id]).fetchall()
    parent = {i: p for i, r, n, p in rows}

    def covered(boundary):  # a summary covers the branch from the root to its boundary
        out = []
        while boundary is not None:
            out.append(boundary)
            boundary = parent[boundary]
        return out[::-1]

    return [{"id": i, "role": r, "name": n, "covers": covered(p) if n == "context/summary" else None}
            for i, r, n, p in rows]


@pytest.mark.parametrize("arg", ["abc", "-5", "1.5", "2000 300"])
def test_compact_rejects_a_bad_argument(arg, oip, openai_env, capsys):
    srv = openai_env
    for i in range(3):
        chat(oip, f"message {i} " + "word " * 30, capsys)
    s = session()
    state = (s.head, s.generation, s.compaction_count, len(read_nodes(s)), len(srv.requests))
    res, out, err = run(oip, f"%compact {arg}", capsys)
    line = one_line_usage_error(res, err, out)
    assert "whole number of tokens" in line and repr(arg) in line
    s.sync()
    assert (s.head, s.generation, s.compaction_count, len(read_nodes(s)), len(srv.requests)) == state


def test_compact_with_a_number_keeps_that_many_tokens(oip, openai_env, capsys):
    srv = openai_env
    for i in range(3):
        chat(oip, f"message {i} " + "word " * 30, capsys)
    srv.script(text="Short summary.")
    res, out, err = run(oip, "%compact 0", capsys)
    assert res.error_in_exec is None, err
    assert out.startswith("Context compacted: covered 6 older messages")
    assert session().occupancy()["breakdown"]["messages"] == 0


def test_compact_without_a_session_claims_nothing(oip, openai_env, ocw_env, capsys):
    res, out, err = run(oip, "%compact", capsys)
    assert res.error_in_exec is None, err
    assert out.strip() == "Start a conversation first"
    res, out, err = run(oip, "%context", capsys)
    assert out.strip() == "Start a conversation first"
    res, out, err = run(oip, "%rewind", capsys)
    assert "Start a conversation first" in one_line_usage_error(res, err, out)
    assert openai_env.requests == []
    oip.run_line_magic("unload_ext", "ocw")
    assert read_ocw_db(ocw_env)["sessions"] == []  # no session row was created


def test_compact_in_chinese_without_a_session(monkeypatch, ocw_env, ip, capsys):
    monkeypatch.setenv("OCW_LANG", "zh")
    reload(ip)
    res, out, err = run(ip, "%compact", capsys)
    assert out.strip() == MESSAGES["zh"]["no_session"]


# -- overflow ---------------------------------------------------------------------------


def four_medium_turns(shell, srv, capsys):
    """Four turns of ~100-token questions and ~150-token replies: ~53 % of the window.
    Reactive (and automatic) compaction keep at most 40 % of the window as the tail,
    so the first turn folds."""
    for i in range(4):
        srv.script(text=f"Reply {i}: " + "green leaves grow " * 50)
        chat(shell, f"Turn {i}. " + USER, capsys)


def test_overflow_compacts_once_and_retries(oip, openai_env, capsys):
    srv = openai_env
    four_medium_turns(oip, srv, capsys)
    s = session()
    nodes_before, count_before = len(read_nodes(s)), s.compaction_count
    n = len(srv.requests)
    srv.script(overflow=True)
    srv.script(text="Summary: notes about a river.")
    srv.script(text="Answer after the retry.")
    out = chat(oip, "and now?", capsys)

    new = srv.requests[n:]
    assert [(r.status, r.is_summary, r.stream) for r in new] == [(400, False, True), (200, True, False),
                                                                (200, False, True)]
    assert "Answer after the retry." in out
    assert "Compacting context…" in out and "Context compacted: covered" in out
    s.sync()
    assert s.compaction_count == count_before + 1
    kinds = [(x["role"], x["name"]) for x in read_nodes(s)]
    assert len(kinds) == nodes_before + 3  # the summary, then the user message and the reply
    assert kinds.count(("llm", "context/summary")) == 1
    covered = next(x["covers"] for x in read_nodes(s) if x["name"] == "context/summary")
    assert f"Context compacted: covered {len(covered)} older messages" in out and len(covered) >= 2
    # The retry carried the summary instead of the folded message.
    assert "[Summary of the earlier conversation]" in str(new[2].messages)


def test_a_second_overflow_in_one_turn_is_a_one_line_error(oip, openai_env, capsys):
    srv = openai_env
    four_medium_turns(oip, srv, capsys)
    s = session()
    head, n = s.head, len(srv.requests)
    srv.script(overflow=True)
    srv.script(text="Summary: notes about a river.")
    srv.script(overflow=True)
    srv.script(text="never sent", times=3)  # would be consumed if the turn looped
    res, out, err = run(oip, "%%chat\nand now?", capsys)
    line = one_line_usage_error(res, err, out)
    assert "still too long" in line and "%new" in line
    new = srv.requests[n:]
    assert [(r.status, r.is_summary) for r in new] == [(400, False), (200, True), (400, False)]
    s.sync()
    assert s.head == head  # the user message was not stored
    assert srv.pending == 3


def test_overflow_above_every_request_is_not_looped(oip, openai_env, capsys):
    srv = openai_env
    four_medium_turns(oip, srv, capsys)
    n = len(srv.requests)
    srv.overflow_above = 50  # every chat request overflows; the summary request too
    res, out, err = run(oip, "%%chat\nagain", capsys)
    one_line_usage_error(res, err, out)
    # The request, the summary request (it overflows too: compaction failed); the server
    # stated a 50-token window, which no retry can fit, so none is sent.
    assert [(r.status, r.is_summary) for r in srv.requests[n:]] == [(400, False), (400, True)]
    assert "Context compaction failed" in out


# -- errors -----------------------------------------------------------------------------


def test_empty_chat_cell_is_a_usage_error(oip, openai_env, ocw_env, capsys):
    for cell in ("%%chat\n", "%%chat\n   \n\t\n"):
        res, out, err = run(oip, cell, capsys)
        assert "empty" in one_line_usage_error(res, err, out)
    assert openai_env.requests == []
    oip.run_line_magic("unload_ext", "ocw")
    assert read_ocw_db(ocw_env)["sessions"] == []


def test_typed_error_is_one_line_and_debug_shows_the_traceback(openai_env, monkeypatch, ip, capsys):
    srv = openai_env
    srv.script(status=401)
    res, out, err = run(ip, "%%chat\nhello", capsys)
    line = one_line_usage_error(res, err, out)
    assert "HTTP 401" in line and "API key" in line
    assert DUMMY_KEY not in out + err

    # Debug on (OCW_DEBUG=1 read at load time): the typed error with its traceback.
    monkeypatch.setenv("OCW_DEBUG", "1")
    ip.run_line_magic("unload_ext", "ocw")
    ip.run_line_magic("load_ext", "ocw")
    srv.script(status=401)
    res, out, err = run(ip, "%%chat\nhello", capsys)
    assert isinstance(res.error_in_exec, AuthError)
    assert "Traceback" in out + err and "AuthError" in out + err
    assert DUMMY_KEY not in out + err


# -- configuration ----------------------------------------------------------------------


def test_load_twice_is_harmless_and_unload_removes_the_magics(oip, openai_env, capsys):
    mm = oip.magics_manager
    configurables = [c for c in oip.configurables if type(c).__name__ == "Ocw"]
    runtime = ocw.notebook.magics.get_runtime()
    res, out, err = run(oip, "%load_ext ocw", capsys)
    assert res.error_in_exec is None
    ocw.load_ipython_extension(oip)  # by hand, too
    assert [c for c in oip.configurables if type(c).__name__ == "Ocw"] == configurables
    assert ocw.notebook.magics.get_runtime() is runtime
    openai_env.script(text="still works")
    assert "still works" in chat(oip, "hi", capsys)

    res, out, err = run(oip, "%unload_ext ocw", capsys)
    assert res.error_in_exec is None, err
    for kind, names in (("cell", ["chat"]), ("line", ["compact", "context", "rewind", "branch", "new",
                                                        "sessions", "ocw"])):
        for name in names:
            assert name not in mm.magics[kind], name
    assert not [c for c in oip.configurables if type(c).__name__ == "Ocw"]
    assert ocw.notebook.magics.get_runtime() is None and ocw.current_session() is None
    res, out, err = run(oip, "%compact", capsys)
    assert "not found" in one_line_usage_error(res, err, out)
    res, out, err = run(oip, "%%chat\nhello", capsys)
    assert isinstance(res.error_in_exec, UsageError)

    # And back.
    res, out, err = run(oip, "%load_ext ocw", capsys)
    assert res.error_in_exec is None and "compact" in mm.magics["line"]


def test_config_magic_sets_and_rejects(oip, openai_env, caplog, capsys):
    srv = openai_env
    cfg = ocw.config()
    assert cfg.auto_compact == 0.8
    res, out, err = run(oip, "%config Ocw.auto_compact = 0.5", capsys)
    assert res.error_in_exec is None and cfg.auto_compact == 0.5
    # A bad value is refused with a message that says what is allowed; the old value stays.
    with caplog.at_level(logging.ERROR):
        res, out, err = run(oip, "%config Ocw.auto_compact = 5", capsys)
    shown = out + err + caplog.text
    assert "Ocw.auto_compact = 5" in shown and "between 0.1 and 0.99" in shown
    assert cfg.auto_compact == 0.5
    # The new threshold is the one the turn uses: at ~58 % of the window the next
    # turn compacts first (a summary request before the chat request).
    four_medium_turns(oip, srv, capsys)
    assert not srv.summary_requests()
    assert 0.5 <= session().occupancy()["ratio"] < 0.8
    srv.script(text="Summary of the garden talk.")
    srv.script(text="fifth reply")
    out = chat(oip, "Turn 4. " + USER, capsys)
    covered = next(x["covers"] for x in read_nodes(session()) if x["name"] == "context/summary")
    assert len(srv.summary_requests()) == 1 and f"Context compacted: covered {len(covered)} older messages" in out
    assert "fifth reply" in out and session().compaction_count == 1


def test_config_listing_hides_the_key(oip, openai_env, capsys):
    res, out, err = run(oip, f"%config Ocw.api_key = '{DUMMY_KEY}'", capsys)
    assert res.error_in_exec is None
    res, out, err = run(oip, "%config Ocw", capsys)
    assert "Ocw.api_key" in out and DUMMY_KEY not in out + err
    res, out, err = run(oip, "%config Ocw.api_key", capsys)
    assert DUMMY_KEY not in out + err and "hidden" in out
    assert ocw.config().api_key == DUMMY_KEY  # the provider still gets the real value
    openai_env.script(text="ok")
    chat(oip, "hi", capsys)
    assert openai_env.requests[-1].auth


# -- %%chat options -----------------------------------------------------------------------


def test_chat_session_and_new_options(oip, openai_env, ocw_env, capsys):
    chat(oip, "in the default session", capsys)
    assert session().name == "default"
    chat(oip, "in another", capsys, "--session other")
    assert session().name == "other"
    chat(oip, "still in other", capsys)  # the current session stays current
    assert session().name == "other" and len(session().branch()) == 4
    chat(oip, "fresh start", capsys, "--session other --new")
    s = session()
    assert s.name == "other" and len(s.branch()) == 2
    names = {r["name"]: r for r in s.store.sessions()}
    assert len(names) == 3
    old = [n for n in names if n.startswith("other @ ")]
    assert len(old) == 1 and names[old[0]]["messages"] == 4  # filed away, kept whole
    assert names["default"]["messages"] == 2
    # The fresh session's first request carried no history.
    assert [m["role"] for m in openai_env.requests[-1].messages] == ["system", "user"]


def test_chat_model_option_clears_the_baseline_and_keeps_the_count(oip, openai_env, capsys):
    srv = openai_env
    chat(oip, "first", capsys)
    s = session()
    assert s.model == "ref-model" and s.compaction_count == 0  # the loopback server's own model
    # Control: a provider sample lower than the baseline infers a compaction...
    s.record_usage(1_999)  # within the 2,000-token window: a valid sample
    chat(oip, "second", capsys)
    assert s.compaction_count == 1
    # ...but a model change clears the baseline first (the count is kept).
    s.record_usage(1_999)
    chat(oip, "third", capsys, "--model gpt-4o")
    s.sync()
    assert s.model == "gpt-4o" and srv.requests[-1].body["model"] == "gpt-4o"
    assert s.compaction_count == 1
    assert s.metadata["context_window"]["used"] < 1_999  # the new baseline
    assert len(s.branch()) == 6  # same session, same branch
    chat(oip, "fourth", capsys)  # the model sticks
    assert srv.requests[-1].body["model"] == "gpt-4o"


def test_default_session_is_named_after_the_notebook(openai_env, monkeypatch, ip, capsys):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/analysis.ipynb")
    chat(ip, "hello", capsys)
    assert session().name == "/home/me/analysis.ipynb"


def test_default_session_without_a_notebook_name(oip, capsys):
    chat(oip, "hello", capsys)
    assert session().name == "default"


# -- the stop button ----------------------------------------------------------------------


def _interrupt_case(shell, srv, capsys, start_interrupt):
    """A slow stream interrupted midway: nothing stored, the socket closed, the next turn fine."""
    for i in range(2):
        chat(shell, f"before {i}", capsys)
    s = session()
    head, n_nodes, occ = s.head, len(read_nodes(s)), s.occupancy()["total"]
    srv.script(text="slow " * 60, chunk_delay=0.05)
    start_interrupt()
    res, out, err = run(shell, "%%chat\nplease stream slowly", capsys)
    line = one_line_usage_error(res, err, out)
    # One message for the one event: the error line says what was kept; the partial
    # reply stays as streamed, with no second note about the same interrupt.
    assert line == "UsageError: Interrupted: nothing of this turn was saved; run the cell again to resend it."
    assert "slow slow" in out
    assert "Interrupt" not in out and "saved" not in out
    s.sync()
    assert (s.head, len(read_nodes(s)), s.occupancy()["total"]) == (head, n_nodes, occ)
    assert srv.wait_closed(3.0), f"{srv.open_connections} connection(s) left open"
    srv.script(text="after the interrupt")
    assert "after the interrupt" in chat(shell, "next", capsys)
    s.sync()
    assert len(read_nodes(s)) == n_nodes + 2 and s.node(s.head)["parent_id"] is not None
    assert [m["role"] for m in srv.requests[-1].messages] == ["system"] + ["user", "assistant"] * 2 + ["user"]


def test_interrupt_from_the_stream_callback_stores_nothing(oip, openai_env, monkeypatch, capsys):
    real = ocw.notebook.streaming.StreamView.on_text
    calls = {"n": 0, "armed": False}

    def on_text(self, delta):
        real(self, delta)
        calls["n"] += 1
        if calls["armed"] and calls["n"] >= 5:
            calls["armed"] = False
            raise KeyboardInterrupt

    monkeypatch.setattr(ocw.notebook.streaming.StreamView, "on_text", on_text)
    _interrupt_case(oip, openai_env, capsys, lambda: calls.update(n=0, armed=True))


def test_interrupt_main_thread_while_streaming_stores_nothing(oip, openai_env, monkeypatch, capsys):
    """The stop button's real mechanism: SIGINT semantics on the main thread, raised
    wherever it is (socket read, SSE parsing, the display), not in our callback."""
    real = ocw.notebook.streaming.StreamView.on_text
    state = {"armed": False}

    def on_text(self, delta):
        real(self, delta)
        if state["armed"] and "slow slow" in self.text:
            state["armed"] = False
            threading.Timer(0.08, _thread.interrupt_main).start()

    monkeypatch.setattr(ocw.notebook.streaming.StreamView, "on_text", on_text)
    _interrupt_case(oip, openai_env, capsys, lambda: state.update(armed=True))


# -- the other commands -------------------------------------------------------------------


def test_rewind_branch_new_sessions(ip, capsys):
    for i in range(3):  # the offline model: no server needed for graph moves
        chat(ip, f"turn {i}", capsys)
    s = session()
    path = s.branch()
    assert [s.node(n)["role"] for n in path] == ["user", "assistant"] * 3

    res, out, err = run(ip, "%rewind", capsys)
    assert res.error_in_exec is None and s.head == path[3]
    # The note says where HEAD is as a reader knows it: number, role, time, first words; no bare id.
    assert re.search(r"^Rewound 1 turn; HEAD is now message 4 \(assistant, \d\d:\d\d\): “.+”\. The next", out), out
    assert "n_" not in out
    res, out, err = run(ip, "%rewind 2", capsys)
    assert s.head is None and "Rewound 2 turns; HEAD is now the start" in out
    res, out, err = run(ip, f"%branch {path[5]}", capsys)  # back to the old leaf
    first = out.splitlines()[0]
    assert s.head == path[5] and re.fullmatch(r"Switched to the branch ending at message 6 \(assistant, \d\d:\d\d\): “.+”\.",
                                              first), first
    res, out, err = run(ip, f"%rewind {path[1]}", capsys)
    assert s.head == path[1] and s.branch() == path[:2]

    chat(ip, "a different turn 1", capsys)  # forks at path[1]
    fork = s.head
    assert s.node(s.node(fork)["parent_id"])["parent_id"] == path[1]
    res, out, err = run(ip, "%branch", capsys)
    assert f"* {fork}" in out and f"  {path[5]}" in out and out.count("messages  ends with") == 2
    res, out, err = run(ip, f"%branch {path[5]}", capsys)
    assert s.head == path[5] and f"* {path[5]}" in out
    # The occupancy follows HEAD.
    assert s.occupancy_parts()["messages"] == sum(s.node(n)["tokens"] for n in path)

    for bad in ("%rewind 0", "%rewind 9", "%rewind n_nope", "%branch n_nope"):
        res, out, err = run(ip, bad, capsys)
        one_line_usage_error(res, err, out)
    assert s.head == path[5]

    res, out, err = run(ip, "%new", capsys)
    assert res.error_in_exec is None and out.startswith("New session 'default'")
    assert session().id != s.id and session().branch() == []
    res, out, err = run(ip, "%new", capsys)
    assert out.startswith("New session 'default'")
    res, out, err = run(ip, "%new --name scratch", capsys)
    assert session().name == "scratch"
    res, out, err = run(ip, "%sessions", capsys)
    rows = out.strip().splitlines()
    assert len(rows) == 1 + 4
    current = [r for r in rows if r.startswith(" * ")]
    assert len(current) == 1 and "scratch" in current[0]
    old = [r for r in rows if s.id in r]
    # The first session is kept: its current branch (HEAD back on the old leaf) holds 6 messages.
    assert len(old) == 1 and " 6 " in old[0]


def test_ocw_help_lists_every_command_on_one_line(ip, capsys):
    res, out, err = run(ip, "%ocw help", capsys)
    lines = out.strip().splitlines()
    from ocw.notebook.commands import COMMANDS

    assert len(lines) == len(COMMANDS) == 23  # one line per command of the one table
    for cmd in ("%%chat", "%chat", "%compact", "%context", "%rewind", "%branch", "%new", "%sessions", "%session",
                "%ocw help", "%ocw doctor", "%ocw tools"):
        assert len([ln for ln in lines if ln.startswith(cmd + " ") or ln == cmd]) == 1, cmd
    # Every magic ocw registers is in the list.
    registered = ip.magics_manager.registry["OcwMagics"].magics
    for name in registered["line"]:
        assert any(ln.startswith(f"%{name}") for ln in lines), name
    for name in registered["cell"]:
        assert any(ln.startswith(f"%%{name}") for ln in lines), name
    res, out2, err = run(ip, "%ocw", capsys)
    assert out2 == out
    res, out, err = run(ip, "%ocw nonsense", capsys)
    assert "%ocw help" in one_line_usage_error(res, err, out)


def test_ocw_doctor(oip, openai_env, ocw_env, monkeypatch, capsys):
    srv = openai_env
    res, out, err = run(oip, "%ocw doctor", capsys)
    assert res.error_in_exec is None, err
    assert DUMMY_KEY not in out + err
    report = dict(line.strip().split(":", 1) for line in out.splitlines()[1:])
    report = {k.strip(): v.strip() for k, v in report.items()}
    assert report["provider"] == "openai"
    # No model named: the one the local server lists as its own (GET /v1/models), said so.
    assert report["model"] == "ref-model (the server's own, from its model list)"
    assert report["API key"] == "present (OPENAI_API_KEY)"
    assert report["base URL"] == f"{srv.openai_url} — reachable; it serves 1 model"
    assert report["tokenizer"] == "cl100k_base (estimate) — loaded offline"  # ocw knows no tokenizer for ref-model
    assert report["database"] == str(ocw_env)
    assert "Python " in report["versions"] and "duckdb " in report["versions"] and "ocw " in report["versions"]
    # A model named that the server does not list: doctor says which it lists, and how to name it.
    run(oip, "%config Ocw.model = 'gpt-4o-mini'", capsys)
    res, out, err = run(oip, "%ocw doctor", capsys)
    assert ("  model:         gpt-4o-mini — the server lists ref-model; name it with OCW_MODEL=ref-model "
            "or %config Ocw.model = 'ref-model'\n") in out
    assert "  tokenizer:     o200k_base" in out and "loaded offline" in out

    # The model the server lists: nothing to say. A local server without a key: no key needed.
    monkeypatch.delenv("OPENAI_API_KEY")
    run(oip, "%config Ocw.model = 'ref-model'", capsys)
    res, out, err = run(oip, "%ocw doctor", capsys)
    assert "  model:         ref-model\n" in out
    assert "API key:       not set (OPENAI_API_KEY); a server on this machine needs none" in out
    assert "MISSING" not in out and "— reachable; it serves 1 model" in out
    # A server that is not there is said plainly; elsewhere than this machine, a missing key is MISSING.
    run(oip, "%config Ocw.base_url = 'http://127.0.0.1:9/v1'", capsys)
    res, out, err = run(oip, "%ocw doctor", capsys)
    assert "http://127.0.0.1:9/v1 — NOT reachable" in out and "  model:         ref-model\n" in out
    run(oip, "%config Ocw.base_url = 'http://ocw-test.invalid/v1'", capsys)
    res, out, err = run(oip, "%ocw doctor", capsys)
    assert "API key:       MISSING (OPENAI_API_KEY)" in out
    assert "http://ocw-test.invalid/v1 — NOT reachable" in out


def test_context_prints_the_text_table_in_a_terminal(oip, openai_env, capsys):
    srv = openai_env
    three_long_turns(oip, srv, capsys)
    s = session()
    occ = s.occupancy()
    res, out, err = run(oip, "%context", capsys)
    assert res.error_in_exec is None, err
    assert out.startswith("Context — session 'default', model ref-model")
    rows = (("System prompt", "system"), ("Tool definitions", "tools"), ("Summary", "summary"),
            ("Session memory", "memory"), ("Pinned", "pins"), ("Messages", "messages"), ("Free space", "free"))
    for label, key in rows:
        assert f"{label:<18} {occ['breakdown'][key]:>9,}" in out, label
    assert f"{'Total':<18} {occ['total']:>9,} / 2,000 tokens ({100 * occ['ratio']:.1f}%)" in out
    assert occ["calibrated"]  # the server counts differently from the estimate: rows are scaled
    n = occ["calibration_samples"]
    assert n >= 1 and ocw.current_session().metadata["calibration"]["samples"] == n  # issue 23: what it rests on
    assert (f"Basis: measured (measured ÷ estimated = {occ['calibration']:.2f}, {n} samples; the rows are scaled to "
            "add up to the total); Encoding: cl100k_base (estimate)") in out
    # Every figure agrees: the rows add up to the total, the percents to 100.0 %.
    assert sum(occ["breakdown"][k] for k in ("system", "tools", "summary", "memory", "pins", "messages")) == occ["total"]
    shown = [float(ln.rsplit(None, 1)[-1].rstrip("%")) for ln in out.splitlines()[1:1 + len(rows)]]
    assert round(sum(shown), 1) == 100.0
    assert "Compactions: 0" in out
    # After a compaction: the estimate, and the count.
    srv.script(text="Summary: garden.")
    run(oip, "%compact", capsys)
    res, out, err = run(oip, "%context --text", capsys)
    occ = s.occupancy()
    assert f"{'Total':<18} {occ['total']:>9,} / 2,000" in out
    assert "Basis: estimated; Encoding: cl100k_base (estimate)" in out and "Compactions: 1" in out
    assert f"{'Summary':<18} {occ['breakdown']['summary']:>9,}" in out and occ["breakdown"]["summary"] > 0


# -- secrets ------------------------------------------------------------------------------

SECRET = "sk-test-SECRET-abc123456"


def test_a_real_looking_key_appears_nowhere(openai_env, monkeypatch, ocw_env, ip, caplog, capsys):
    srv = openai_env
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)  # everything any library logs
    seen = []
    three_long_turns(ip, srv, capsys)
    srv.script(text="Summary: garden.")
    for cell in ("%compact", "%context", "%ocw doctor", "%sessions", "%config Ocw", "%config Ocw.api_key",
                 "import ocw; print(ocw.config()); ocw.config()"):
        res, out, err = run(ip, cell, capsys)
        seen += [out, err]
    srv.script(status=401)
    srv.script(stream_error={"type": "authentication_error", "message": f"bad key {SECRET}"})
    for _ in range(2):
        res, out, err = run(ip, "%%chat\nhello", capsys)
        assert isinstance(res.error_in_exec, UsageError)
        seen += [out, err, str(res.error_in_exec)]
    assert srv.requests[0].auth and len(srv.summary_requests()) == 1
    ip.run_line_magic("unload_ext", "ocw")  # close (and checkpoint) the file

    text = "\n".join(seen) + caplog.text + "\n".join(repr(r.args) + r.getMessage() for r in caplog.records)
    assert "HTTP 401" in text and "<redacted>" in text  # the key was there to scrub
    assert SECRET not in text
    files = [p for p in Path(ocw_env).parent.iterdir() if p.name.startswith(Path(ocw_env).name)]
    assert files and sum(p.stat().st_size for p in files) > 0
    for p in files:
        assert SECRET.encode() not in p.read_bytes(), p


# -- process exit --------------------------------------------------------------------------


def test_the_database_is_closed_before_the_interpreter_exits(ocw_env, monkeypatch):
    """Left to the interpreter's teardown, the DuckDB file's idle-release thread could be
    closing it while the process exits, and the process aborted ("terminate called
    after throwing an instance of ''", exit code 134) in about half the runs of a
    script that exits right after a %%chat. The runtime closes the file at exit."""
    import ocw.notebook.runtime

    registered = []
    monkeypatch.setattr(ocw.notebook.runtime.atexit, "register", lambda f: registered.append(f))
    monkeypatch.setattr(ocw.notebook.runtime.atexit, "unregister",
                        lambda f: registered.__setitem__(slice(None), [g for g in registered if g != f]))
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ocw")
    try:
        rt = ocw.notebook.magics.get_runtime()
        hooks = [f for f in registered if getattr(f, "__self__", None) is rt]
        assert len(hooks) == 1
        shell.run_line_magic("sessions", "")
        db = rt.store.db
        assert db._con is not None  # held through the burst, released later
        hooks[0]()  # what the interpreter runs at exit
        assert db._con is None and rt._store is None
        assert not [f for f in registered if getattr(f, "__self__", None) is rt]  # and only once
    finally:
        shell.run_line_magic("unload_ext", "ocw")


def test_exiting_right_after_a_turn_does_not_abort(tmp_path):
    script = tmp_path / "exit_after_turn.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        os.environ["OCW_DB"] = sys.argv[1]
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "ocw")
        ip.run_cell("%%chat\\nhello")
        print("done")
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCW_")}
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / f"db{i}.duckdb")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and "done" in out and "terminate called" not in err, (p.returncode, err[-500:])


def test_help_and_the_slash_menu_read_the_one_command_table(ip, capsys):
    from ocw.notebook.commands import COMMANDS, slash_menu

    run(ip, "%config Ocw.lang = 'zh'", capsys)
    res, out, err = run(ip, "%ocw help", capsys)
    assert "立即把较早的对话折叠进滚动摘要" in out  # the table's Chinese text
    names = [m["name"] for m in slash_menu("en")]
    # The seed's slash commands, in the table's order, /clear as another name for /new.
    assert names == ["compact", "summary", "context", "rewind", "branch", "new", "clear", "sessions", "export",
                     "session", "pin", "pins", "unpin", "memory", "help", "doctor"]
    # Every one runs on selection or Enter but those that need their argument (the menu fills the prefix).
    assert [m["name"] for m in slash_menu("en") if m["required"]] == ["session", "pin", "unpin"]
    assert {c.name for c in COMMANDS if not c.slash} == {"chat", "chat-widget", "tools", "allow-code", "deny-code",
                                                          "retry-save", "commands", "run"}


def test_ocw_help_in_a_notebook_is_a_table_whose_usages_never_break(ip):
    """JupyterLab breaks a long plain-text line anywhere (mid-word): a notebook gets a
    table, each usage on one line (no-break spaces), the help wrapping between words."""
    import html as _html

    from ocw.notebook import actions
    from ocw.notebook.commands import COMMANDS

    for lang in ("en", "zh"):
        ip.run_line_magic("config", f"Ocw.lang = '{lang}'")
        res = actions.run(ocw.notebook.magics.get_runtime(), "help", "", rich=True)
        assert res.text.splitlines() == [ln for ln in res.text.splitlines() if ln]  # the text is still one line each
        cells = re.findall(r"<tr><td><code>(.*?)</code></td><td>(.*?)</td></tr>", res.html)
        assert len(cells) == len(COMMANDS) == 23
        for (usage, helptext), c in zip(cells, COMMANDS):
            assert " " not in usage and _html.unescape(usage) == c.usage.replace(" ", "\u00a0")
            assert _html.unescape(helptext) == c.help[lang]


# -- %ocw's words, the report sent, an interrupt before the reply, loading without widgets ----


def test_ocw_commands_lists_each_added_command_once_after_the_built_ins(ip, capsys):
    """`%ocw commands`: the built-ins, then a notebook's added commands marked by whom; an added
    command a built-in shadows (/compact) is not listed a second time, and the user is told."""
    from ocw.notebook import user_commands
    from ocw.notebook.commands import slash_menu

    user_commands.clear()
    try:
        res = ip.run_cell(textwrap.dedent('''
            import ocw

            @ocw.command("hello", help="say hello", args="[NAME]")
            def hello(line):
                return "hello " + (line or "world")

            @ocw.command("compact", help="my own compact")
            def compact():
                return "mine"
            '''))
        assert res.error_in_exec is None, res.error_in_exec
        told = capsys.readouterr().err  # said once, by the cell that added it
        assert ("/compact is a built-in command: the built-in runs, not the /compact added by this notebook."
                in told)
        res, out, err = run(ip, "%ocw commands", capsys)
        assert res.error_in_exec is None, err
        table = out.splitlines()
        assert [ln.split()[0] for ln in table] == [f"/{e['name']}" for e in slash_menu("en")] + ["/hello"]
        assert table[-1].startswith("/hello [NAME]") and table[-1].endswith("say hello [added by this notebook]")
        assert [ln for ln in table if ln.startswith("/compact ")][0].endswith("[built in]")
        assert "my own compact" not in out
        # A menu made from any list of added commands names each once: the first of a name stays.
        hello, again = user_commands.get("hello"), user_commands.UserCommand("hello", print, "again", "", False, "pkg")
        menu = slash_menu("en", [hello, again])
        assert [e["name"] for e in menu].count("hello") == 1 and menu[-1]["help"] == "say hello"
    finally:
        user_commands.clear()


def test_an_ocw_subcommand_without_arguments_refuses_extra_words(ip, capsys):
    """`%ocw help now` is a typing mistake said in one line; doctor, run and export take words."""
    for cell, got in (("%ocw help now", "'now'"), ("%ocw tools --all", "'--all'"), ("%ocw retry-save x", "'x'")):
        res, out, err = run(ip, cell, capsys)
        word = cell.split()[1]
        assert one_line_usage_error(res, err, out) == (f"UsageError: %ocw {word} takes no further arguments "
                                                       f"(got {got}); try %ocw help")
    res, out, err = run(ip, "%ocw doctor --send", capsys)  # a word doctor takes: no session yet, said so
    assert res.error_in_exec is None and out.strip() == MESSAGES["en"]["no_session"]


def test_doctor_send_sends_the_report_to_the_model_as_a_turn(oip, openai_env, capsys):
    """`%ocw doctor --send`: the report (no key in it) is the user message of a normal turn,
    streamed below and stored."""
    srv = openai_env
    chat(oip, "hello", capsys)
    s = session()
    before = len(s.branch())
    srv.script(text="Your setup looks fine.")
    res, out, err = run(oip, "%ocw doctor --send", capsys)
    assert res.error_in_exec is None, err
    sent = srv.requests[-1].messages[-1]
    assert sent["role"] == "user" and "provider:      openai" in str(sent["content"])
    assert DUMMY_KEY not in str(srv.requests[-1].messages)
    assert out.rstrip().endswith("Your setup looks fine.")
    s.sync()
    assert len(s.branch()) == before + 2 and s.node(s.head)["role"] == "assistant"


def _interrupt_at_the_window_note(monkeypatch):
    """Ctrl-C while the cell shows the server's window note: before the turn began."""
    def on_system(self, text):
        raise KeyboardInterrupt

    monkeypatch.setattr(ocw.notebook.streaming.StreamView, "on_system", on_system)


NOTHING_SAVED = "UsageError: Interrupted: nothing of this turn was saved; run the cell again to resend it."


def test_an_interrupt_before_the_turn_began_says_nothing_was_saved(oip, refserver, monkeypatch, capsys):
    """Stopped while the server's window (1,024 of the configured 2,000) is announced: no
    tool step ran, and the line says nothing was saved — for %%chat and %ocw doctor --send."""
    refserver.reported_window = 1024
    _interrupt_at_the_window_note(monkeypatch)
    res, out, err = run(oip, "%%chat\nhello", capsys)
    assert one_line_usage_error(res, err, out) == NOTHING_SAVED
    assert not refserver.requests


def test_an_interrupted_doctor_send_says_nothing_was_saved(oip, refserver, monkeypatch, capsys):
    refserver.reported_window = 1024
    assert run(oip, "%new --name checkup", capsys)[0].error_in_exec is None  # a session, its window not asked yet
    _interrupt_at_the_window_note(monkeypatch)
    res, out, err = run(oip, "%ocw doctor --send", capsys)
    assert one_line_usage_error(res, err, out) == NOTHING_SAVED
    assert not refserver.requests and session().head is None


def test_loaded_without_widgets_the_widget_commands_say_so_in_one_line(ocw_env, capsys):
    """ocw's magics registered without a widget builder (`load_ipython_extension(shell)`):
    `%chat` says widgets are not available here, in one line; the other commands work."""
    from IPython.core.interactiveshell import InteractiveShell

    import conftest

    shell = InteractiveShell.instance()
    conftest._reset_ocw(shell)
    ocw.notebook.magics.load_ipython_extension(shell)
    try:
        res, out, err = run(shell, "%chat", capsys)
        assert one_line_usage_error(res, err, out) == ("UsageError: widgets are not available here — "
                                                       "load ocw with %load_ext ocw")
        assert run(shell, "%%chat\nhello", capsys)[0].error_in_exec is None
    finally:
        conftest._reset_ocw(shell)


def test_unloading_takes_back_the_error_hook_and_closes_the_servers_connection(oip, openai_env, capsys):
    """`%unload_ext ocw` leaves nothing of ocw running: its post_run_cell hook is gone and the
    provider's keep-alive connection to the server is closed."""
    from ocw.notebook.references import ErrorMemory

    def hooks():
        return [f for f in oip.events.callbacks["post_run_cell"] if isinstance(f, ErrorMemory)]

    assert len(hooks()) == 1
    chat(oip, "hello", capsys)
    assert openai_env.open_connections >= 1
    assert run(oip, "%unload_ext ocw", capsys)[0].error_in_exec is None
    assert hooks() == []
    assert openai_env.wait_closed(3.0), f"{openai_env.open_connections} connection(s) left open"
    assert run(oip, "%load_ext ocw", capsys)[0].error_in_exec is None and len(hooks()) == 1


def test_the_quiet_status_line_follows_its_option(oip, openai_env, capsys):
    """After each reply one quiet line with the context figure; `Ocw.status_line = False` drops it."""
    openai_env.script(text="First reply.")
    out = chat(oip, "hello", capsys)
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("context ") and "/ 2,000 · auto-compact at 80 % · 0 compactions" in last
    run(oip, "%config Ocw.status_line = False", capsys)
    openai_env.script(text="Second reply.")
    out = chat(oip, "again", capsys)
    assert out.rstrip().splitlines()[-1].endswith("Second reply.") and "auto-compact at" not in out


def test_a_bad_environment_value_is_refused_by_name_at_the_next_command(ip, monkeypatch, capsys):
    """An OCW_* variable set wrong after %load_ext is refused, by name, at the next command
    of any kind (not only when its option is first read); fixed, the command works again."""
    monkeypatch.setenv("OCW_DEBUG", "maybe")
    res, out, err = run(ip, "%ocw help", capsys)
    assert one_line_usage_error(res, err, out).startswith("UsageError: OCW_DEBUG='maybe' is neither on nor off")
    monkeypatch.setenv("OCW_DEBUG", "0")
    res, out, err = run(ip, "%ocw help", capsys)
    assert res.error_in_exec is None and out.startswith("%%chat ")


# -- the actions' own words -----------------------------------------------------------------


def test_commands_that_take_no_words_refuse_them_in_one_line(ip, capsys):
    for cell, name, word in (("%chat now", "%chat", "now"), ("%pins 3", "%pins", "3")):
        res, out, err = run(ip, cell, capsys)
        assert one_line_usage_error(res, err, out) == f"UsageError: {name} takes no arguments (got {word!r})."
    assert run(ip, "%pins", capsys)[0].error_in_exec is None


def test_a_quoted_session_name_is_the_name_typed(ip, capsys):
    """`--session 'my notes'` (IPython keeps the quotes) names the session my notes; a
    name with one quote, or none, is kept as typed."""
    for option, name in (("'my notes'", "my notes"), ('"q"', "q"), ("plain", "plain"), ("it's", "it's")):
        chat(ip, "hello", capsys, f"--session {option}")
        assert session().name == name, option


def test_ocw_run_runs_an_added_command_with_its_words_and_refuses_no_name(ip, capsys):
    from ocw.notebook import user_commands

    user_commands.clear()
    try:
        res = ip.run_cell('import ocw\n@ocw.command("hello")\ndef hello(line):\n    return "hello " + line')
        assert res.error_in_exec is None
        capsys.readouterr()
        res, out, err = run(ip, "%ocw run hello big world", capsys)
        assert res.error_in_exec is None and out == "hello big world\n"
        res, out, err = run(ip, "%ocw run /hello you", capsys)  # typed as in the chat widget
        assert out == "hello you\n"
        res, out, err = run(ip, "%ocw run", capsys)
        assert one_line_usage_error(res, err, out).startswith(
            "UsageError: %ocw run takes a command's name and its arguments, e.g. %ocw run hello world")
        res, out, err = run(ip, "%ocw run run hello", capsys)
        assert one_line_usage_error(res, err, out).startswith("UsageError: %ocw run runs another command")
    finally:
        user_commands.clear()


def test_allow_code_offers_run_python_for_the_session_and_deny_code_takes_it_back(ip, capsys):
    res, out, err = run(ip, "%ocw allow-code", capsys)
    assert out.startswith("Code execution is ON for session 'default': the model can call run_python")
    res, out, err = run(ip, "%ocw tools", capsys)
    assert "  run_python(" in out and "Code execution is ON for session 'default' (%ocw deny-code)." in out
    res, out, err = run(ip, "%ocw deny-code", capsys)
    assert out.strip() == "Code execution is off for session 'default'."
    res, out, err = run(ip, "%ocw tools", capsys)
    assert "run_python" not in out and "Code execution is ON" not in out


def test_compact_undo_says_what_it_undid_and_takes_nothing_else(oip, openai_env, capsys):
    srv = openai_env
    three_long_turns(oip, srv, capsys)
    srv.script(text="Summary: garden.")
    res, out, err = run(oip, "%compact", capsys)
    assert res.error_in_exec is None and session().compaction_count == 1, err
    for cell in ("%compact --undo now", "%compact --undo -- keep the plan"):
        res, out, err = run(oip, cell, capsys)
        assert one_line_usage_error(res, err, out) == (
            "UsageError: %compact --undo takes nothing else: it undoes the active compaction.")
    assert session().active_summary() is not None  # still compacted
    res, out, err = run(oip, "%compact --undo", capsys)
    assert res.error_in_exec is None, err
    assert out.startswith("Undid compaction ") and "no summary is active now, the whole branch is read again" in out
    assert session().active_summary() is None


def test_context_text_in_a_notebook_is_the_table_and_without_it_the_widget(ip, capsys):
    from ocw.notebook import actions

    chat(ip, "hello", capsys)
    rt = ocw.notebook.magics.get_runtime()
    table = actions.run(rt, "context", "--text", rich=True)
    assert table.widget is None and table.text.startswith("Context — session 'default'")
    ring = actions.run(rt, "context", "", rich=True)
    assert ring.widget is not None and ring.widget.session_id == session().id


def test_a_pin_records_whether_it_came_from_a_variable(ip, capsys):
    """`%pin {x}` is x's value, recorded as from {x}; `%pin {}` and other text are text (the
    rows the chat widget's pin list is drawn from, stored with the session)."""
    from ocw.notebook import actions

    ip.run_cell("x = 5")
    for cell in ("%pin {}", "%pin {x}", "%pin keep {x} in mind"):
        assert run(ip, cell, capsys)[0].error_in_exec is None, cell
    rows = actions.run(ocw.notebook.magics.get_runtime(), "pins", "").data["pins"]
    assert [(r["text"], r["source"]) for r in rows] == [("{}", "text"), ("5", "{x}"), ("keep 5 in mind", "text")]


def test_a_mistyped_option_names_the_command_and_its_usage(ip, capsys):
    """Every command that takes options says, in its one line, which command and what to type."""
    for cell, usage in (("%context --txt", "%context [--text]"), ("%summary --every", "%summary [--all]"),
                        ("%memory --forgot 2", "%memory [--all] [--forget N]")):
        res, out, err = run(ip, cell, capsys)
        line = one_line_usage_error(res, err, out)
        assert line.startswith(f"UsageError: {cell.split()[0]}: ") and line.endswith(f"(usage: {usage})"), line


def test_the_words_a_command_is_given_are_checked(ip, capsys):
    """`%compact --` with nothing after it, `%session` with no name, `%ocw doctor` with a word it
    does not take, `%unpin` with no number: each one line that says what to type; the right
    words work."""
    chat(ip, "hello", capsys)
    s = session()
    for cell, said in (
            ("%compact --", "UsageError: Nothing after --: write what the summary must keep, e.g. "
                            "%compact -- keep the list of file paths"),
            ("%session", "UsageError: %session takes the name or id of a stored session (see %sessions)."),
            ("%session  ''", "UsageError: %session takes the name or id of a stored session (see %sessions)."),
            ("%ocw doctor --sent", "UsageError: %ocw doctor takes only --send (got '--sent'): %ocw doctor [--send]"),
            ("%unpin", "UsageError: %unpin takes the number %pins shows, e.g. %unpin 1.")):
        res, out, err = run(ip, cell, capsys)
        assert one_line_usage_error(res, err, out) == said, cell
    res, out, err = run(ip, f"%session {s.name}", capsys)
    assert out.startswith(f"Session 'default' ({s.id}) is current: 2 messages on its branch")
    run(ip, "%pin the amounts are in cents", capsys)
    res, out, err = run(ip, "%unpin 1", capsys)
    assert res.error_in_exec is None and out.startswith("Unpinned 1"), out


def test_a_command_run_without_words_is_run_as_typed_bare(ip, capsys):
    """`actions.run(rt, name)` — what the chat widget sends for `/pins` or `/doctor` — runs the
    command with no words, as `%pins` does."""
    from ocw.notebook import actions

    chat(ip, "hello", capsys)
    rt = ocw.notebook.magics.get_runtime()
    assert actions.run(rt, "pins").text == run(ip, "%pins", capsys)[1].rstrip("\n")
    assert actions.run(rt, "doctor").text.startswith("ocw doctor")
