"""A compaction as its listeners and callers see it (ocw/conversation/compaction.py), on a
real DuckDB file: the events in order (started, one progress per summarizer call,
finished, then the ring's new figure), "manual" when no trigger is named, a failing
summarizer a "failed" result while the stop button still stops, and nothing saved."""
from __future__ import annotations

import pytest

from ocw.conversation import compaction


@pytest.fixture
def sess(store):
    s = store.create_session(context_window=16_000)
    s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 400) for i in range(40)])
    return s


def test_the_events_in_order_and_the_ring_told_the_new_figure(sess, fake_summarizer):
    seen = []
    sess.events.subscribe(lambda name, payload: seen.append((name, payload)))
    fake = fake_summarizer("Summary so far.", context_window=2_000)  # a small window: several calls
    result = compaction.compact(sess, provider=fake)
    names = [n for n, _ in seen]
    calls = len(fake.calls)
    assert calls >= 2 and result.outcome == "succeeded" and result.trigger == "manual"
    assert names == ["compaction_started"] + ["compaction_progress"] * calls + ["compaction_finished",
                                                                                "occupancy_changed"]
    assert [p["call"] for n, p in seen if n == "compaction_progress"] == list(range(1, calls + 1))
    assert seen[-1][1]["total"] == result.tokens_after == sess.occupancy()["total"] < result.tokens_before
    assert sess.metadata["compactions"][-1]["trigger"] == "manual"


def test_a_failing_summarizer_is_a_failed_result_and_a_stop_still_stops(sess, fake_summarizer):
    state = (sess.head, sess.generation, sess.compaction_count)
    failed = compaction.compact(sess, provider=fake_summarizer(raises=RuntimeError("server down")))
    assert failed.outcome == "failed" and "server down" in failed.error
    with pytest.raises(KeyboardInterrupt):
        compaction.compact(sess, provider=fake_summarizer(raises=KeyboardInterrupt()))
    assert (sess.head, sess.generation, sess.compaction_count) == state and sess.active_summary() is None
    assert not sess.compaction_running and sess.compact_lock.acquire(blocking=False)
    sess.compact_lock.release()
