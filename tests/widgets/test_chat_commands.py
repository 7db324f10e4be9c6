"""Issue 29, the chat widget's kernel side: added commands run from the slash menu (their
output, or their one failure line, in the conversation), a built-in's name reaches the
built-in, the menu follows commands added while it is shown, and `/doctor --send` is a
normal turn. Requests go through anywidget's dispatch as the browser's do
(tests/widgets/test_chat_widget.py's `invoke`)."""
from __future__ import annotations

import pytest

import ocw
from ocw.notebook import user_commands
from ocw.notebook.commands import slash_menu
from ocw.notebook.magics import get_runtime
from widgets.test_chat_widget import invoke

BUILTIN_SLASH = [e["name"] for e in slash_menu("en")]


@pytest.fixture(autouse=True)
def fresh_registry():
    user_commands.clear()
    yield
    user_commands.clear()


def notes(w, kind=None):
    return [n for n in w.notes if kind is None or n["kind"] == kind]


def test_added_commands_run_from_the_menu_and_a_raising_one_is_one_line(ip):
    w = ocw.chat()
    assert [c["name"] for c in w.commands] == BUILTIN_SLASH
    ocw.command("hello", lambda args: f"hello {args}", help="say hello")

    def boom():
        raise KeyError("no such table")

    ocw.command("boom", boom)
    # Added while the widget is shown: the menu follows, after the built-ins, marked.
    assert [c["name"] for c in w.commands] == BUILTIN_SLASH + ["hello", "boom"]
    assert w.commands[-2]["by"] == "added by " + __name__

    answer = invoke(w, "chat_run", {"name": "hello", "args": "Ada"})
    assert answer == {"ok": True, "output": "hello Ada"}
    assert notes(w)[-1]["kind"] == "output" and notes(w)[-1]["text"] == "hello Ada"
    answer = invoke(w, "chat_run", {"name": "boom", "args": ""})
    assert answer == {"ok": True, "failed": True, "output": "/boom failed: KeyError: 'no such table'"}
    assert notes(w)[-1]["kind"] == "failed" and "\n" not in notes(w)[-1]["text"]
    assert w.busy == ""
    user_commands.remove("hello")
    assert [c["name"] for c in w.commands] == BUILTIN_SLASH + ["boom"]
    answer = invoke(w, "chat_run", {"name": "hello", "args": ""})
    assert answer["ok"] is False and "/hello is not a command" in answer["error"]


def test_a_clashing_name_reaches_the_builtin_and_is_told_once_in_the_conversation(ip, capsys):
    w = ocw.chat()
    user_commands.add("sessions", lambda: "THE ADDED ONE", who="clashpkg")  # as a package's entry point would
    w2 = ocw.chat()  # a widget shown after: the notice is not said again
    told = [n["text"] for n in notes(w, "info") + notes(w2, "info")]
    assert told == ["/sessions is a built-in command: the built-in runs, not the /sessions added by clashpkg. "
                    "Register yours under another name."]
    assert [c["name"] for c in w.commands].count("sessions") == 1
    answer = invoke(w, "chat_run", {"name": "sessions", "args": ""})
    assert answer["ok"] is True and "THE ADDED ONE" not in answer["output"]
    assert answer["output"].startswith("Sessions") or "session" in answer["output"].lower()


def test_doctor_send_from_the_widget_is_a_stored_counted_turn(oip, openai_env, dummy_key):
    refserver = openai_env
    w = ocw.chat()
    answer = invoke(w, "chat_run", {"name": "doctor", "args": "--send"})
    assert answer == {"ok": True, "output": "Start a conversation first"}
    assert refserver.requests == []
    oip.run_cell("%%chat\nfirst message")
    s = get_runtime().current_session()
    depth = s.node(s.head)["depth"]
    sent_before = len(refserver.requests)
    answer = invoke(w, "chat_run", {"name": "doctor", "args": "--send"})
    assert answer["ok"] is True, answer
    assert len(refserver.requests) == sent_before + 1
    body = refserver.requests[-1].messages[-1]["content"]
    assert body.startswith("ocw doctor\n") and dummy_key not in body
    s = get_runtime().current_session()
    assert s.node(s.head)["depth"] == depth + 2
    assert w.messages[-2]["role"] == "user" and w.messages[-2]["text"].startswith("ocw doctor")
    assert notes(w, "info")[-1]["text"] == "Sending the doctor report to the model as your message (secrets removed)."
    assert w.busy == "" and w.pending == ""
