"""What `%new --from-summary [N]` carries (ocw/conversation/continue_from.py), on a real
DuckDB file: the seed note holds the origin's active summary, then the origin's last N
turns from a user message on; the link counts the turns carried; the one line said
names what was carried; a deleted origin is named by the name it had."""
from __future__ import annotations

import ocw
from ocw.conversation import continue_from
from ocw.text.i18n import text

WORDS = " ".join(f"w{i}" for i in range(300))


def grow(s, n, tag):
    s.append_many([("user" if i % 2 == 0 else "assistant", f"{tag} {i} " + WORDS) for i in range(n)])


def roles_and_first_words(messages):
    return [(role, blocks[0]["text"].split(" ", 2)[:2]) for role, blocks, _ in messages]


def test_the_seed_is_the_summary_note_then_the_last_n_turns_from_a_user_message(store, fake_summarizer):
    origin = store.create_session(name="origin", context_window=16_000)
    grow(origin, 20, "early")
    assert origin.compact(provider=fake_summarizer("SUMMARY of the early turns")).outcome == "succeeded"
    grow(origin, 6, "late")  # late 0 user, late 1 assistant, … late 5 assistant
    messages, link = continue_from.seed(origin, 2)
    (role, blocks, name), *turns = messages
    assert role == "system" and name is None
    note = blocks[0]["text"]
    assert note.startswith(text("from_summary_note", None, name="origin") + "\n\n")
    assert "SUMMARY of the early turns" in note
    assert roles_and_first_words(turns) == [("user", ["late", "2"]), ("assistant", ["late", "3"]),
                                            ("user", ["late", "4"]), ("assistant", ["late", "5"])]
    assert link["session"] == origin.id and link["name"] == "origin"
    assert link["summary"] == origin.active_summary().id
    assert link["turns"] == 2
    one, link1 = continue_from.seed(origin, 1)
    assert roles_and_first_words(one[1:]) == [("user", ["late", "4"]), ("assistant", ["late", "5"])]
    assert link1["turns"] == 1
    none, link0 = continue_from.seed(origin, 0)  # the note only
    assert [m[0] for m in none] == ["system"] and link0["turns"] == 0


def test_a_turn_that_ends_in_a_tool_call_travels_with_its_result(store):
    origin = store.create_session(context_window=16_000)
    origin.append_many([("user", "first question"), ("assistant", "first answer"),
                        ("user", "second question"), ("assistant", "calling a tool"),
                        ("tool", "tool result 42"), ("assistant", "the answer is 42")])
    turns = continue_from.last_turns(origin, 1)
    assert [r for r, _, _ in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[0][1][0]["text"] == "second question"
    assert [r for r, _, _ in continue_from.last_turns(origin, 5)] == ["user", "assistant"] + [r for r, _, _ in turns]
    assert continue_from.last_turns(origin, 0) == []
    empty = store.create_session(context_window=16_000)
    assert continue_from.last_turns(empty, 3) == []
    assert continue_from.seed(empty, 3)[0] == []  # no summary, no turns: nothing to carry


def test_no_summary_no_note_and_the_seed_reads_the_origin_as_stored(store, tmp_db):
    origin = store.create_session(name="plain", context_window=16_000)
    grow(origin, 2, "first")
    other = ocw.Store(tmp_db)  # a second handle on the same file appends behind `origin`'s back
    try:
        grow(other.open_session(origin.id), 2, "second")
    finally:
        other.close()
    messages, link = continue_from.seed(origin, 1)
    assert roles_and_first_words(messages) == [("user", ["second", "0"]), ("assistant", ["second", "1"])]
    assert link["summary"] is None and link["turns"] == 1


def test_the_line_said_names_what_was_carried(store, fake_summarizer):
    origin = store.create_session(name="origin", context_window=16_000)
    grow(origin, 20, "early")
    origin.compact(provider=fake_summarizer("SUMMARY"))
    grow(origin, 4, "late")
    messages, link = continue_from.seed(origin, 2)
    new = store.create_session(name="next", context_window=16_000, metadata={continue_from.ORIGIN_KEY: link},
                               pins=["pin one"])
    new.append_many([(r, b) for r, b, _ in messages])
    said = continue_from.said(new, "origin", link)
    assert said.startswith("New session 'next' continues 'origin': its active summary and memory, "
                           "the last 2 turns, 1 pin; model ocw-offline, window 16,000 tokens")
    zh = continue_from.said(new, "origin", link, "zh")
    assert "其当前摘要与记忆" in zh and "最近 2 轮对话" in zh
    bare = dict(link, summary=None, turns=1)
    said1 = continue_from.said(store.create_session(name="bare", context_window=16_000), "origin", bare)
    assert "no summary (none was active there), the last 1 turn;" in said1 and "pin" not in said1
    assert continue_from.origin_of(new.metadata) == link
    assert continue_from.origin_name(new) == "origin"


def test_a_deleted_origin_is_named_by_the_name_it_had(store):
    origin = store.create_session(name="gone", context_window=16_000)
    grow(origin, 2, "t")
    _, link = continue_from.seed(origin, 1)
    new = store.create_session(name="after", context_window=16_000, metadata={continue_from.ORIGIN_KEY: link})
    assert continue_from.origins(store, store.sessions()) == {new.id: "gone"}
    store.delete_session(origin.id)
    assert continue_from.origin_name(new) == "gone (deleted since)"
    assert continue_from.origins(store, store.sessions()) == {new.id: "gone"}
    assert continue_from.origin_name(origin_less := store.create_session(context_window=16_000)) is None
    assert continue_from.origin_of(origin_less.metadata) is None
