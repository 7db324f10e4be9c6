"""What a pruned session renders (ocw/conversation/pruned_view.py), on a real DuckDB file:
each stub names the call whose result it replaces, also when another store opens the
file; the ring's pruned figure; the mark stops applying once a compaction covers it or
HEAD leaves its branch."""
from __future__ import annotations

import re

import ocw

RESULT = "\n".join(f"line {i}: GET /api/orders/{i} 200" for i in range(150))
STUB = re.compile(r'^\[old tool output pruned: read_log\(\{"day": (\d+)\}\) returned ([\d,]+) tokens; ')


def tool_turns(s, n, start=0):
    for k in range(start, start + n):
        s.append_many([("user", f"read day {k}"),
                       ("assistant", [{"type": "tool_use", "id": f"t{k}", "name": "read_log", "input": {"day": k}}]),
                       ("tool", [{"type": "tool_result", "tool_use_id": f"t{k}", "content": RESULT}]),
                       ("assistant", f"day {k} looks fine")])


def pruned(store, window: int, turns: int = 6):
    """A session of `turns` tool turns whose older results were pruned to keep 2,000 tokens."""
    s = store.create_session(context_window=window)
    tool_turns(s, turns)
    return s, s.prune_tool_output(keep_tokens=2_000)


def results(s) -> list[str]:
    return [b["content"] for m in s.rendered_history() for b in m["content"] if b.get("type") == "tool_result"]


def test_each_stub_names_its_call_in_this_store_and_in_another(store):
    s = store.create_session(context_window=16_000)
    tool_turns(s, 6)
    assert s.pruned() == (0, 0) and "pruned" not in s.occupancy()
    done = s.prune_tool_output(keep_tokens=2_000)
    days = [int(STUB.match(r).group(1)) for r in results(s)[:5]]
    assert days == [0, 1, 2, 3, 4] and results(s)[5] == RESULT
    assert s.occupancy()["pruned"] == {"results": 5, "tokens": done["freed"]}
    assert s.pruned() == (done["freed"], 5)
    other = ocw.Store(store.path)  # a fresh Session: no stub cached, no contents read yet
    try:
        t = other.open_session(s.id)
        assert results(t) == results(s)
        assert t.occupancy()["pruned"] == {"results": 5, "tokens": done["freed"]}
        assert t.occupancy()["total"] == s.occupancy()["total"]
    finally:
        other.close()


def test_the_mark_stops_applying_off_its_branch_and_once_a_compaction_covers_it(store, fake_summarizer):
    s = store.create_session(context_window=16_000)
    tool_turns(s, 6)
    fork = s.head
    s.prune_tool_output(keep_tokens=2_000)
    mark = s.prune_mark()
    assert mark is not None and s.node(mark.id)["role"] == "tool"
    s.rewind(s.node(mark.id)["parent_id"])  # before the mark: its results come back whole
    assert s.prune_mark() is None and s.pruned() == (0, 0) and all(r == RESULT for r in results(s))
    s.checkout(fork)
    assert s.prune_mark() is not None and s.pruned()[1] == 5
    tool_turns(s, 6, start=6)
    assert s.compact(provider=fake_summarizer("S"), keep_recent_tokens=2_000).outcome == "succeeded"
    assert s.prune_mark() is None and "pruned" not in s.occupancy()  # folded into the summary


def test_a_fresh_store_counts_the_pruned_figure_after_a_compaction_moved_the_boundary(store, fake_summarizer):
    """The figure stored with the mark is for the boundary it was made under; once a
    compaction moves the boundary (leaving the mark in the tail), a kernel that opens the
    file counts the stubs itself — reading their calls — before anything renders."""
    s, _ = pruned(store, 32_000, 10)
    hist = s.rendered_history()
    start = next(i for i, m in enumerate(hist) if m["role"] == "user" and "read day 3" in m["content"][0]["text"])
    keep = sum(m["tokens"] for m in hist[start:])  # fold turns 0-2, keep 3-9 (the mark is turn 8's result)
    assert s.compact(provider=fake_summarizer("S"), keep_recent_tokens=keep).outcome == "succeeded"
    mark = s.prune_mark()
    assert mark is not None and s.node(s.active_summary().parent_id)["depth"] < mark.depth
    saved, n = s.pruned()
    other = ocw.Store(store.path)
    try:
        t = other.open_session(s.id)
        assert t.occupancy()["pruned"] == {"results": n, "tokens": saved} and n >= 2
        assert results(t) == results(s)
    finally:
        other.close()


def test_a_session_that_starts_with_a_tool_call_names_it_in_the_stub(store):
    s = store.create_session(context_window=16_000)
    s.append_many([("assistant", [{"type": "tool_use", "id": "t0", "name": "read_log", "input": {"day": 0}}]),
                   ("tool", [{"type": "tool_result", "tool_use_id": "t0", "content": RESULT}]),
                   ("assistant", "day 0 looks fine")])
    tool_turns(s, 5, start=1)
    s.prune_tool_output(keep_tokens=2_000)
    assert [int(STUB.match(r).group(1)) for r in results(s)[:5]] == [0, 1, 2, 3, 4]


def test_a_kernel_counts_what_another_pruned_and_compacted_since_it_last_rendered(store, fake_summarizer):
    """Kernel A rendered under the first mark; kernel B appends, prunes further and
    compacts (the stored figure no longer applies): A counts the newly pruned results
    itself, reading the calls just before them, to B's figure."""
    s, _ = pruned(store, 32_000)
    assert len(results(s)) == 6  # A has rendered (and made its stubs) under the first mark
    other = ocw.Store(store.path)
    try:
        t = other.open_session(s.id)
        tool_turns(t, 6, start=6)
        t.prune_tool_output(keep_tokens=2_000)
        hist = t.rendered_history()
        start = next(i for i, m in enumerate(hist) if m["role"] == "user" and "read day 3" in m["content"][0]["text"])
        assert t.compact(provider=fake_summarizer("S"), keep_recent_tokens=sum(m["tokens"] for m in hist[start:])) \
            .outcome == "succeeded"
        s.sync()
        assert s.occupancy()["pruned"] == t.occupancy()["pruned"] and s.pruned()[1] == 8
        assert s.occupancy()["total"] == t.occupancy()["total"]
    finally:
        other.close()


def test_after_undoing_the_compaction_a_prune_was_made_under_the_stubs_cover_the_whole_branch(store, fake_summarizer):
    s = store.create_session(context_window=32_000)
    tool_turns(s, 4)
    assert s.compact(provider=fake_summarizer("S"), keep_recent_tokens=100).outcome == "succeeded"
    tool_turns(s, 6, start=4)
    s.prune_tool_output(keep_tokens=2_000)  # made under the summary: turns 4-8 stubbed
    assert s.pruned()[1] == 5
    s.undo_compaction()  # the whole branch is read again, the mark still applies
    assert s.active_summary() is None and s.prune_mark() is not None
    stubbed = [r for r in results(s) if STUB.match(r)]
    assert len(stubbed) == 9 and s.pruned()[1] == 9 and s.occupancy()["pruned"]["results"] == 9


def test_a_compaction_that_folds_exactly_up_to_the_mark_ends_it(store, fake_summarizer):
    s, _ = pruned(store, 32_000)
    mark = s.prune_mark()
    hist = s.rendered_history()
    after_mark = next(k for k, m in enumerate(hist) if m.get("id") == mark.id) + 1
    r = s.compact(provider=fake_summarizer("S"), keep_recent_tokens=sum(m["tokens"] for m in hist[after_mark:]))
    assert r.outcome == "succeeded" and s.active_summary().parent_id == mark.id  # the boundary is the mark
    assert s.prune_mark() is None and s.pruned() == (0, 0) and "pruned" not in s.occupancy()
