"""Issue 15: the chat widget's kernel side, in a real IPython shell on a real DuckDB file.

Requests go through anywidget's own command dispatch (`_handle_custom_msg` with an
"anywidget-command" message, the answer captured where the widget sends it), so what is
tested is what the browser gets. Replies come from the offline model or the loopback
server (tests/refserver.py). The browser side is tested in js/test/chat.test.js and, in a
real JupyterLab, in tests/widgets/test_browser_chat.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import ipywidgets
import pytest
from anywidget.experimental import _ANYWIDGET_COMMANDS

import ocw
import ocw.widgets.chat_requests as chat_requests_module
from ocw.notebook.items import branch_items, message_items, summary_items, time_label
from ocw.widgets.chat import ChatWidget
from ocw.notebook.commands import COMMANDS, slash_menu
from ocw.text.errors import InvalidArgument, OcwError
from ocw.notebook.magics import get_runtime
from ocw.text.safe_html import markdown_html
from ocw.widgets.ring import ContextWidget

ROOT = Path(__file__).resolve().parents[2]
TURN = "the loader reads events.parquet, joins the orders table and retries after 30 s timeouts. " * 12


def invoke(w, name: str, msg: dict, _monkeypatch=None) -> dict:
    """One request as the browser makes it (experimental.invoke): the answer the widget sends."""
    sent = []
    outer = w.__dict__.get("send")  # a request made while another one runs (nested)
    w.send = lambda content, buffers=None: sent.append(content)
    try:
        w._handle_custom_msg({"id": "req-1", "kind": "anywidget-command", "name": name, "msg": msg}, [])
    finally:
        if outer is None:
            del w.send
        else:
            w.send = outer
    assert len(sent) == 1, f"{name} must answer exactly once, sent {sent!r}"
    assert sent[0]["id"] == "req-1" and sent[0]["kind"] == "anywidget-command-response"
    return sent[0]["response"]


def chat(ip, text: str) -> None:
    res = ip.run_cell(f"%%chat\n{text}")
    assert res.error_in_exec is None, res.error_in_exec


def turns(ip, n: int, first: int = 1) -> None:
    for i in range(first, first + n):
        chat(ip, f"Turn {i}: {TURN}")


@pytest.fixture
def small(ip):
    """ip with a 6,000-token window and automatic compaction off."""
    ip.run_line_magic("config", "Ocw.context_window = 6000")
    ip.run_line_magic("config", "Ocw.auto_compact = 0")
    return ip


# -- the one command table, the commands' names ------------------------------------------------
def test_requests_are_commands_named_apart_from_the_widgets_methods():
    """anywidget answers through widget.send: a command named `send` shadowed it once and
    no answer ever reached the browser. The JS calls exactly the commands Python has."""
    commands = set(getattr(ChatWidget, _ANYWIDGET_COMMANDS))
    assert commands == {"chat_send", "chat_run", "chat_rewind", "chat_branch", "chat_older", "chat_pin", "chat_snapshot"}
    assert not commands & set(dir(ipywidgets.DOMWidget))
    js = (ROOT / "widgets" / "chat.js").read_text(encoding="utf-8")
    # request("chat_older", …) or busyRequest(what, "chat_send", …)
    assert set(re.findall(r'(?:\brequest\(|\bbusyRequest\([^,()]+, )"(\w+)"', js)) == commands


def test_the_js_tests_use_pythons_slash_menu():
    copy = json.loads((ROOT / "js" / "test" / "slash_menu.json").read_text(encoding="utf-8"))
    assert copy == slash_menu("en"), (
        "js/test/slash_menu.json differs from ocw.notebook.commands.slash_menu('en'); regenerate it with: "
        ".venv/bin/python -c \"import json; from ocw.notebook.commands import slash_menu; "
        "print(json.dumps(slash_menu('en'), ensure_ascii=False, indent=2))\" > js/test/slash_menu.json")


def test_every_command_has_one_action_that_its_magic_and_its_slash_command_run(ip):
    from ocw.notebook.actions import ACTIONS

    # %%chat streams a turn (a cell magic, not a slash command); every other command is an action.
    assert set(ACTIONS) == {c.name for c in COMMANDS} - {"chat"}
    assert not BY("chat").slash
    magics = ip.magics_manager.magics
    for c in COMMANDS:
        word = c.usage.split()[0]
        kind, name = ("cell", word[2:]) if word.startswith("%%") else ("line", word[1:])
        assert name in magics[kind], f"{c.name}: {word} is not a {kind} magic"
    # A slash command runs in the widget as its action: /doctor says what %ocw doctor says.
    assert ACTIONS["doctor"].__doc__.startswith("%ocw doctor")
    # Which commands need a session (the widget says "Start a conversation first" for them).
    assert {m["name"] for m in slash_menu("en") if m["needs_session"]} == {"compact", "summary", "rewind", "branch",
                                                                        "export"}


def BY(name):
    return next(c for c in COMMANDS if c.name == name)


# -- opening it --------------------------------------------------------------------------------
def test_chat_magic_and_ocw_chat_open_one_widget_with_its_ring(ip, capsys):
    res = ip.run_cell("%chat")
    assert res.error_in_exec is None
    assert capsys.readouterr().out.strip() == "<ocw chat: no session>"  # a terminal shows the text repr
    chat(ip, "hello there")
    w = ocw.chat()
    rt = get_runtime()
    assert isinstance(w, ChatWidget) and w in rt.widgets
    assert isinstance(w.ring, ContextWidget) and w.ring in rt.widgets
    assert w.ring.session_id == w.session_id == ocw.current_session().id
    assert w.get_state()["ring"] == f"anywidget:{w.ring.model_id}"  # what host.getWidget resolves
    assert repr(w) == "<ocw chat: default, 2 messages on the branch>"
    assert w._repr_mimebundle_()[0]["text/plain"] == repr(w)
    # A saved notebook shows the snapshot: the session's name, or "no session" without one.
    assert "<b>ocw chat</b> · default" in w._repr_mimebundle_()[0]["text/html"]
    empty = ChatWidget(rt)
    try:
        assert "<b>ocw chat</b> · no session" in empty._repr_mimebundle_()[0]["text/html"]
    finally:
        empty.close()
    res = ip.run_cell("%chat now")
    assert "%chat takes no arguments" in str(res.error_in_exec)
    w.close()
    assert w.ring.comm is None  # closed with it


def test_ocw_chat_before_load_ext_says_what_to_do(ocw_env):
    import ocw.notebook.magics

    saved = dict(ocw.notebook.magics._state)
    ocw.notebook.magics._state.clear()
    try:
        with pytest.raises(OcwError) as err:
            ocw.chat()
        assert err.value.user_message() == "ocw is not loaded — run %load_ext ocw first"
    finally:
        ocw.notebook.magics._state.update(saved)


# -- sending -----------------------------------------------------------------------------------
def test_a_message_goes_the_chat_path_and_streams_as_sanitized_html(oip, refserver, monkeypatch):
    chat(oip, "first")
    w = ocw.chat()
    seen = []
    w.observe(lambda ch: seen.append(ch["new"]), names=["streaming"])
    pending = []
    w.observe(lambda ch: pending.append(ch["new"]), names=["pending"])
    reply = "Here is **bold** and <script>alert(1)</script> " + "more words keep coming " * 20
    refserver.script(text=reply, chunk_delay=0.02)
    answer = invoke(w, "chat_send", {"text": "tell me <b>more</b>"}, monkeypatch)
    assert answer == {"ok": True, "head": ocw.current_session().head}
    frames = [s for s in seen if s]
    assert len(frames) >= 3, frames  # it streamed: re-rendered as it arrived
    # Each frame is the %%chat renderer's output for the reply so far, and nothing else.
    renders = {markdown_html(reply[:k]): k for k in range(1, len(reply) + 1)}
    lengths = [renders.get(f) for f in frames]
    assert None not in lengths, [f for f in frames if f not in renders][:1]
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0]
    assert not any("<script" in f for f in frames)
    assert pending[0] == "tell me <b>more</b>" and pending[-1] == "" and seen[-1] == ""
    assert w.busy == "" and w.stream_steps == []
    # Stored as %%chat stores it: user text plain, the reply as the kernel's sanitized HTML.
    user, assistant = w.messages[-2:]
    assert user["role"] == "user" and user["text"] == "tell me <b>more</b>" and "html" not in user
    assert assistant["html"] == markdown_html(reply) and "<strong>bold</strong>" in assistant["html"]
    assert "<script" not in assistant["html"]
    assert refserver.requests[-1].messages[-1]["content"] in ("tell me <b>more</b>",
                                                              [{"type": "text", "text": "tell me <b>more</b>"}])


def test_a_turn_with_tool_calls_keeps_the_text_said_before_each_call_above_it(oip, refserver, monkeypatch):
    """While a turn runs, its finished steps are shown in order: the text the model wrote
    before a tool call, then the call; a call with no text before it adds no empty step."""
    chat(oip, "first")
    oip.run_cell("import ocw\n@ocw.tool\ndef ping() -> str:\n    'Answer pong.'\n    return 'pong'")
    try:
        w = ocw.chat()
        seen = []
        w.observe(lambda ch: seen.append(ch["new"]), names=["stream_steps"])
        refserver.script(text="Let me **check** first.", tool_calls=[{"name": "ping", "input": {}}])
        refserver.script(tool_calls=[{"name": "ping", "input": {}}])
        refserver.script(text="Both said pong.")
        assert invoke(w, "chat_send", {"text": "ping twice"}, monkeypatch)["ok"] is True
    finally:
        ocw.conversation.tools._REGISTERED.pop("ping", None)  # no tool definition left for later tests
    steps = [x for x in seen if x]
    assert [[next(iter(step)) for step in x] for x in steps] == [["html", "tool"], ["html", "tool", "tool"]]
    assert steps[-1][0] == {"html": markdown_html("Let me **check** first.")}
    assert [(t["tool"]["name"], t["tool"]["status"], t["tool"]["result"]) for t in steps[-1][1:]] == \
        [("ping", "ok", "pong")] * 2
    assert seen[-1] == [] and w.messages[-1]["html"] == markdown_html("Both said pong.")


def test_a_chat_widget_made_without_a_ring_has_none(ip):
    """`ChatWidget(runtime)`: the ring is optional (a caller that shows its own) — None, not an error."""
    chat(ip, "hello")
    w = ChatWidget(get_runtime(), session=ocw.current_session())
    try:
        assert w.ring is None and w.get_state()["ring"] is None
        assert [m["role"] for m in w.messages] == ["user", "assistant"]
    finally:
        w.close()


def test_the_whole_reply_is_shown_before_the_turn_ends_when_its_last_piece_came_between_renders(
        oip, refserver, monkeypatch):
    """The throttle skips pieces; the turn's end renders the whole reply once more, so the
    live reply is complete (and the stored message repeats what the browser holds)."""
    import types

    chat(oip, "first")
    w = ocw.chat()
    # A clock that stands still: after the first piece (shown at once) every piece falls between renders.
    monkeypatch.setattr(chat_requests_module, "time", types.SimpleNamespace(monotonic=lambda: 100.0))
    seen = []
    w.observe(lambda ch: seen.append(ch["new"]), names=["streaming"])
    reply = "The loader **retries** after 30 s. " + "It joins the orders table. " * 8
    refserver.script(text=reply)
    assert invoke(w, "chat_send", {"text": "what does the loader do?"}, monkeypatch)["ok"] is True
    frames = [f for f in seen if f]
    assert len(frames) == 2 and frames[0] != frames[1]  # the first piece, then the whole reply
    assert frames[-1] == markdown_html(reply) and seen[-1] == ""
    assert w.messages[-1]["html"] == markdown_html(reply)


def test_the_stream_is_throttled_like_chat_cells(monkeypatch):
    """The first piece shows at once; then at most one render per 50 ms, and at least four
    times the last render's cost apart (ocw.notebook.streaming.StreamView's rule)."""
    clock = [100.0]
    monkeypatch.setattr(chat_requests_module.time, "monotonic", lambda: clock[0])
    renders = []

    class W:
        streaming = ""

    w = W()
    stream = chat_requests_module._Stream(w)

    def render(text):
        renders.append(text)
        clock[0] += 0.02  # each render costs 20 ms
        return f"<p>{text}</p>"

    stream.render = render
    stream.on_text("a")  # t=100: at once
    clock[0] += 0.001
    stream.on_text("b")  # 1 ms later: skipped
    clock[0] += 0.05
    stream.on_text("c")  # 51 ms after the last render, but under 4 × 20 ms: skipped
    clock[0] += 0.03
    stream.on_text("d")  # 81 ms > 80 ms: rendered, with all the text so far
    assert renders == ["a", "abcd"]
    assert w.streaming == "<p>abcd</p>"


def test_sending_while_a_turn_runs_is_refused_and_nothing_is_lost(oip, refserver, monkeypatch):
    chat(oip, "first")
    w = ocw.chat()
    answers = []
    sent = {"n": 0}
    rt = get_runtime()
    real_chat = rt.chat

    def chat_that_gets_a_second_request(text, **kw):
        sent["n"] += 1
        # The browser refuses this itself; a second view of the same widget could still ask.
        answers.append(invoke(w, "chat_send", {"text": "second"}, monkeypatch))
        answers.append(invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch))
        return real_chat(text, **kw)

    monkeypatch.setattr(rt, "chat", chat_that_gets_a_second_request)
    answer = invoke(w, "chat_send", {"text": "one"}, monkeypatch)
    assert answer["ok"] is True and sent["n"] == 1
    refused = "A reply or command is still running; your text is kept. Send it when it has finished."
    assert answers == [{"ok": False, "error": refused}, {"ok": False, "error": refused}]
    assert [m.get("text") for m in w.messages if m["role"] == "user"] == ["first\n", "one"]  # a cell ends with \n



def test_a_message_sent_while_compact_runs_is_refused_and_nothing_else_runs(small, monkeypatch):
    """/compact runs: a message from a second view of the widget is refused with the one
    line, stored nowhere, and no turn runs beside the compaction."""
    turns(small, 6)
    w = ocw.chat()
    s = ocw.current_session()
    provider = s.provider
    real = provider.complete
    answers = []

    def summarizer_that_gets_a_message(*a, **k):
        answers.append(invoke(w, "chat_send", {"text": "sent during the compaction"}))
        return real(*a, **k)

    monkeypatch.setattr(provider, "complete", summarizer_that_gets_a_message)
    users = [m.get("text") for m in w.messages if m["role"] == "user"]
    answer = invoke(w, "chat_run", {"name": "compact", "args": ""})
    assert answer["ok"] is True and s.compaction_count == 1
    refused = "A reply or command is still running; your text is kept. Send it when it has finished."
    assert answers == [{"ok": False, "error": refused}]
    assert [m.get("text") for m in w.messages if m["role"] == "user"] == users
    assert not any("sent during the compaction" in str(m["content"]) for m in s.rendered_history())
    assert (w.pending, w.busy) == ("", "")


def test_a_request_for_a_command_the_widget_lacks_is_answered_not_left_waiting(small):
    turns(small, 1)
    w = ocw.chat()
    assert invoke(w, "nope", {}) == {"ok": False, "error": "the chat widget has no command 'nope'"}
    long = "x" * 200
    assert invoke(w, long, {}) == {"ok": False, "error": f"the chat widget has no command {long[:80]!r}"}
    assert invoke(w, "send", {"text": "hi"}) == {"ok": False, "error": "the chat widget has no command 'send'"}
    sent = []
    w.send = lambda content, buffers=None: sent.append(content)
    try:
        w._handle_custom_msg({"kind": "something-else", "payload": 1}, [])  # not a request: not answered
        w._handle_custom_msg({"id": "r-2", "name": "nope"}, [])
    finally:
        del w.send
    assert sent == []


def test_busy_is_the_kernels_a_front_end_that_writes_it_is_put_back(small):
    turns(small, 1)
    w = ocw.chat()
    w.busy = "send"  # as a browser's model.set would
    assert w.busy == ""

def test_a_closed_chat_stops_listening_to_the_session(small):
    turns(small, 1)
    s = ocw.current_session()
    before = len(s.events._listeners)
    w = ocw.chat()
    assert len(s.events._listeners) > before  # the chat and its ring follow the session
    w.close()
    assert len(s.events._listeners) == before

def test_a_failed_send_answers_with_the_error_and_stores_nothing(oip, refserver, monkeypatch):
    chat(oip, "first")
    w = ocw.chat()
    before = list(ocw.current_session().branch())
    refserver.script(status=401)
    n = len(refserver.requests)
    answer = invoke(w, "chat_send", {"text": "will fail"}, monkeypatch)
    assert answer["ok"] is False and "401" in answer["error"] or "key" in answer["error"].lower(), answer
    assert len(refserver.requests) == n + 1  # asked once, not retried
    assert ocw.current_session().branch() == before
    assert (w.pending, w.streaming, w.busy) == ("", "", "")
    for bad in ({"text": ""}, {"text": "   "}, {"text": 3}, {}):
        answer = invoke(w, "chat_send", bad, monkeypatch)
        assert answer == {"ok": False, "error": "the message is empty — type a message, then press Enter"}


def test_an_unexpected_exception_still_answers(small, monkeypatch):
    turns(small, 1)
    w = ocw.chat()
    monkeypatch.setattr(get_runtime(), "chat", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    answer = invoke(w, "chat_send", {"text": "x"}, monkeypatch)
    assert answer == {"ok": False, "error": "RuntimeError: boom"}
    assert (w.pending, w.busy) == ("", "")


# -- slash commands ------------------------------------------------------------------------------
def test_compact_from_the_widget_shows_the_four_states_once_each(small, monkeypatch):
    turns(small, 6)
    w = ocw.chat()
    ring_before = w.ring.total
    answer = invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    assert answer["ok"] is True
    assert [n["kind"] for n in w.notes] == ["started", "finished"]
    finished = w.notes[-1]["text"]
    assert re.fullmatch(r"Context compacted: covered \d+ older messages, [\d,]+ → [\d,]+ tokens", finished)
    assert answer["output"] == finished  # what %compact printed, said once (not again as output)
    assert w.ring.total < ring_before and w.ring.compaction_count == 1
    assert finished.endswith(f"{w.ring.total:,} tokens")
    assert w.summary["cover_count"] > 0 and [c["active"] for c in w.capsules] == [True]

    invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    assert [n["kind"] for n in w.notes] == ["started", "finished", "no_op"]
    assert w.notes[-1]["text"] == "Context is already compacted; no older messages to fold."

    turns(small, 2, first=7)
    provider = ocw.current_session().provider
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise RuntimeError("the summarizer is down")

    monkeypatch.setattr(provider, "complete", broken)
    answer = invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    assert answer["ok"] is True  # %compact ran and reported; the failure is its message
    assert [n["kind"] for n in w.notes] == ["started", "finished", "no_op", "started", "failed"]
    assert w.notes[-1]["text"] == "Context compaction failed: the summarizer is down"
    assert len(calls) == 1 and w.ring.compaction_count == 1
    assert all(n["after"] for n in w.notes)


def test_summary_from_the_widget_puts_the_summary_into_the_conversation_as_sanitized_html(small, monkeypatch):
    """/summary returns its result (text and HTML) and the widget shows both: before
    commands returned results, it showed only what a magic printed, and %summary
    displays rich output, so the note never came (issue 21)."""
    turns(small, 6)
    w = ocw.chat()
    invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    before = len(w.notes)
    answer = invoke(w, "chat_run", {"name": "summary", "args": ""}, monkeypatch)
    assert answer["ok"] is True and answer["output"].startswith("Summary n_") and "[active]" in answer["output"]
    assert len(w.notes) == before + 1
    note = w.notes[-1]
    assert note["kind"] == "output" and note["text"] == answer["output"]
    assert note["html"].startswith("<p><strong>Summary n_") and "<blockquote>" in note["html"]
    assert "<script" not in note["html"]
    # A command whose result is plain text carries no html: the browser shows its text.
    invoke(w, "chat_run", {"name": "branch", "args": ""}, monkeypatch)
    assert "html" not in w.notes[-1]


def test_context_text_and_doctor_appear_in_the_conversation_as_in_a_cell(small, monkeypatch, capsys):
    """/context --text and /doctor put the same text into the conversation that their
    magics print in a terminal (issue 24): one Result, shown per surface."""
    from ocw.notebook import actions

    turns(small, 2)
    w = ocw.chat()
    before = len(w.notes)
    answer = invoke(w, "chat_run", {"name": "context", "args": "--text"}, monkeypatch)
    table = actions.run(get_runtime(), "context", "--text").text
    assert answer["ok"] is True and answer["output"] == table.strip() and "Total" in table
    assert w.notes[-1]["kind"] == "output" and w.notes[-1]["text"] == table.strip()
    assert w.ring.panel_open is False  # --text is the table, not the panel
    answer = invoke(w, "chat_run", {"name": "doctor", "args": ""}, monkeypatch)
    doctor = actions.run(get_runtime(), "doctor").text
    assert answer["ok"] is True and w.notes[-1]["text"] == doctor.strip() and len(w.notes) == before + 2
    # Bare /context still opens the ring's panel and adds no note.
    invoke(w, "chat_run", {"name": "context", "args": ""}, monkeypatch)
    assert w.ring.panel_open is True and len(w.notes) == before + 2


def test_with_no_session_a_command_that_needs_one_says_so_and_does_nothing(ip, monkeypatch):
    w = ocw.chat()
    for name in ("compact", "rewind", "branch"):
        answer = invoke(w, "chat_run", {"name": name, "args": ""}, monkeypatch)
        assert answer == {"ok": False, "no_session": True, "error": "Start a conversation first"}
    assert get_runtime().store.sessions() == [] and w.notes == []
    # One that needs none runs: /new starts a session, and the widget follows it.
    answer = invoke(w, "chat_run", {"name": "new", "args": "--name scratch"}, monkeypatch)
    assert answer["ok"] is True and answer["output"].startswith("New session 'scratch'")
    assert w.session_name == "scratch" and w.ring.session_name == "scratch"
    assert [n["kind"] for n in w.notes] == ["output"]


def test_context_opens_the_rings_panel_and_unknown_commands_are_refused(small, monkeypatch):
    turns(small, 1)
    w = ocw.chat()
    assert w.ring.panel_open is False
    assert invoke(w, "chat_run", {"name": "context", "args": ""}, monkeypatch) == {"ok": True}
    assert w.ring.panel_open is True
    for bad in ({"name": "nope"}, {"name": "chat"}, {"name": "tools"}, {"name": 3}, {"name": "compact", "args": 5}):
        answer = invoke(w, "chat_run", bad, monkeypatch)
        assert answer["ok"] is False and "is not a command" in answer["error"], (bad, answer)
    answer = invoke(w, "chat_run", {"name": "compact", "args": "lots"}, monkeypatch)
    assert answer == {"ok": False, "error": "%compact takes a whole number of tokens to keep, e.g. %compact 2000, "
                                            "then optionally -- and what the summary must keep (got 'lots')."}


def test_session_command_and_magic_switch_to_a_stored_session(small, capsys, monkeypatch):
    turns(small, 2)
    small.run_line_magic("new", "--name other")
    w = ocw.chat()
    assert w.session_name == "other" and w.messages == []
    answer = invoke(w, "chat_run", {"name": "session", "args": "default"}, monkeypatch)
    assert answer["ok"] is True and answer["output"].startswith("Session 'default' (s_")
    assert "4 messages on its branch" in answer["output"]
    assert w.session_name == "default" and len(w.messages) == 4
    capsys.readouterr()
    small.run_cell("%session other")
    assert "Session 'other'" in capsys.readouterr().out and w.session_name == "other"
    res = small.run_cell("%session nosuch")
    assert "no session 'nosuch'" in str(res.error_in_exec) and w.session_name == "other"
    res = small.run_cell("%session")
    assert "%session takes the name or id" in str(res.error_in_exec)
    # What was typed is taken as typed: no $variable or {expression} expansion.
    small.user_ns["target"] = "default"
    for typed in ("{target}", "$target", "{__import__('os').getpid()}"):
        answer = invoke(w, "chat_run", {"name": "session", "args": typed}, monkeypatch)
        assert answer["ok"] is False and f"no session {typed!r}" in answer["error"], answer
    assert w.session_name == "other"


def test_a_widget_that_cannot_read_never_breaks_a_cell(small, monkeypatch, caplog):
    turns(small, 1)
    w = ocw.chat()
    before = list(w.messages)
    from ocw.text.errors import StoreBusy
    from ocw.conversation.session import Session

    def busy(self, *a, **k):
        raise StoreBusy("the file is busy")

    monkeypatch.setattr(Session, "page", busy)
    turns(small, 1, first=2)  # the cell itself succeeds
    assert len(ocw.current_session().branch()) == 4
    assert w.messages == before  # the widget keeps its last state
    assert "the chat widget could not read session" in caplog.text
    res = small.run_cell("%new --name fresh")
    assert res.error_in_exec is None and w.session_name == "fresh"


# -- the graph: rewind and branch clicks ---------------------------------------------------------
def test_graph_clicks_run_rewind_and_branch_and_the_next_message_forks(small, monkeypatch, capsys):
    turns(small, 3)
    w = ocw.chat()
    s = ocw.current_session()
    path = s.branch()
    old_leaf = path[-1]
    assert [b["id"] for b in w.branches] == [old_leaf] and w.branches[0]["current"]
    answer = invoke(w, "chat_rewind", {"node_id": path[3]}, monkeypatch)
    assert answer["ok"] is True and re.match(r"Rewound to message 4 \(assistant, \d\d:\d\d\): “.+”\. The next",
                                             answer["output"]), answer["output"]
    assert "n_" not in answer["output"] and w.notes[-1]["text"] == answer["output"]
    assert s.head == path[3] and w.head == path[3] and len(w.messages) == 4
    # HEAD inside the branch: the old leaf forks after message 4.
    other = next(b for b in w.branches if not b["current"])
    assert (other["id"], other["fork_id"], other["fork_depth"], other["first_id"]) == (old_leaf, path[3], 4, path[4])
    assert other["preview"].startswith("Turn 3: the loader reads")
    invoke(w, "chat_send", {"text": "a different third turn"}, monkeypatch)
    assert s.node(s.node(s.head)["parent_id"])["parent_id"] == path[3]  # forked at message 4
    assert len(w.branches) == 2 and sum(b["current"] for b in w.branches) == 1
    current = next(b for b in w.branches if b["current"])
    assert current["id"] == s.head and current["length"] == 6 and current["leaf"]
    answer = invoke(w, "chat_branch", {"node_id": old_leaf}, monkeypatch)
    assert answer["ok"] is True and answer["output"].startswith("Switched to the branch ending at message 6 (assistant, ")
    assert s.head == old_leaf and len(w.messages) == 6
    # %branch in text tells the branches apart the same way.
    capsys.readouterr()
    small.run_line_magic("branch", "")
    out = capsys.readouterr().out
    assert re.search(rf"\* {old_leaf}\s+6 messages  ends with assistant  \d\d:\d\d$", out, re.M), out
    assert re.search(r"^   n_\w+\s+6 messages  ends with assistant  \d\d:\d\d  forks after message 4: "
                     r"“a different third turn”$", out, re.M), out
    for bad in ("n_nope", "x; rm", "", None, "n_" + "a" * 9):
        answer = invoke(w, "chat_rewind", {"node_id": bad}, monkeypatch)
        assert answer["ok"] is False, bad
    # Not an id at all (its third character is no letter or digit): refused before any lookup.
    assert invoke(w, "chat_rewind", {"node_id": "n_!abc"}, monkeypatch)["error"] == "not a message id: 'n_!abc'"
    assert s.head == old_leaf


def test_notes_belong_to_the_branch_they_were_said_on(small, monkeypatch):
    turns(small, 6)
    w = ocw.chat()
    invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    leaf = ocw.current_session().head
    assert [n["kind"] for n in w.notes] == ["started", "finished"]
    invoke(w, "chat_rewind", {"node_id": ocw.current_session().branch()[5]}, monkeypatch)
    assert [n["kind"] for n in w.notes] == ["output"]  # the rewind's own line; the compaction was on the old tip
    invoke(w, "chat_branch", {"node_id": leaf}, monkeypatch)
    # Back on the old tip: its compaction, the rewind's line (said at message 6, on this
    # branch) and the switch's line.
    assert [n["kind"] for n in w.notes] == ["started", "finished", "output", "output"]
    assert w.notes[-1]["text"].startswith("Switched to the branch ending at message ")



def test_notes_are_numbered_from_one_in_the_order_said_and_carry_html_only_when_given(ip):
    """A note is {id, kind, text, after}: ids 1, 2, … in the order said (the browser keys
    each note's element by it), `html` only for a result with HTML (/summary)."""
    chat(ip, "hello")
    w = ocw.chat()
    head = ocw.current_session().head
    w.say("the first line")
    w.say("the second line")
    assert w.notes == [{"id": 1, "kind": "info", "text": "the first line", "after": head},
                       {"id": 2, "kind": "info", "text": "the second line", "after": head}]
    w._note("output", "a summary", html="<p>a summary</p>")
    assert w.notes[-1] == {"id": 3, "kind": "output", "text": "a summary", "after": head, "html": "<p>a summary</p>"}


def test_the_widget_keeps_the_last_fifty_notes_of_a_session(ip):
    chat(ip, "hello")
    w = ocw.chat()
    for i in range(1, 51):
        w.say(f"line {i}")
    assert [n["id"] for n in w.notes] == list(range(1, 51))  # fifty: all kept
    w.say("line 51")
    assert [n["id"] for n in w.notes] == list(range(2, 52)) and w.notes[0]["text"] == "line 2"


def test_a_notice_about_an_added_command_is_an_info_note(ip):
    from ocw.notebook import user_commands

    user_commands.clear()
    try:
        w = ocw.chat()
        ocw.command("context", lambda args: "mine")  # a built-in's name: shadowed, the user told once
        told = [n for n in w.notes if "/context" in n["text"]]
        assert len(told) == 1 and told[0]["kind"] == "info", w.notes
    finally:
        user_commands.clear()


def test_a_command_added_while_the_widget_is_shown_joins_its_slash_menu(ip):
    """ocw.command after the widget is shown: its menu follows (issue 29; the commands'
    own tests are tests/widgets/test_chat_commands.py)."""
    from ocw.notebook import user_commands

    user_commands.clear()
    try:
        w = ocw.chat()
        builtin = [c["name"] for c in w.commands]
        ocw.command("hello", lambda args: f"hello {args}", help="say hello")
        assert [c["name"] for c in w.commands] == builtin + ["hello"]
        user_commands.remove("hello")
        assert [c["name"] for c in w.commands] == builtin
    finally:
        user_commands.clear()


def test_a_summary_of_another_branch_is_not_shown_after_a_rewind(small, monkeypatch):
    """Rewound to before what a compaction covered, and forked there: the chat shows no
    summary capsule of the branch left behind; switching back shows it again."""
    turns(small, 6)
    w = ocw.chat()
    invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    s = ocw.current_session()
    leaf, covered = s.head, w.summary["cover_count"]
    assert covered >= 2 and [c["active"] for c in w.capsules] == [True]
    invoke(w, "chat_rewind", {"node_id": s.branch()[0]}, monkeypatch)  # before the covered range ends
    assert (w.summary, w.capsules) == ({}, [])
    invoke(w, "chat_send", {"text": "a new second question"}, monkeypatch)
    assert (w.summary, w.capsules) == ({}, [])  # the other branch's summary is not this one's
    assert "Summary" not in " ".join(str(m.get("text")) for m in w.messages)
    invoke(w, "chat_branch", {"node_id": leaf}, monkeypatch)
    assert w.summary["cover_count"] == covered and [c["active"] for c in w.capsules] == [True]


# -- reading a long session ----------------------------------------------------------------------
def test_a_long_session_shows_its_tail_and_loads_older_pages(ip, monkeypatch):
    chat(ip, "start")
    s = ocw.current_session()
    s.append_many([(("user" if i % 2 == 0 else "assistant"), f"message {i + 3}") for i in range(98)])
    get_runtime().close()  # a fresh kernel: nothing of the session in memory
    s = ocw.current_session()
    reads = []
    real = s.backend.content
    monkeypatch.setattr(s.backend, "content", lambda sid, nodes: reads.append(len(nodes)) or real(sid, nodes))
    w = ocw.chat()
    assert [m["depth"] for m in w.messages] == list(range(61, 101)) and w.has_older
    assert max(reads) <= 40
    reads.clear()
    answer = invoke(w, "chat_older", {}, monkeypatch)
    assert answer == {"ok": True, "count": 40} and w.messages[0]["depth"] == 21 and w.has_older
    assert reads == [40]  # one page read, not the history
    assert invoke(w, "chat_older", {}, monkeypatch) == {"ok": True, "count": 20}
    assert [m["depth"] for m in w.messages] == list(range(1, 101)) and not w.has_older
    assert invoke(w, "chat_older", {}, monkeypatch) == {"ok": True, "count": 0}
    # A new turn keeps what was loaded and adds itself.
    chat(ip, "one more")
    assert [m["depth"] for m in w.messages] == list(range(1, 103)) and not w.has_older


def test_a_turn_keeps_load_older_while_older_messages_are_not_loaded(ip, monkeypatch):
    chat(ip, "start")
    ocw.current_session().append_many([(("user" if i % 2 == 0 else "assistant"), f"message {i + 3}") for i in range(98)])
    get_runtime().close()
    w = ocw.chat()
    invoke(w, "chat_older", {}, monkeypatch)
    assert w.messages[0]["depth"] == 21 and w.has_older
    chat(ip, "one more")  # the new page starts inside what is loaded: the oldest loaded decides
    assert [m["depth"] for m in w.messages] == list(range(21, 103)) and w.has_older


def test_page_boundaries_and_branch_tree(ip):
    for i in range(3):
        chat(ip, f"turn {i}")
    s = ocw.current_session()
    path = s.branch()
    rows, older = s.page(limit=6)
    assert [r["id"] for r in rows] == path and older is False  # exactly the branch: nothing older
    rows, older = s.page(limit=5)
    assert [r["id"] for r in rows] == path[1:] and older is True
    rows, older = s.page(before=path[2], limit=1)
    assert [r["id"] for r in rows] == [path[1]] and older is True
    rows, older = s.page(before=path[1], limit=9)
    assert [r["id"] for r in rows] == [path[0]] and older is False
    assert s.page(before=path[0]) == ([], False)
    assert all(r["created_at"] is not None for r in s.page()[0])
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError):
            s.page(limit=bad)
    s.rewind(path[1])
    with pytest.raises(InvalidArgument, match="not a message on the current branch"):
        s.page(before=path[4])
    tree = s.branch_tree()
    assert [(b["id"], b["current"], b["leaf"]) for b in tree] == [(path[5], False, True), (path[1], True, False)]
    assert (tree[0]["fork_id"], tree[0]["fork_depth"], tree[0]["first_id"]) == (path[1], 2, path[2])
    s.rewind(None)  # before the first message: every branch starts apart
    tree = s.branch_tree()
    assert [(b["fork_id"], b["fork_depth"], b["first_id"]) for b in tree] == [(None, 0, path[0])]
    assert branch_items(tree)[0]["preview"] == "turn 0"


# -- what reaches the browser --------------------------------------------------------------------
def test_items_keep_model_text_sanitized_and_the_rest_plain(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-SECRET-123456")
    rows = [
        {"id": "n_1", "parent_id": None, "role": "user", "name": None, "depth": 1, "created_at": None,
         "content": [{"type": "text", "text": "<img src=x onerror=alert(1)> \x1b]52;c;AAAA\x07hi"}]},
        {"id": "n_2", "parent_id": "n_1", "role": "assistant", "name": None, "depth": 2, "created_at": None,
         "content": [{"type": "thinking", "thinking": "hmm <b>"},
                     {"type": "text", "text": "Look: <script>x()</script> [a](javascript:alert(1)) **ok**"},
                     {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.txt"}}]},
        {"id": "n_3", "parent_id": "n_2", "role": "tool", "name": None, "depth": 3, "created_at": None,
         "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "key tok-SECRET-123456 <b>x</b>"}]},
        {"id": "n_4", "parent_id": "n_3", "role": "tool", "name": None, "depth": 4, "created_at": None,
         "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "orphan", "is_error": True}]},
    ]
    items = message_items(rows)
    assert [i["id"] for i in items] == ["n_1", "n_2", "n_4"]
    user, assistant, orphan = items
    assert user["text"] == "<img src=x onerror=alert(1)> ]52;c;AAAAhi" and "html" not in user
    assert assistant["html"] == markdown_html(rows[1]["content"][1]["text"])
    assert "<script" not in assistant["html"] and "href" not in assistant["html"]
    assert "<strong>ok</strong>" in assistant["html"]
    assert assistant["thinking"] == "hmm <b>"
    assert (assistant["end_id"], assistant["depth"]) == ("n_3", 3)  # the step ends at its results
    assert assistant["tools"] == [{"call_id": "c1", "name": "read_file", "args": '{"path": "a.txt"}',
                                   "status": "ok", "result": "key [redacted] <b>x</b>"}]
    assert orphan["role"] == "tool" and orphan["tools"][0]["status"] == "error"
    active, capsules = summary_items([
        {"id": "n_s1", "cover_count": 2, "created_at": None, "tokens": 9, "active": False},
        {"id": "n_s2", "cover_count": 3, "created_at": None, "tokens": 9, "active": True,
         "content": [{"type": "text", "text": "They said <script>x</script>"}]}])
    assert active["html"] == "<p>They said &lt;script&gt;x&lt;/script&gt;</p>\n" and active["cover_count"] == 3
    assert [c["active"] for c in capsules] == [False, True] and "html" not in capsules[0]


def test_the_summary_capsule_carries_the_session_memory_by_section_with_turns(small, monkeypatch):
    """Issue 22: the capsule shows the memory beside the summary (the prose without the
    memory block), each current item with its turn; stale values are not shown."""
    chat(small, f"Please set the batch size to 64. {TURN}")
    chat(small, f"From now on answer in Chinese. {TURN}")
    chat(small, f"Let's bump batch_size to 128 now. {TURN}")
    chat(small, f"Also <img src=x onerror=alert(1)> lives at data/raw/ev_9.csv. {TURN}")
    turns(small, 3, first=5)
    w = ocw.chat()
    invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    mem = w.summary["memory"]
    kinds = [sec["kind"] for sec in mem]
    assert kinds[:2] == ["instruction", "setting"] and "working" in kinds
    section = {sec["kind"]: sec["items"] for sec in mem}
    assert section["instruction"][0] == {"text": "From now on answer in Chinese.", "turn": 3}
    assert {"text": "batch_size = 128", "turn": 5} in section["setting"]
    assert not any("= 64" in i["text"] for i in section["setting"])  # superseded: not shown
    assert "[Session memory:" not in w.summary["html"]  # the prose alone; the memory is its own field
    assert all(isinstance(i["turn"], int) and isinstance(i["text"], str) for sec in mem for i in sec["items"])
    assert w.labels["chat_mem_setting"] == "Current settings and values"
    small.run_line_magic("config", "Ocw.lang = 'zh'")
    assert w.labels["chat_mem_setting"] == "当前设置与数值" and w.labels["chat_memory_turn"] == "第 {n} 轮"


def test_time_labels():
    import datetime as dt

    now = dt.datetime(2026, 11, 30, 23, 59)
    assert time_label(dt.datetime(2026, 11, 30, 0, 0), now) == "00:00"
    assert time_label(dt.datetime(2026, 11, 29, 23, 59), now) == "2026-11-29 23:59"
    assert time_label(None, now) == ""


def test_language_switch_speaks_again_in_the_new_language(small, monkeypatch):
    turns(small, 6)
    w = ocw.chat()
    invoke(w, "chat_run", {"name": "compact", "args": ""}, monkeypatch)
    small.run_line_magic("config", "Ocw.lang = 'zh'")
    assert w.lang == "zh" and w.labels["chat_send"] == "发送"
    assert next(c for c in w.commands if c["name"] == "compact")["help"].startswith("立即把较早的对话折叠进滚动摘要")
    assert w.notes[0]["text"] == "正在压缩上下文…"
    assert w.notes[1]["text"].startswith("上下文已压缩：覆盖了 ")
    answer = invoke(w, "chat_run", {"name": "rewind", "args": "99"}, monkeypatch)
    assert answer["ok"] is False


def test_a_kernel_without_ocws_session_keeps_the_widget_empty(ip):
    w = ocw.chat()
    assert (w.session_id, w.messages, w.branches, w.summary) == ("", [], [], {})
    assert invoke(w, "chat_older", {}) == {"ok": True, "count": 0}  # nothing to load, said so
    get_runtime().close()
    assert w.session_id == "" and w.notes == []


def test_the_widgets_words_come_from_the_one_table():
    """widgets/chat.js has no word table of its own: every label is Python's (ocw.text.ui_text),
    and the no-session alert is the same sentence %compact prints."""
    from ocw.text.i18n import text
    from ocw.text.ui_text import UI_LABELS

    src = (ROOT / "widgets" / "chat.js").read_text(encoding="utf-8")
    src = re.sub(r"^\s*//.*$", "", src, flags=re.M)  # the comments may quote them
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    for key, value in UI_LABELS["en"].items():
        if key.startswith("chat_") and " " in value:  # sentences (single words are also class names)
            assert value not in src, f"{key}: {value!r} is written into chat.js"
    used = set(re.findall(r"\bL_?\(?\)?\.(chat_\w+)", src))
    assert used and used <= set(UI_LABELS["en"]), used - set(UI_LABELS["en"])
    for lang in ("en", "zh"):
        assert UI_LABELS[lang]["chat_no_session"] == text("no_session", lang)


def test_another_kernels_turn_shows_up_without_a_command(pg_url):
    """On a PostgreSQL store another kernel's writes arrive on the listener thread; the
    widget re-reads its page there (under its own lock) and shows the new turn."""
    import subprocess
    import sys
    import textwrap
    import time

    from ocw.store.postgres.listen import wait_ready

    store = ocw.Store(pg_url)
    try:
        s = store.create_session(model="gpt-4o", context_window=100_000, name="team-chat")
        s.append("user", "the first message, from this kernel")
        assert wait_ready(store.backend._listener), "the listener never started"
        w = ChatWidget(runtime=None, ring=None, session=s)
        assert [m["depth"] for m in w.messages] == [1]
        writer = textwrap.dedent("""
            import sys, ocw
            store = ocw.Store(sys.argv[1])
            s = store.open_session("team-chat")
            s.append_many([("user", "a question from the other kernel"), ("assistant", "its **answer**")])
            store.close()
        """)
        out = subprocess.run([sys.executable, "-c", writer, pg_url], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(w.messages) < 3:
            time.sleep(0.02)
        assert [m["depth"] for m in w.messages] == [1, 2, 3]
        assert w.messages[1]["text"] == "a question from the other kernel"
        assert w.messages[2]["html"] == "<p>its <strong>answer</strong></p>\n"
        assert w.branches[0]["length"] == 3 and w.head == s.head
        w.close()
    finally:
        store.close()


def test_another_writers_single_turn_is_read_whole(tmp_path):
    """A turn is one write (rev + 1). Seen by sync() it is another kernel's all the same:
    the rows loaded before it (a page read set their range) no longer cover the branch.
    (Before: treated as our own write, the page and the tail lost the turn's user message.)"""
    path = str(tmp_path / "two.duckdb")
    a, b = ocw.Store(path), ocw.Store(path)
    try:
        s = a.create_session(name="shared")
        s.append("user", "first")
        assert [r["depth"] for r in s.page()[0]] == [1]  # rows loaded from seq 0 on
        other = b.open_session("shared")
        rev = other._rev
        other.append_many([("user", "from the other kernel"), ("assistant", "its answer")])
        assert other._rev == rev + 1  # one write
        s.sync()
        assert [(r["depth"], r["role"]) for r in s.page()[0]] == [(1, "user"), (2, "user"), (3, "assistant")]
        assert [n.id for n in s.tail()] == other.branch() and len(s.branch()) == 3
        assert s.occupancy()["total"] == other.occupancy()["total"]
    finally:
        a.close()
        b.close()


def test_references_expand_as_in_a_chat_cell(ip, monkeypatch):
    chat(ip, "hello")
    w = ocw.chat()
    ip.user_ns["region"] = "north-east"
    answer = invoke(w, "chat_send", {"text": "sales in {region}, braces {{kept}} and `{region}` in code"})
    assert answer["ok"] is True
    assert w.messages[-2]["text"] == "sales in north-east, braces {kept} and `{region}` in code"
    before = ocw.current_session().branch()
    answer = invoke(w, "chat_send", {"text": "what about {nosuch}?"})
    assert answer["ok"] is False and "{nosuch}: no variable 'nosuch'" in answer["error"], answer
    assert ocw.current_session().branch() == before  # nothing sent, nothing stored


def test_a_steered_compaction_and_summary_from_the_widget(small):
    turns(small, 6)
    w = ocw.chat()
    answer = invoke(w, "chat_run", {"name": "compact", "args": "-- keep the file paths"})
    assert answer["ok"] is True and answer["output"].startswith("Context compacted: covered ")
    answer = invoke(w, "chat_run", {"name": "summary", "args": ""})
    assert answer["ok"] is True and "keep the file paths" in answer["output"], answer
    assert w.notes[-1]["kind"] == "output" and w.notes[-1]["text"] == answer["output"]


# -- issue 24: deleting the current session ---------------------------------------------------
def test_deleting_the_current_session_is_said_and_the_next_message_starts_a_new_one(ip, monkeypatch):
    chat(ip, "a turn in the notebook's own session")
    notebook_session = ocw.current_session()
    kept = len(notebook_session.branch())
    ip.run_line_magic("new", "--name other")
    chat(ip, "a turn in other")
    deleted = ocw.current_session()
    assert deleted.name == "other" and deleted.id != notebook_session.id
    w = ocw.chat()
    assert w.session_id == deleted.id
    answer = invoke(w, "chat_run", {"name": "sessions", "args": "--delete other --yes"}, monkeypatch)
    assert answer["ok"] is True and answer["output"].startswith("Deleted session 'other'")
    # Said in the widget, which shows no session; nothing is current (not the notebook's older one).
    assert w.session_id == "" and w.messages == []
    assert [n["text"] for n in w.notes] == ["Session 'other' was deleted; the next message starts a new session.",
                                            answer["output"]]
    assert ocw.current_session() is None
    # The next message starts a new session under the freed name; the older session is untouched.
    assert invoke(w, "chat_send", {"text": "hello again"}, monkeypatch)["ok"] is True
    fresh = ocw.current_session()
    assert fresh.name == "other" and fresh.id not in (deleted.id, notebook_session.id)
    assert len(fresh.branch()) == 2 and w.session_id == fresh.id and w.notes == []
    assert len(get_runtime().store.open_session(notebook_session.id).branch()) == kept


def test_the_deleted_note_is_in_chinese_under_zh(ip, monkeypatch):
    ip.run_line_magic("config", "Ocw.lang = 'zh'")
    chat(ip, "一条消息")
    name = ocw.current_session().name
    w = ocw.chat()
    invoke(w, "chat_run", {"name": "sessions", "args": f"--delete {name!r} --yes"}, monkeypatch)
    assert w.notes[0]["text"] == f"会话 {name!r} 已删除；下一条消息将开始一个新会话。"


def test_the_widgets_own_errors_are_in_chinese_under_zh(ip, monkeypatch):
    ip.run_line_magic("config", "Ocw.lang = 'zh'")
    chat(ip, "一条消息")
    w = ocw.chat()
    assert invoke(w, "chat_send", {"text": "  "}, monkeypatch) == {"ok": False, "error": "消息为空 — 输入消息后按 Enter"}
    assert invoke(w, "chat_run", {"name": "nosuch"}, monkeypatch)["error"] == "/nosuch 不是命令 — 输入 / 查看所有命令"
    assert invoke(w, "chat_rewind", {"node_id": "x; rm"}, monkeypatch)["error"] == "不是消息 id：'x; rm'"
    ip.run_line_magic("config", "Ocw.lang = 'en'")  # the live language: English again at once
    assert invoke(w, "chat_run", {"name": "nosuch"}, monkeypatch)["error"] == "/nosuch is not a command — type / to see the commands"


def test_branches_that_leave_alike_are_told_apart_by_how_they_end(ip, monkeypatch, capsys):
    chat(ip, "the setup")
    s = ocw.current_session()
    fork = s.head
    chat(ip, "Which retry policy should the loader use?")
    chat(ip, "and with polars?")
    s.rewind(fork)
    chat(ip, "Which retry policy should the loader use?")  # asked again: the same first words
    chat(ip, "and with duckdb?")
    s.rewind(fork)
    w = ocw.chat()
    others = [b for b in w.branches if not b["current"]]
    assert len(others) == 2
    assert {b["preview"] for b in others} == {"Which retry policy should the loader use?"}
    endings = sorted(b["ending"] for b in others)
    assert all(e for e in endings) and endings[0] != endings[1]
    assert any("polars" in e for e in endings) and any("duckdb" in e for e in endings)
    capsys.readouterr()
    ip.run_line_magic("branch", "")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "forks after message 2" in ln]
    assert len(lines) == 2 and len(set(lines)) == 2 and all(" … “" in ln for ln in lines), lines
    # A branch with no look-alike shows no ending (nothing added where nothing is needed).
    chat(ip, "something else entirely")  # a third branch from the fork, now current
    s.rewind(fork)
    lone = [b for b in ocw.chat().branches if "something" in b["preview"]]
    assert len(lone) == 1 and lone[0]["ending"] == ""
    # One question per branch, asked twice: the replies tell them apart.
    tree = [{"id": f"n_{i}", "depth": 2, "role": "assistant", "created_at": None, "current": False, "leaf": True,
             "fork_id": "n_f", "fork_depth": 1, "first_id": f"n_q{i}", "first_content": [{"type": "text", "text": "q"}],
             "last_content": [{"type": "text", "text": "q"}], "leaf_content": [{"type": "text", "text": f"reply {i}"}]}
            for i in (1, 2)]
    assert [b["ending"] for b in branch_items(tree)] == ["reply 1", "reply 2"]


def test_a_bad_environment_value_refuses_a_slash_command_as_it_refuses_the_magic(small, monkeypatch):
    """The widget reads the OCW_* environment before a command, as a magic does (once,
    in `_command`): a bad value is said by name and the command does not run."""
    from IPython.core.error import UsageError

    turns(small, 1)
    w = ocw.chat()
    monkeypatch.setenv("OCW_BASE_URL", "ftp://example.invalid/v1")
    with pytest.raises(UsageError) as magic:
        small.run_line_magic("new", "--name other")
    answer = invoke(w, "chat_run", {"name": "new", "args": "--name other"}, monkeypatch)
    assert answer == {"ok": False, "error": str(magic.value)} and "OCW_BASE_URL" in answer["error"]
    assert [s["name"] for s in get_runtime().store.sessions()] == ["default"]  # neither one ran
    monkeypatch.delenv("OCW_BASE_URL")
    assert invoke(w, "chat_run", {"name": "new", "args": "--name other"}, monkeypatch)["ok"] is True
