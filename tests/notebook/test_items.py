"""ocw/notebook/items.py (mirror): the display items the chat widget and `%branch` show,
built from stored rows — a tool's results folded into the call they answer, a tool result
cut at 4,000 characters, the memory capsule's sections, the branches' lengths and the
`ending` that tells apart two branches asked alike. (Through the widget:
tests/widgets/test_chat_widget.py.)"""
from __future__ import annotations

import datetime as dt

from ocw.notebook import items

NOW = dt.datetime(2026, 12, 1, 21, 40)


def row(i, role, content, depth=None):
    return {"id": f"n{i}", "depth": i if depth is None else depth, "role": role, "created_at": NOW, "content": content}


def test_a_tool_result_is_kept_to_4000_characters():
    for size, shown in ((4000, "r" * 4000), (4001, "r" * 4000 + "…")):
        rows = [row(1, "assistant", [{"type": "tool_use", "id": "c1", "name": "read", "input": {"p": 1}}]),
                row(2, "tool", [{"type": "tool_result", "tool_use_id": "c1", "content": "r" * size}])]
        (item,) = items.message_items(rows, NOW)
        assert item["tools"][0]["result"] == shown


def test_tool_results_fold_into_the_calls_they_answer():
    rows = [row(1, "user", [{"type": "text", "text": "read it"}]),
            row(2, "assistant", [{"type": "tool_use", "id": "c1", "name": "read", "input": {}},
                                 {"type": "tool_use", "id": "c2", "name": "grep", "input": {}}]),
            row(3, "tool", [{"type": "tool_result", "tool_use_id": "c1", "content": "one"},
                            {"type": "tool_result", "tool_use_id": "c2", "content": "bad", "is_error": True}]),
            row(4, "tool", [{"type": "tool_result", "tool_use_id": "zz", "content": "stray"}])]
    got = items.message_items(rows, NOW)
    assert [(i["id"], i["end_id"], i["depth"], i["role"]) for i in got] == [
        ("n1", "n1", 1, "user"), ("n2", "n3", 3, "assistant"), ("n4", "n4", 4, "tool")]
    assert [(t["name"], t["status"], t["result"]) for t in got[1]["tools"]] == [("read", "ok", "one"),
                                                                                ("grep", "error", "bad")]
    assert got[1]["preview"] == "🔧 read, grep" and got[0]["text"] == "read it" and got[0]["time"] == "21:40"
    assert got[2]["tools"] == [{"call_id": "zz", "name": "", "args": "", "status": "ok", "result": "stray"}]
    assert got[2]["preview"] == "🔧 1 tool result(s)"


def test_memory_capsule_lists_sections_with_current_items_newest_first():
    from ocw.context import memory as mem

    m = mem.Memory([mem.Item("setting", "batch size", "64", 2),
                    mem.Item("working", "a", "data/raw/events.parquet", 1, detail="file"),
                    mem.Item("working", "b", "conf/prod.yaml", 5, detail="file"),
                    mem.Item("working", "c", "old.yaml", 6, status="superseded", detail="file")])
    got = items.memory_items([mem.to_block(m)])
    assert [s["kind"] for s in got] == ["setting", "working"]  # the model's order; empty sections left out
    assert got[0]["items"] == [{"text": "batch size = 64", "turn": 2}]
    assert got[1]["items"] == [{"text": "file: conf/prod.yaml", "turn": 5},
                               {"text": "file: data/raw/events.parquet", "turn": 1}]


def branch(i, *, current=False, first="Why is it slow?", last=None, leaf=None, depth=6):
    return {"id": f"b{i}", "role": "assistant", "depth": depth, "created_at": NOW, "current": current, "leaf": True,
            "fork_id": "f1", "fork_depth": 2, "first_id": f"x{i}",
            "first_content": [{"type": "text", "text": first}],
            "last_content": [{"type": "text", "text": last}] if last else None,
            "leaf_content": [{"type": "text", "text": leaf}] if leaf else None}


def test_branches_asked_alike_are_told_apart_by_their_last_question_else_their_reply():
    got = items.branch_items([branch(1, current=True), branch(2, last="And with an index?", depth=8),
                              branch(3, leaf="Add an index on user_id."), branch(4, first="Something else")])
    assert [b["length"] for b in got] == [6, 8, 6, 6]
    assert got[0]["ending"] == ""  # the current branch needs no telling apart
    assert got[1]["ending"] == "And with an index?"
    assert got[2]["ending"] == "Add an index on user_id."  # no later question: its reply
    assert got[3]["ending"] == ""  # asked differently: its preview says it
    again = items.branch_items([branch(1, last="Why is it slow?", leaf="Because of X."), branch(2, leaf="Y.")])
    assert [b["ending"] for b in again] == ["Because of X.", "Y."]  # the same question again: the reply


def test_anthropic_style_results_in_a_user_message_fold_too_and_an_image_does_not():
    rows = [row(1, "assistant", [{"type": "tool_use", "id": "c1", "name": "read", "input": {}}]),
            row(2, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": "one"}]),
            row(3, "user", [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}])]
    got = items.message_items(rows, NOW)
    assert [(i["id"], i["end_id"], i["role"]) for i in got] == [("n1", "n2", "assistant"), ("n3", "n3", "user")]
    assert got[0]["tools"][0]["result"] == "one" and got[1]["text"] == ""
