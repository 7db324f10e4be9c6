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
