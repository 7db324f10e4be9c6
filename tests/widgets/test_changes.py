"""Issue 28 item 2: the chat widget sends changes, not state (ocw/widgets/changes.py).

The comm is real ipywidgets/comm machinery with a recording comm (ocw.bench.comm's: it
keeps every message it would publish), the shell a real IPython shell with `%load_ext ocw`
on a real DuckDB file, the replies the offline model's. What a browser would hold is a
replica that applies every message the comm carried, by widgets/chat.js's rules."""
from __future__ import annotations

import json

import pytest

import ocw
from ocw.bench import comm as rec
from ocw.bench.build import build_session
from ocw.notebook.items import message_items
from ocw.notebook.magics import get_runtime
from ocw.widgets.changes import HELD_MIN, list_ops, value_ops

LONG = "the loader reads events.parquet, joins the orders table and retries after 30 s timeouts. " * 6


def _json(value) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


# -- the ops ---------------------------------------------------------------------------------------
def test_list_ops_send_only_what_differs():
    a, b, c, d = ({"id": x, "n": 1} for x in "abcd")
    assert list_ops("m", [a, b], [a, b]) == []
    assert list_ops("m", [a, b], [a, b, c, d]) == [{"name": "m", "at": 2, "remove": 0, "items": [c, d]}]
    assert list_ops("m", [a, b, c], [a]) == [{"name": "m", "at": 1, "remove": 2, "items": []}]
    assert list_ops("m", [b, c], [a, b, c]) == [{"name": "m", "at": 0, "remove": 0, "items": [a]}]  # load older
    # One entry changed: its changed keys only (the current branch grew), or whole if that is as short.
    grown = dict(b, n=2)
    assert list_ops("m", [a, b, c], [a, grown, c]) == [{"name": "m", "index": 1, "set": {"n": 2}, "drop": []}]
    assert list_ops("m", [a], [{"id": "z"}]) == [{"name": "m", "at": 0, "remove": 1, "items": [{"id": "z"}]}]
    # A list that keeps its newest entries (the notes): the front trimmed, the new one added.
    assert list_ops("m", [a, b, c], [b, c, d]) == [{"name": "m", "at": 0, "remove": 1, "items": []},
                                                   {"name": "m", "at": 2, "remove": 0, "items": [d]}]


def test_value_ops_extend_strings_in_utf16_units_and_set_the_rest():
    # "<p>a😀b" is 6 code points and 7 UTF-16 units (the emoji is a surrogate pair in JavaScript)
    assert value_ops("s", "<p>a😀b</p>", "<p>a😀bc</p>") == [{"name": "s", "keep": 7, "add": "c</p>"}]
    assert value_ops("s", "abc", "xyz") == [{"name": "s", "value": "xyz"}]
    assert value_ops("s", "abc", "abc") == []
    assert value_ops("b", False, True) == [{"name": "b", "value": True}]


def test_a_snapshot_asked_without_a_revision_is_the_whole_state_even_at_revision_0():
    """A caller that holds no revision (`snapshot()`) gets the whole state, also from a
    widget at revision 0 — only a view that names the current revision gets {rev} alone."""
    import ipywidgets
    import traitlets as t

    from ocw.widgets.changes import Changes

    class Listing(Changes, ipywidgets.DOMWidget):
        _CHANGES = ("items",)
        items = t.List([{"id": "a"}]).tag(sync=True)

    w = Listing()
    try:
        assert w.snapshot_revision == 0
        assert w.snapshot() == {"rev": 0, "state": {"items": [{"id": "a"}]}}
        assert w.snapshot(0) == {"rev": 0}
        w.items = [{"id": "a"}, {"id": "b"}]
        assert w.snapshot_revision == 1
        assert w.snapshot() == {"rev": 1, "state": {"items": [{"id": "a"}, {"id": "b"}]}}
        assert w.snapshot(0)["state"]["items"][-1] == {"id": "b"} and w.snapshot(1) == {"rev": 1}
    finally:
        w.close()


# -- a real widget on a recording comm -------------------------------------------------------------
@pytest.fixture
def open_chat(ip):
    """(shell, open(n)): `open(n)` builds a session of n messages, makes it current and
    opens the chat widget on a recording comm with every message loaded."""
    ip.run_line_magic("config", "Ocw.auto_compact = 0")
    widgets = []
    with rec.recording():
        def open_(n: int):
            s = build_session(get_runtime().store, n, name=f"big-{n}", id_salt=f"n_t{n}")
            ip.run_line_magic("session", s.name)
            w = ocw.chat()
            widgets.append(w)
            while w.has_older:
                assert rec._command(w, "chat_older", {})["ok"] is True
            return w

        yield ip, open_
        for w in widgets:
            w.close()
    rec.LOG.clear()


def _turn(ip, w, kind: str, text: str) -> tuple[int, int, list]:
    """One turn sent from the widget or as a `%%chat` cell: (chat comm bytes, new items' JSON
    bytes, the comm messages)."""
    ids, start = {m["id"] for m in w.messages}, len(rec.LOG)
    if kind == "widget":
        assert rec._command(w, "chat_send", {"text": text})["ok"] is True
    else:
        assert ip.run_cell(f"%%chat\n{text}").error_in_exec is None
    sent = [(b, data) for cid, b, data in rec.LOG[start:] if cid == w.comm.comm_id]
    new = [m for m in w.messages if m["id"] not in ids]
    assert [m["role"] for m in new] == ["user", "assistant"]
    return sum(b for b, _ in sent), _json(new), [data for _, data in sent]


@pytest.mark.parametrize("loaded", [100, 2000])
def test_a_turn_costs_the_comm_what_it_added_whatever_is_loaded(open_chat, loaded, capsys):
    ip, open_ = open_chat
    w = open_(loaded)
    assert len(w.messages) >= loaded * 0.85  # (a tool result joins its call's item)
    replica = json.loads(json.dumps(w.get_state(), default=str))  # what a browser opening it now gets
    carried = []
    for kind in ("widget", "cell", "widget"):
        sent, new, msgs = _turn(ip, w, kind, f"{kind}: {LONG}")
        carried += msgs
        assert sent <= 2 * new, f"{kind} turn at {loaded} loaded: {sent} bytes on the comm for {new} new"
        # and nothing the size of what is loaded: no message carries the list whole
        assert max(_json(m) for m in msgs) < new + 1000
    for data in carried:
        rec.apply(replica, data, type(w)._CHANGES)
    for name in type(w)._CHANGES:
        assert replica[name] == json.loads(json.dumps(getattr(w, name))), name
    assert replica["messages"][-1]["role"] == "assistant" and replica["pending"] == replica["streaming"] == ""
    capsys.readouterr()


def test_the_turn_text_crosses_the_comm_once(open_chat, capsys):
    """The user's text (pending, then the stored message) and the reply (streamed, then
    stored) are each sent once: the stored message refers to what the browser holds."""
    ip, open_ = open_chat
    w = open_(100)
    marker = "unique-marker-" + "x" * HELD_MIN
    _, _, msgs = _turn(ip, w, "widget", f"{marker} {LONG}")
    text = json.dumps(msgs, ensure_ascii=False)
    assert text.count(marker) == 2  # the pending text, and the stored message's 80-character preview
    reply = w.messages[-1]["html"]
    assert len(reply) > HELD_MIN and text.count(json.dumps(reply, ensure_ascii=False)[1:-1]) == 0
    assert '{"$held": "pending"}' in text and '{"$held": "streaming"}' in text
    capsys.readouterr()


def test_a_view_that_is_behind_gets_the_whole_state_and_a_current_one_nothing(open_chat, capsys):
    ip, open_ = open_chat
    w = open_(100)
    stale = w.snapshot_revision
    _turn(ip, w, "cell", LONG)
    assert w.snapshot_revision == stale + 1
    # A reloaded page (or Voilà) gets the whole current state with its revision.
    state = w.get_state()
    assert state["messages"] == w.messages and state["snapshot_revision"] == w.snapshot_revision
    behind = rec._command(w, "chat_snapshot", {"rev": stale})
    assert behind["ok"] is True and behind["rev"] == w.snapshot_revision
    assert set(behind["state"]) == set(type(w)._CHANGES)
    assert behind["state"]["messages"] == w.messages and len(behind["state"]["messages"]) >= 85
    assert rec._command(w, "chat_snapshot", {"rev": w.snapshot_revision}) == {"ok": True, "rev": w.snapshot_revision}
    assert "state" in rec._command(w, "chat_snapshot", {"rev": "3"})  # not a revision: whole
    capsys.readouterr()


def test_items_built_by_the_turn_and_by_load_older_are_the_full_builds(open_chat, capsys):
    """The widget builds only the new rows' items (and the last loaded one's, which a tool
    result may join); the result is what building every loaded row gives."""
    ip, open_ = open_chat
    w = open_(300)  # a tool call and its result every ten messages: pages split some of them
    assert w.messages == message_items(w._rows)
    for i in range(2):
        _turn(ip, w, "cell", f"{i} {LONG}")
    assert w.messages == message_items(w._rows)
    capsys.readouterr()


def test_extend_items_builds_the_new_rows_and_lets_a_tool_result_join_the_reply_before_it():
    from ocw.notebook.items import extend_items

    def row(i, role, blocks):
        return {"id": f"n_{i}", "depth": i, "role": role, "created_at": None, "content": blocks}

    rows = [row(1, "user", [{"type": "text", "text": "read a.txt"}]),
            row(2, "assistant", [{"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.txt"}}])]
    items = message_items(rows)
    more = rows + [row(3, "tool", [{"type": "tool_result", "tool_use_id": "c1", "content": "hello"}]),
                   row(4, "assistant", [{"type": "text", "text": "It says hello."}])]
    got = extend_items(rows, items, more)
    assert got == message_items(more)
    assert len(got) == 3 and got[1]["end_id"] == "n_3" and got[1]["tools"][0]["result"] == "hello"
    assert got[0] is items[0]  # reused, not rebuilt
    assert got[1] is not items[1]  # the reply the result joined is built again
    # A rewind: the rows part ways at row 2; nothing after the last shared row is reused.
    other = rows[:1] + [row(5, "assistant", [{"type": "text", "text": "Another answer."}])]
    assert extend_items(more, got, other) == message_items(other)
    assert extend_items([], [], more) == message_items(more)
