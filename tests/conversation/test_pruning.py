"""Pruning old tool output at the session level (ocw/conversation/pruning.py), on a real
DuckDB file: one write (the mark, a generation, the lifetime count), figures in the ring's
tokens, nothing written when nothing is worth it, refused when another kernel changed
the session between reading and writing."""
from __future__ import annotations

import pytest

import ocw
from ocw.conversation import pinning, pruning
from ocw.text.errors import StoreError

RESULT = "\n".join(f"line {i}: GET /api/orders/{i} 200" for i in range(150))  # ~1.5k tokens


def tool_turns(s, n):
    for k in range(n):
        s.append_many([("user", f"read day {k}"),
                       ("assistant", [{"type": "tool_use", "id": f"t{k}", "name": "read_log", "input": {"day": k}}]),
                       ("tool", [{"type": "tool_result", "tool_use_id": f"t{k}", "content": RESULT}]),
                       ("assistant", f"day {k} looks fine")])


@pytest.fixture
def sess(store):
    s = store.create_session(context_window=16_000)
    tool_turns(s, 6)
    return s


def sent_results(s) -> list[str]:
    return [b["content"] for m in s.rendered_history() for b in m["content"] if b.get("type") == "tool_result"]


def test_a_prune_stubs_the_old_results_in_one_write_and_counts_itself(sess):
    gen, head, before = sess.generation, sess.head, sess.occupancy()["total"]
    done = sess.prune_tool_output(keep_tokens=2_000)
    results = sent_results(sess)
    stubbed = [r for r in results if r.startswith("[old tool output pruned: read_log(")]
    assert done["results"] == len(stubbed) == 5 and results[-1] == RESULT  # the newest kept whole
    assert done["before"] == before and done["after"] == sess.occupancy()["total"] == before - done["freed"]
    assert done["freed"] > 5 * 1_000
    assert (sess.generation, sess.head) == (gen + 1, head)
    assert sess.metadata[pruning.COUNT_KEY] == 1 and sess.metadata[pruning.META_KEY]["results"] == 5
    assert sess.prune_tool_output(keep_tokens=2_000) is None  # the same mark again: nothing written
    assert sess.generation == gen + 1 and sess.metadata[pruning.COUNT_KEY] == 1
    tool_turns(sess, 6)
    again = sess.prune_tool_output(keep_tokens=2_000)
    assert again["results"] == 6 and sess.metadata[pruning.COUNT_KEY] == 2  # counted, not reset


def test_a_prune_that_frees_under_5_percent_of_the_window_writes_nothing(store):
    s = store.create_session(context_window=200_000)  # 5 %: 10,000 tokens; one old result frees ~1.5k
    tool_turns(s, 2)
    gen = s.generation
    assert s.prune_tool_output(keep_tokens=2_000) is None
    assert s.generation == gen and pruning.META_KEY not in s.metadata
    assert all(r == RESULT for r in sent_results(s))


def test_a_prune_is_refused_when_another_kernel_changed_the_session_meanwhile(store, sess):
    other = ocw.Store(store.path)
    measure = sess.occupancy

    def occupancy_while_another_kernel_pins():
        pinning.pin(other.open_session(sess.id), "pinned elsewhere")  # generation moves, HEAD does not
        return measure()

    sess.occupancy = occupancy_while_another_kernel_pins
    try:
        with pytest.raises(StoreError, match="^the conversation changed while pruning; nothing was saved"):
            sess.prune_tool_output(keep_tokens=2_000)
    finally:
        del sess.occupancy
        other.close()
    sess.sync()
    assert pruning.META_KEY not in sess.metadata and all(r == RESULT for r in sent_results(sess))


def test_by_default_the_tail_a_compaction_keeps_is_kept_whole(sess):
    """16,000-token window: the default tail is 25 % of it, 4,000 tokens — the newest two
    results of ~1.5k each; the four older are stubbed."""
    done = pruning.prune(sess)
    results = sent_results(sess)
    assert done["results"] == 4 and results[4:] == [RESULT, RESULT]
    assert all(r.startswith("[old tool output pruned: read_log(") for r in results[:4])


def test_the_ring_is_told_the_figure_after_a_prune(sess):
    seen = []
    sess.events.subscribe(lambda name, payload: seen.append((name, payload)))
    done = sess.prune_tool_output(keep_tokens=2_000)
    assert [n for n, _ in seen] == ["occupancy_changed"] and seen[0][1]["total"] == done["after"]
