"""%compact --undo at the session level, on both backends (DuckDB file, PostgreSQL):
the newest summary stops rendering through an appended record, the one before it
(or none) renders again, the generation bumps, the lifetime count stays and says
how many were undone, nothing is deleted, and a second store reads the same."""
from __future__ import annotations

import pytest

import ocw
from ocw.context import undo_log
from ocw.text.errors import OcwError


@pytest.fixture(params=["duckdb", "postgresql"])
def store(request, tmp_path):
    where = str(tmp_path / "s.duckdb") if request.param == "duckdb" else request.getfixturevalue("pg_url")
    s = ocw.Store(where)
    assert s.backend.kind == request.param
    yield s
    s.close()


def grow(s, n, tag):
    s.append_many([("user" if i % 2 == 0 else "assistant", f"{tag} {i} " + "words " * 300) for i in range(n)])


def two_compactions(s, fake_summarizer):
    grow(s, 20, "early")
    first = s.compact(provider=fake_summarizer("FIRST summary of the early turns"))
    grow(s, 20, "later")
    history_before_second = s.rendered_history()
    second = s.compact(provider=fake_summarizer("SECOND summary of the later turns"))
    assert first.outcome == second.outcome == "succeeded"
    return first, second, history_before_second


def test_undo_brings_back_the_summary_before_and_then_none(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    first, second, history_before_second = two_compactions(s, fake_summarizer)
    assert s.active_summary().id == second.summary_id and s.compaction_count == 2
    nodes_before = s.backend.node_count(s.id)
    generation, head = s.generation, s.head

    undone = s.undo_compaction()
    assert undone["summary"] == second.summary_id and undone["active"] == first.summary_id
    assert s.active_summary().id == first.summary_id
    assert s.rendered_history() == history_before_second  # the model reads what it read before compaction 2
    assert undone["tokens_before"] == second.tokens_after and undone["tokens_after"] == second.tokens_before
    assert s.occupancy()["total"] == second.tokens_before
    assert s.generation == generation + 1 and s.head == head
    assert (s.compaction_count, undone["count"], undone["undone"]) == (2, 2, 1)  # the count is not decreased
    assert s.backend.node_count(s.id) == nodes_before  # nothing appended as a node, nothing deleted
    assert [n.id for n in s.summaries()] == [first.summary_id, second.summary_id]

    again = s.undo_compaction()
    assert again["active"] is None and s.active_summary() is None
    texts = [m for m in s.rendered_history() if m["role"] != "system"]
    assert not any(m.get("name") == "context/summary" for m in texts)
    assert len([m for m in texts if m["role"] in ("user", "assistant")]) == 40  # the whole branch again
    assert (s.compaction_count, again["undone"], s.generation) == (2, 2, generation + 2)

    with pytest.raises(OcwError, match="Nothing to undo: no summary is active on this branch"):
        s.undo_compaction()
    assert (s.generation, undo_log.undone_count(s.metadata)) == (generation + 2, 2)


def test_an_undo_is_what_a_second_store_reads_and_a_new_compaction_supersedes_the_one_before(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    first, second, _ = two_compactions(s, fake_summarizer)
    s.undo_compaction()
    two = ocw.Store(store.path)
    try:
        t = two.open_session(s.id)
        assert t.active_summary().id == first.summary_id
        assert (t.generation, t.compaction_count) == (s.generation, 2)
        assert t.rendered_history() == s.rendered_history()
        assert [row["undone"] for row in t.branch_summaries()] == [False, True]
    finally:
        two.close()
    third = s.compact(provider=fake_summarizer("THIRD summary, after the undo"))
    assert third.outcome == "succeeded" and s.active_summary().id == third.summary_id
    assert s.active_summary().supersedes == first.summary_id  # not the undone one
    assert (s.compaction_count, undo_log.undone_count(s.metadata)) == (3, 1)


def test_undo_waits_for_no_compaction_and_refuses_during_one(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    two_compactions(s, fake_summarizer)
    assert s.compact_lock.acquire(blocking=False)
    try:
        with pytest.raises(OcwError, match="already running"):
            s.undo_compaction()
    finally:
        s.compact_lock.release()
    assert undo_log.undone_count(s.metadata) == 0


def test_the_undo_log_reads_only_well_formed_entries_and_never_lists_one_twice():
    """A hand-edited or foreign metadata list: what is not {summary: str, …} is not an undo."""
    meta = {"undone_summaries": ["m_1", {"at": "t0"}, {"summary": 7}, {"summary": "m_2", "at": "t1"}]}
    assert undo_log.entries(meta) == [{"summary": "m_2", "at": "t1"}]
    assert undo_log.undone_ids(meta) == frozenset({"m_2"}) and undo_log.undone_count(meta) == 1
    assert undo_log.entries({"undone_summaries": {"summary": "m_3"}}) == []  # not a list: no undo
    again = undo_log.with_undone(meta, "m_2", "t2")
    assert again is meta  # already undone: the same metadata, nothing appended
    more = undo_log.with_undone(meta, "m_4", "t3")
    assert more["undone_summaries"] == [{"summary": "m_2", "at": "t1"}, {"summary": "m_4", "at": "t3"}]
    assert meta["undone_summaries"][-1] == {"summary": "m_2", "at": "t1"}  # the old metadata untouched


def test_undo_refuses_when_the_session_changed_between_reading_and_writing(store, fake_summarizer):
    """Another kernel pins (the generation moves, HEAD does not) while this undo measures:
    the undo writes nothing and says so in one line; the summary stays active."""
    from ocw.conversation import pinning

    s = store.create_session(context_window=16_000)
    _, second, _ = two_compactions(s, fake_summarizer)
    other = ocw.Store(store.path)
    measure = s.occupancy

    def occupancy_while_another_kernel_pins():
        pinning.pin(other.open_session(s.id), "pinned elsewhere")
        return measure()

    s.occupancy = occupancy_while_another_kernel_pins
    try:
        with pytest.raises(OcwError, match="^the conversation changed while undoing; nothing was changed"):
            s.undo_compaction()
    finally:
        del s.occupancy
        other.close()
    s.sync()
    assert s.active_summary().id == second.summary_id and undo_log.undone_count(s.metadata) == 0
    assert s.compact_lock.acquire(blocking=False)  # the lock was given back
    s.compact_lock.release()


def test_the_undo_line_names_the_summary_active_again_or_none():
    from ocw.conversation.undo import undo_message

    prev = {"summary": "m_2", "active": "m_1", "tokens_before": 12_000, "tokens_after": 15_500, "count": 2,
            "undone": 1}
    assert undo_message(prev).startswith("Undid compaction m_2: summary m_1 is active again, 12,000 → 15,500 tokens")
    assert undo_message(prev, "zh").startswith("已撤销压缩 m_2：摘要 m_1 重新生效，12,000 → 15,500 tokens")
    none = dict(prev, active=None)
    assert undo_message(none).startswith("Undid compaction m_2: no summary is active now, the whole branch is read "
                                         "again, 12,000 → 15,500 tokens")
