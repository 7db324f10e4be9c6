"""Session: the node DAG, HEAD, rendered history, occupancy, usage samples and the
compaction count — all through the public Session API on a real DuckDB file."""
from __future__ import annotations

import json

import pytest

import ocw
import ocw.conversation.branch_view
import ocw.conversation.session
from ocw.text.errors import OcwError, StoreError
from ocw.text.tokens import FRAME_TOKENS, get_encoding, render_message

ENCODING_OF = {"gpt-4o": "o200k_base", "gpt-4": "cl100k_base", "my-local-llama": "cl100k_base"}


def recount(session, encoding_name: str) -> dict:
    """An independent full recount of what the model reads: every message of
    rendered_history tokenized again, plus the tool definitions."""
    enc = get_encoding(encoding_name)
    parts = {"system": 0, "tools": 0, "summary": 0, "messages": 0}
    for m in session.rendered_history():
        n = FRAME_TOKENS + len(enc.encode_ordinary(render_message(m["role"], m["content"], m.get("name"))))
        if m["role"] == "system" and "id" not in m:
            parts["system"] += n
        elif m.get("name") == "context/summary":
            parts["summary"] += n
        else:
            parts["messages"] += n
    if session.tool_definitions:
        parts["tools"] = len(enc.encode_ordinary(
            json.dumps(session.tool_definitions, sort_keys=True, ensure_ascii=False)))
    parts["total"] = sum(parts.values())
    return parts


def rows(store, table="nodes"):
    with store.db.connect() as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def stored_session_row(store, sid):
    with store.db.connect() as con:
        meta, gen, head, rev = con.execute(
            "SELECT metadata, occupancy_generation, head_id, rev FROM sessions WHERE id = ?", [sid]).fetchone()
    return json.loads(meta), gen, head, rev


@pytest.fixture
def sess(store):
    return store.create_session(model="gpt-4o", context_window=100_000, system_prompt="You are terse.",
                                name="main")


# -- appending ----------------------------------------------------------------------
def test_append_strings_and_blocks(sess):
    a = sess.append("user", "What is in /tmp?")
    assert sess.head == a
    blocks = [
        {"type": "thinking", "thinking": "I should list the directory."},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_1", "name": "ls", "input": {"path": "/tmp"}},
    ]
    b = sess.append("assistant", blocks)
    c = sess.append("user", [{"type": "tool_result", "tool_use_id": "call_1", "content": "a.txt\nb.txt"}])
    d = sess.append("tool", [{"type": "tool_result", "tool_use_id": "call_1",
                              "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}])
    assert sess.branch() == [a, b, c, d]
    assert sess.node(a)["content"] == [{"type": "text", "text": "What is in /tmp?"}]
    assert sess.node(b)["content"] == blocks
    assert sess.node(b)["parent_id"] == a and sess.node(a)["parent_id"] is None
    assert sess.node(d)["content"][0]["content"] == "x\ny"  # list content normalized to text
    assert all(sess.node(n)["tokens"] > FRAME_TOKENS for n in (a, b, c, d))
    # Persisted: a new Store on the file reads the same graph.
    other = ocw.Store(sess.store.path)
    try:
        t = other.open_session("main")
        assert t.branch() == [a, b, c, d]
        assert t.node(b)["content"] == blocks
    finally:
        other.close()


@pytest.mark.parametrize("role,content", [
    ("robot", "hi"),
    ("user", []),
    ("user", [{"type": "image", "url": "x"}]),
    ("user", [{"type": "tool_use", "id": "1"}]),  # lacks name and input
    ("user", 42),
])
def test_bad_messages_are_refused_and_nothing_written(sess, role, content):
    sess.append("user", "ok")
    before = rows(sess.store)
    with pytest.raises(OcwError):
        sess.append(role, content)
    assert rows(sess.store) == before


@pytest.mark.parametrize("messages", [[], (), "user", None])
def test_append_many_needs_a_non_empty_list(sess, messages):
    n = rows(sess.store)
    with pytest.raises(OcwError, match="messages takes a non-empty list of"):
        sess.append_many(messages)
    assert rows(sess.store) == n

def test_append_many_takes_pairs_and_triples_only(sess):
    """(role, content) and (role, content, name) are messages; one or four items is refused
    whole — nothing of the list is written."""
    ids = sess.append_many([("user", "q"), ("assistant", "a"), ("tool", "r", "read_file")])
    assert [sess.node(i)["role"] for i in ids] == ["user", "assistant", "tool"]
    assert sess.node(ids[2])["name"] == "read_file" and sess.node(ids[0])["name"] is None
    n = rows(sess.store)
    for bad in (("user",), ("user", "q", None, "extra")):
        with pytest.raises(OcwError, match=r"messages\[1\] takes a \(role, content\[, name\]\) tuple"):
            sess.append_many([("user", "fine"), bad])
    assert rows(sess.store) == n and sess.head == ids[-1]


def test_summary_nodes_cannot_be_appended(sess):
    with pytest.raises(OcwError):
        sess.append("llm", "fake summary", name="context/summary")


# -- HEAD, rewind, branches -------------------------------------------------------------
def test_rewind_forks_and_keeps_every_node(sess):
    store = sess.store
    a1, a2, a3, a4 = (sess.append(r, t) for r, t in
                      [("user", "one"), ("assistant", "two"), ("user", "three"), ("assistant", "four")])
    assert rows(store) == 4
    sess.rewind(a2)
    assert sess.head == a2 and sess.branch() == [a1, a2]
    assert rows(store) == 4  # nothing deleted
    b3 = sess.append("user", "three, differently")
    assert sess.node(b3)["parent_id"] == a2
    assert rows(store) == 5
    assert sess.branch() == [a1, a2, b3]
    leaves = {b["id"]: b for b in sess.branches()}
    assert set(leaves) == {a4, b3}
    assert leaves[b3]["current"] and not leaves[a4]["current"]
    assert leaves[a4]["depth"] == 4 and leaves[b3]["depth"] == 3
    assert recount(sess, "o200k_base")["total"] == sess.occupancy()["total"]

    sess.checkout(a4)
    assert sess.head == a4 and sess.branch() == [a1, a2, a3, a4]
    assert {b["id"]: b["current"] for b in sess.branches()} == {a4: True, b3: False}
    assert recount(sess, "o200k_base")["total"] == sess.occupancy()["total"]

    # Persisted: a restart sees the same HEAD and both leaves.
    store.close()
    again = ocw.Store(store.path).open_session("main")
    assert again.head == a4 and {b["id"] for b in again.branches()} == {a4, b3}
    again.store.close()



def test_a_node_whose_only_child_is_a_summary_is_a_leaf(sess):
    # Leaves are a query now (DuckDBStore.leaves, Session.branches): a summary hangs
    # beside the branch, so its boundary stays a leaf until a real child arrives.
    a, b, c = (sess.append(r, t) for r, t in [("user", "one"), ("assistant", "two"), ("user", "three")])
    sess._persist_summary("summary of one, two, three", c, sess.head, sess.generation)  # boundary = HEAD
    assert [(x["id"], x["depth"], x["role"], x["current"]) for x in sess.branches()] == [(c, 3, "user", True)]
    assert [n.id for n in sess.backend.leaves(sess.id, sess.epoch)] == [c]
    # Rewound: c is still a leaf (its only child is the summary), and so is the fork.
    sess.rewind(a)
    x = sess.append("assistant", "two, differently")
    assert [(y["id"], y["depth"], y["current"]) for y in sess.branches()] == [(c, 3, False), (x, 2, True)]
    # A real child under c: c is no longer a leaf; its child is, and the leaves stay oldest first.
    sess.checkout(c)
    d = sess.append("assistant", "four")
    assert [y["id"] for y in sess.branches()] == [x, d]
    assert [n.id for n in sess.backend.leaves(sess.id, sess.epoch)] == [x, d]

def test_rewind_rules(sess):
    a1 = sess.append("user", "one")
    a2 = sess.append("assistant", "two")
    sess.rewind(a1)
    with pytest.raises(OcwError):
        sess.rewind(a2)  # not on the current branch any more: use checkout
    with pytest.raises(OcwError):
        sess.checkout("n_doesnotexist")
    sess.rewind(None)
    assert sess.head is None and sess.branch() == []
    occ = sess.occupancy()
    assert occ["breakdown"]["messages"] == 0 and occ["total"] == occ["breakdown"]["system"]
    root2 = sess.append("user", "a second root")
    assert sess.node(root2)["parent_id"] is None
    assert {b["id"] for b in sess.branches()} == {a2, root2}


def test_rewind_turns(sess):
    u1 = sess.append("user", "q1")
    a1 = sess.append("assistant", "r1")
    sess.append("user", "q2")
    sess.append("assistant", "r2")
    assert sess.rewind_turns(1) == a1
    assert sess.branch() == [u1, a1]
    assert sess.rewind_turns(1) is None
    with pytest.raises(OcwError) as one:
        sess.rewind_turns(1)
    assert "cannot rewind 1 turn;" in str(one.value)  # one turn, singular
    with pytest.raises(OcwError) as two:
        sess.rewind_turns(2)
    assert "cannot rewind 2 turns;" in str(two.value)


# -- counting once ----------------------------------------------------------------
def test_each_message_is_counted_once(sess, monkeypatch):
    for i in range(49):
        sess.append("user" if i % 2 == 0 else "assistant", f"message number {i} with some words 数据")
    sess.occupancy()  # the system prompt is counted (once) here
    calls = []
    real = ocw.conversation.branch_view.count_message

    def counting(role, blocks, *a, **k):
        calls.append(role)
        return real(role, blocks, *a, **k)

    for module in (ocw.conversation.session, ocw.conversation.branch_view):  # wherever a count could happen
        if hasattr(module, "count_message"):
            monkeypatch.setattr(module, "count_message", counting)
        if hasattr(module, "count_text"):
            monkeypatch.setattr(module, "count_text", lambda *a, **k: pytest.fail("count_text on the hot path"))
    sess.append("assistant", "the fiftieth message")
    assert calls == ["assistant"]  # only the new message, not the history
    for _ in range(3):
        occ = sess.occupancy()
    assert calls == ["assistant"]  # occupancy counts nothing
    monkeypatch.undo()
    assert occ["total"] == recount(sess, "o200k_base")["total"]
    assert len(sess.branch()) == 50


# -- the exact recount ----------------------------------------------------------------
TOOLS = [{"name": "run_shell", "description": "Run a shell command and return its output.",
          "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


def build_rich_session(store, model):
    s = store.create_session(model=model, context_window=200_000, name=f"rich-{model}",
                             system_prompt="You are a careful assistant. 回答要简洁。",
                             metadata={"tool_result_cap": 60})
    s.tool_definitions = TOOLS
    ids = [
        s.append("user", "请帮我看看这个目录里有什么文件，然后总结一下。"),
        s.append("assistant", [
            {"type": "thinking", "thinking": "The user wants a listing; I will call run_shell."},
            {"type": "text", "text": "好的，我来看看。"},
            {"type": "tool_use", "id": "call_1", "name": "run_shell", "input": {"cmd": "ls -la ~/项目"}},
        ]),
        s.append("user", [{"type": "tool_result", "tool_use_id": "call_1",
                           "content": "\n".join(f"-rw-r--r-- 1 me me {i * 37} 文件{i}.txt" for i in range(80))}]),
        s.append("assistant", "There are 80 files, 文件0.txt to 文件79.txt."),
        s.append("user", "Thanks. Now the big log, please."),
        s.append("assistant", [{"type": "tool_use", "id": "call_2", "name": "run_shell",
                                "input": {"cmd": "tail -n 5 /var/log/app.log"}}]),
        s.append("user", [{"type": "tool_result", "tool_use_id": "call_2", "content": "ok: 5 lines"}]),
    ]
    return s, ids


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4", "my-local-llama"])
def test_occupancy_equals_full_recount(store, model):
    enc = ENCODING_OF[model]
    s, ids = build_rich_session(store, model)
    assert s.encoding.name == enc

    def check():
        occ = s.occupancy()
        ref = recount(s, enc)
        assert occ["total"] == occ["estimated_total"] == ref["total"]
        for part in ("system", "tools", "summary", "messages"):
            assert occ["breakdown"][part] == ref[part], part
        assert occ["breakdown"]["free"] == occ["window"] - occ["total"]
        return occ

    occ = check()
    assert occ["breakdown"]["tools"] > 0 and occ["breakdown"]["summary"] == 0
    # The long tool result is cut in the rendered form (and counted so); the store keeps it whole.
    rendered = {m.get("id"): m for m in s.rendered_history()}
    cut = rendered[ids[2]]["content"][0]["content"]
    assert "tokens cut from this tool result" in cut
    assert len(s.node(ids[2])["content"][0]["content"]) > len(cut.split("\n[…")[0])

    # A summary covering the first four messages.
    s1 = s._persist_summary("用户要求列出目录；共有 80 个文件。User then asked for the log.",
                            ids[3], s.head, s.generation)
    occ = check()
    assert occ["breakdown"]["summary"] > 0
    assert [m.get("id") for m in s.rendered_history()][1:] == [s1, *ids[4:]]

    # More turns, with thinking blocks and CJK, then a re-compaction that supersedes s1.
    ids.append(s.append("assistant", [{"type": "thinking", "thinking": "日志很短。"},
                                      {"type": "text", "text": "The log has five OK lines."}]))
    check()
    s2 = s._persist_summary("Listing done; log checked: five OK lines. 一切正常。", ids[5], s.head, s.generation)
    check()
    assert s.active_summary().id == s2
    assert s.node(s2)["content"][0]["text"].startswith("Listing done")

    # Rewind into the newer summary's range: the older summary fits, and counts.
    s.rewind(ids[4])
    assert s.active_summary().id == s1
    check()
    fork = s.append("assistant", "分支上的回答。")
    check()
    s.rewind(ids[1])  # inside every summary's range: none renders
    assert s.active_summary() is None
    check()
    s.checkout(fork)
    check()

    # No tools: the category drops to zero, the recount still agrees.
    s.tool_definitions = []
    assert check()["breakdown"]["tools"] == 0


def test_model_change_recounts(store):
    s, _ = build_rich_session(store, "gpt-4o")
    o200k = s.occupancy()["total"]
    s.reset_context(model="gpt-4")
    occ = s.occupancy()
    assert occ["encoding"] == "cl100k_base"
    assert occ["total"] == recount(s, "cl100k_base")["total"] != o200k
    # A restart on the new model reads the same figure.
    store.close()
    again = ocw.Store(store.path).open_session(s.id)
    again.tool_definitions = TOOLS
    assert again.occupancy()["total"] == occ["total"]
    again.store.close()


def test_compact_without_a_provider_uses_the_offline_summarizer_and_a_bad_one_is_refused(store):
    """compact(provider=None): the session's own provider, else the offline summarizer — it
    compacts. Something that cannot complete is refused before anything is written."""
    s = store.create_session(model="gpt-4o", context_window=8000)
    for i in range(6):
        s.append_many([("user", f"question {i} about the loader " * 20), ("assistant", f"answer {i}: retry after 30 s " * 20)])
    head, n = s.head, rows(store)
    with pytest.raises(OcwError, match=r"provider takes a model provider \(ocw.providers.make_provider\(...\)\) or None"):
        s.compact(keep_recent_tokens=100, provider="offline")
    assert (s.head, rows(store), s.compaction_count) == (head, n, 0)
    res = s.compact(keep_recent_tokens=100)
    assert res.outcome == "succeeded" and s.compaction_count == 1 and s.active_summary() is not None


def test_a_reset_without_arguments_keeps_the_model_and_clears_the_baseline(store):
    """reset_context(): the same model, window and counts; the usage baseline goes (the
    next sample is legitimately smaller), the compaction count stays."""
    s = store.create_session(model="gpt-4o", context_window=8000)
    s.append_many([("user", "hello " * 50), ("assistant", "hi " * 50)])
    s.record_usage(400)
    assert s.occupancy()["basis"] == "measured"
    total, count = s.occupancy(as_sent=False)["total"], s.compaction_count
    s.reset_context()
    occ = s.occupancy()
    assert (s.model, s.context_window, occ["encoding"]) == ("gpt-4o", 8000, "o200k_base")
    assert occ["basis"] == "estimated" and s.compaction_count == count
    assert s.metadata.get("context_window") is None and occ["window"] == 8000  # the sample is gone
    assert occ["total"] == total  # the calibration it taught stays: the same figure, now estimated


def test_unknown_model_is_labelled_an_estimate(store):
    s = store.create_session(model="my-local-llama", context_window=8000)
    s.append("user", "hi")
    occ = s.occupancy()
    assert occ["encoding_exact"] is False and occ["encoding"] == "cl100k_base"  # views say "(estimate)"
    s.reset_context(model="gpt-4o")
    occ = s.occupancy()
    assert occ["encoding_exact"] is True and occ["encoding"] == "o200k_base"


def test_occupancy_fields(sess):
    a = sess.append("user", "hello")
    occ = sess.occupancy()
    assert set(occ) >= {"total", "window", "ratio", "breakdown", "basis", "generation", "head", "encoding",
                        "compaction_count", "session_id"}
    assert set(occ["breakdown"]) == {"system", "tools", "summary", "memory", "pins", "messages", "free"}
    assert occ["head"] == a and occ["generation"] == 0 and occ["window"] == 100_000
    assert occ["ratio"] == pytest.approx(occ["total"] / 100_000)
    assert occ["basis"] == "estimated"


# -- summaries ------------------------------------------------------------------------
def test_summary_persist_refuses_a_moved_branch(sess):
    ids = [sess.append("user", f"m{i}") for i in range(4)]
    gen, n = sess.generation, rows(sess.store)
    with pytest.raises(StoreError):
        sess._persist_summary("s", ids[1], ids[2], gen)  # HEAD moved on since
    with pytest.raises(StoreError):
        sess._persist_summary("s", ids[1], sess.head, gen + 1)  # a compaction happened meanwhile
    with pytest.raises(StoreError):
        sess._persist_summary("s", "n_not_a_node", sess.head, gen)  # not on the branch
    assert rows(sess.store) == n and sess.generation == gen and sess.compaction_count == 0
    assert stored_session_row(sess.store, sess.id)[1] == gen


def test_summary_never_moves_head_and_bumps_generation(sess):
    ids = [sess.append("user", f"m{i}") for i in range(4)]
    sid = sess._persist_summary("summary", ids[1], sess.head, sess.generation)
    assert sess.head == ids[-1] and sess.branch() == ids
    assert sess.generation == 1 and sess.compaction_count == 1
    meta, gen, head, _ = stored_session_row(sess.store, sess.id)
    assert (gen, head, meta["context_compaction_count"]) == (1, ids[-1], 1)
    with sess.store.db.connect() as con:
        parent, count, covers, role, name = con.execute(
            "SELECT parent_id, cover_count, covers_ids, role, name FROM nodes WHERE id = ?", [sid]).fetchone()
    # The covered range is a boundary (the last covered node, the count), not a list of ids.
    assert (parent, count, covers) == (ids[1], 2, None) and (role, name) == ("llm", "context/summary")
    assert sess.covered_ids(sid) == ids[:2]
    assert sid not in {b["id"] for b in sess.branches()}



def test_the_summaries_over_a_branch_leave_out_another_branchs(sess):
    """What the chat widget shows as the branch's summaries (history.summaries): after a
    rewind to before the covered range ends, and on the fork made there, none; with HEAD
    on the last covered message, or back on the old tip, the summary again."""
    ids = [sess.append("user", f"m{i}") for i in range(6)]
    sid = sess._persist_summary("summary of m0-m3", ids[3], sess.head, sess.generation)
    got = sess.branch_summaries()
    assert [(x["id"], x["cover_count"], x["active"]) for x in got] == [(sid, 4, True)]
    assert got[0]["content"][0]["text"] == "summary of m0-m3"
    sess.rewind(ids[3])  # the last covered message: still over this branch
    assert [x["id"] for x in sess.branch_summaries()] == [sid]
    sess.rewind(ids[2])  # one before it: not
    assert sess.branch_summaries() == []
    sess.append("user", "another m3")
    assert sess.branch_summaries() == []
    sess.checkout(ids[-1])
    assert [x["id"] for x in sess.branch_summaries()] == [sid]

# -- usage samples, basis and the compaction count -------------------------------------------------
def test_measured_basis_lives_only_as_long_as_head_and_generation(sess):
    a = sess.append("user", "hello")
    b = sess.append("assistant", "hi there")
    est = sess.occupancy()["total"]
    sess.record_usage(est + 40)
    occ = sess.occupancy()
    assert occ["basis"] == "measured" and occ["total"] == est + 40 and occ["estimated_total"] == est
    assert occ["calibration"] == pytest.approx((est + 40) / est, abs=1e-3)

    sess.append("user", "next")  # HEAD moved by an append
    assert sess.occupancy()["basis"] == "estimated"
    sess.record_usage(est + 90)
    assert sess.occupancy()["basis"] == "measured"
    sess.rewind(b)  # HEAD moved back
    assert sess.occupancy()["basis"] == "estimated"
    sess.checkout(a)
    assert sess.occupancy()["basis"] == "estimated"

    sess.checkout(b)
    sess.record_usage(est + 10)
    assert sess.occupancy()["basis"] == "measured"
    sample = sess.metadata["context_window"]
    sess._persist_summary("s", a, sess.head, sess.generation)  # generation bump, HEAD unchanged
    assert sess.head == b
    assert sess.occupancy()["basis"] == "estimated"
    # Even if the old sample came back (a late delivery written by another kernel), it is for
    # the old generation: HEAD alone does not make it apply.
    sess.set_metadata(context_window=sample)
    assert sess.metadata["context_window"]["head"] == sess.head
    assert sess.occupancy()["basis"] == "estimated"
    sess.record_usage(est)
    assert sess.occupancy()["basis"] == "measured"


def test_compaction_count_rules_through_the_session(sess):
    a = sess.append("user", "hello")
    sess.append("assistant", "hi")
    assert sess.record_usage(1000) is False  # first sample: baseline only
    assert sess.compaction_count == 0
    assert sess.record_usage(1200) is False  # higher: nothing
    sess.append("user", "more")
    assert sess.record_usage(400) is True  # the provider shed context
    assert sess.compaction_count == 1
    assert sess.record_usage(400) is False  # the same sample delivered twice counts once
    assert sess.compaction_count == 1
    assert stored_session_row(sess.store, sess.id)[0]["context_compaction_count"] == 1

    # A rewind clears the baseline and keeps the count: the next, smaller sample is legitimate.
    sess.rewind(a)
    assert sess.metadata["context_window"] is None
    assert sess.record_usage(100) is False and sess.compaction_count == 1
    # A branch switch likewise.
    leaf = sess.append("assistant", "another answer")
    sess.record_usage(900)
    sess.checkout(a)
    assert sess.record_usage(50) is False and sess.compaction_count == 1
    # A context reset / model change likewise.
    sess.checkout(leaf)
    sess.record_usage(800)
    sess.reset_context(model="gpt-4.1")
    assert sess.metadata["context_window"] is None
    assert sess.record_usage(10) is False and sess.compaction_count == 1
    # ocw's own compaction counts exactly and resets the baseline.
    sess.record_usage(700)
    sess._persist_summary("sum", a, sess.head, sess.generation)
    assert sess.compaction_count == 2
    assert sess.record_usage(300) is False and sess.compaction_count == 2
    # Invalid samples change nothing.
    rev = stored_session_row(sess.store, sess.id)[3]
    assert sess.record_usage(None) is False and sess.record_usage(-1) is False
    assert stored_session_row(sess.store, sess.id)[3] == rev and sess.compaction_count == 2


def test_a_sample_that_cannot_be_persisted_changes_nothing(sess, monkeypatch):
    sess.append("user", "hello")
    sess.record_usage(1000)
    before_mem = (sess.metadata, sess.compaction_count, sess.occupancy())
    before_file = stored_session_row(sess.store, sess.id)

    def broken_bump(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(sess.backend, "_write_row", broken_bump)
    with pytest.raises(OSError):
        sess.record_usage(200)  # would have counted an inferred compaction
    monkeypatch.undo()
    assert (sess.metadata, sess.compaction_count, sess.occupancy()) == before_mem
    assert stored_session_row(sess.store, sess.id) == before_file
    # And the next, persisted sample is judged against the old baseline.
    assert sess.record_usage(200) is True and sess.compaction_count == 1


def test_failed_append_changes_nothing(sess, monkeypatch):
    a = sess.append("user", "hello")
    occ = sess.occupancy()
    n = rows(sess.store)

    def broken_bump(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(sess.backend, "_write_row", broken_bump)
    with pytest.raises(OSError):
        sess.append("assistant", "lost")
    monkeypatch.undo()
    assert rows(sess.store) == n and sess.head == a and sess.occupancy() == occ
    b = sess.append("assistant", "kept")
    assert sess.branch() == [a, b]


def test_restart_shows_the_same_occupancy_and_count(store):
    s, ids = build_rich_session(store, "gpt-4o")
    s._persist_summary("summary of the listing", ids[3], s.head, s.generation)
    s.append("assistant", "done")
    s.record_usage(s.occupancy()["total"] + 25)
    s.append("user", "one more")
    s.record_usage(10)  # inferred compaction: count 2
    before = s.occupancy()
    assert before["basis"] == "measured" and before["compaction_count"] == 2
    store.close()

    store2 = ocw.Store(store.path)
    t = store2.open_session(s.name)
    t.tool_definitions = TOOLS  # tool definitions belong to the kernel, not the file
    after = t.occupancy()
    for key in ("total", "estimated_total", "breakdown", "basis", "generation", "head", "compaction_count",
                "window", "encoding"):
        assert after[key] == before[key], key
    assert t.compaction_count == 2
    store2.close()


def test_tool_result_cap_change_keeps_the_recount_exact(store):
    s, ids = build_rich_session(store, "gpt-4o")  # cap 60: the 80-line listing is cut
    gen = s.generation
    small = s.occupancy()["total"]
    s.set_tool_result_cap(4000)  # now the listing renders whole
    occ = s.occupancy()
    assert occ["total"] == recount(s, "o200k_base")["total"] > small
    assert s.generation == gen + 1  # what renders changed without HEAD moving
    other = ocw.Store(store.path)
    try:
        t = other.open_session(s.id)
        t.tool_definitions = TOOLS
        assert t.occupancy()["total"] == occ["total"]
    finally:
        other.close()


def test_content_cache_is_bounded_and_history_still_complete(store, monkeypatch):
    """A long-lived kernel keeps only recent messages parsed in memory; the rest
    are read back from the file, so rendered_history is still whole and exact."""
    monkeypatch.setattr(ocw.conversation.branch_view, "CONTENT_CACHE", 3)
    s = store.create_session(model="gpt-4o", context_window=100_000, system_prompt="x")
    for i in range(10):
        s.append("user" if i % 2 == 0 else "assistant", f"message number {i}")
    assert len(s._content) == 3
    texts = [m["content"][0]["text"] for m in s.rendered_history() if m.get("id")]
    assert texts == [f"message number {i}" for i in range(10)]
