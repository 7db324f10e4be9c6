"""The cached view of a session (ocw/conversation/branch_view.py) on a real DuckDB file:
what another kernel did is seen (a deleted session says so), a node of another branch is
not on this one, a model with another tokenizer recounts the branch to the figures a
fresh session would have, and the chat widget's page is 40 messages."""
from __future__ import annotations

import pytest

import ocw
from ocw.text.errors import InvalidArgument, OcwError, StoreError


def chat(s, n, tag="m"):
    s.append_many([("user" if i % 2 == 0 else "assistant", f"{tag} {i}: " + "上下文压缩测试，模型会读取摘要。" * 10)
                   for i in range(n)])


def test_a_session_deleted_by_another_kernel_says_so(store):
    s = store.create_session(name="gone")
    chat(s, 2)
    other = ocw.Store(store.path)
    try:
        other.delete_session("gone")
    finally:
        other.close()
    with pytest.raises(StoreError, match=f"session {s.id} vanished from "):
        s.sync()


def test_a_node_of_another_branch_is_not_on_this_one(store):
    s = store.create_session()
    chat(s, 4)
    first = s.branch()
    s.rewind(first[1])
    chat(s, 4, "other")  # a second branch forks after message 1
    assert s.branch()[:2] == first[:2] and first[2] not in s.branch()
    with pytest.raises(InvalidArgument, match="is not on the current branch"):
        s.rewind(first[2])  # depth 3 ≤ HEAD's depth 6, on the other branch
    with pytest.raises(InvalidArgument, match="is not on the current branch"):
        s.rewind(first[3])
    s.rewind(first[0])  # an ancestor: fine
    assert s.head == first[0]
    with pytest.raises(OcwError, match="'nope' is not a message of this session"):
        s.node("nope")


def test_another_tokenizer_recounts_the_branch_as_a_fresh_session_counts_it(store):
    s = store.create_session(model="gpt-4")  # cl100k
    chat(s, 10)
    fresh = store.create_session(model="gpt-4o")  # o200k
    chat(fresh, 10)
    assert s.occupancy()["total"] != fresh.occupancy()["total"]
    s.reset_context(model="gpt-4o")
    assert [m["tokens"] for m in s.rendered_history()] == [m["tokens"] for m in fresh.rendered_history()]
    assert s.occupancy()["total"] == fresh.occupancy()["total"]
    assert s.node(s.head)["tokens"] == fresh.node(fresh.head)["tokens"]


def test_the_chat_widgets_page_is_40_messages(store):
    s = store.create_session()
    chat(s, 41)
    page, older = s.page()
    assert len(page) == 40 and older is True and page[-1]["id"] == s.head
    page, older = s.page(limit=41)
    assert len(page) == 41 and older is False


def test_a_session_row_at_rev_0_as_an_upgraded_old_file_has_it_shows_its_summary(tmp_db, fake_summarizer):
    """Migration 'rev' (store/duckdb/migrations.py) adds the column with DEFAULT 0: a session
    compacted before it reads rev 0. Opening it must still load its summary."""
    import duckdb

    st = ocw.Store(tmp_db)
    s = st.create_session(name="old", context_window=16_000)
    chat(s, 20)
    summary = s.compact(provider=fake_summarizer("OLD summary"), keep_recent_tokens=500).summary_id
    assert summary is not None
    st.close()
    con = duckdb.connect(tmp_db)
    con.execute("UPDATE sessions SET rev = 0")
    con.close()
    st = ocw.Store(tmp_db)
    try:
        t = st.open_session("old")
        assert t.active_summary() is not None and t.active_summary().id == summary
        assert "OLD summary" in t.rendered_history()[0]["content"][0]["text"]
    finally:
        st.close()


def test_a_branch_left_behind_by_a_tokenizer_switch_is_recounted_when_checked_out(store):
    """reset_context recounts HEAD's branch only; the other branch's own messages are
    counted with the old tokenizer until HEAD goes there, then recounted once."""
    s = store.create_session(model="gpt-4")
    chat(s, 2)
    fork = s.head
    chat(s, 6, "b")
    other_leaf = s.head
    s.rewind(fork)
    chat(s, 2, "a")
    s.reset_context(model="gpt-4o")
    s.checkout(other_leaf)
    fresh = store.create_session(model="gpt-4o")
    chat(fresh, 2)
    chat(fresh, 6, "b")
    assert [m["tokens"] for m in s.rendered_history()] == [m["tokens"] for m in fresh.rendered_history()]
    assert s.occupancy()["total"] == fresh.occupancy()["total"]


def test_an_own_write_reads_nothing_back_and_another_kernels_write_is_read_once(store, monkeypatch):
    """The turn path's reads: an append of ours moves the revision by exactly one, so the
    view reads no rows back and looks for no new summary (only another kernel's write can
    have brought either); after another kernel's append its message is the new head, and
    no summary is looked for — the generation did not move (a compaction's does:
    test_session_backends.py, two kernels writing one session)."""
    s = store.create_session(name="reads")
    chat(s, 4)
    s.occupancy()
    reads: list[str] = []
    for name in ("summaries", "nodes_since"):
        real = getattr(s.backend, name)
        monkeypatch.setattr(s.backend, name, lambda *a, _n=name, _r=real, **k: (reads.append(_n), _r(*a, **k))[1])
    for i in range(3):
        s.append("user" if i % 2 == 0 else "assistant", f"own {i}")
        s.occupancy()
    assert reads == []
    other = ocw.Store(store.path)
    try:
        other.open_session("reads").append("user", "from another kernel")
    finally:
        other.close()
    s.sync()
    assert reads.count("summaries") == 0
    assert s.node(s.head)["content"] == [{"type": "text", "text": "from another kernel"}]
