"""A compaction's output is pinned (issue 28, item 3): making the identifier pass one pass,
the offline summarizer's scoring linear and its counts once per text must not change a
byte of what is stored. The digests below were produced by the algorithm before that
work (commit cb9d18c9: one regex per identifier, per-sentence re-reads and recounts) on
these fixed inputs; the summary node's content (prose, identifier list, memory block)
and the compaction log's `lost` record must come out the same. Then a compaction as its
listeners and callers see it, on a real DuckDB file: the events in order (started, one
progress per summarizer call, finished, then the ring's new figure), "manual" when no
trigger is named, a failing summarizer a "failed" result while the stop button still
stops, and nothing saved."""
from __future__ import annotations

import hashlib
import json

import pytest

import ocw
from ocw.bench.build import build_session
from ocw.bench.quality_gen import generate
from ocw.context.render import block_text
from ocw.conversation import compaction, pinning
from ocw.providers.offline import OfflineProvider


def _session(store, kind: str, seed: int, window: int):
    if kind == "built":  # the benchmarks' mix: chat, tool calls, ~2k-token logs
        return build_session(store, seed, window=window, verify=2)
    s = store.create_session(model="ocw-offline", context_window=window)
    msgs = []
    for k, st in enumerate(generate(seed, 70, "A").steps):  # planted facts of every kind
        if st.kind == "tool":
            msgs += [("assistant", [{"type": "tool_use", "id": f"q{k}", "name": "run_cell", "input": {"code": "show()"}}]),
                     ("tool", [{"type": "tool_result", "tool_use_id": f"q{k}", "content": st.text}])]
        else:
            msgs += [("user", [{"type": "text", "text": st.text}]),
                     ("assistant", [{"type": "text", "text": "Noted: " + st.text[:80]}])]
    s.append_many(msgs)
    return s


@pytest.mark.parametrize("kind, seed, window, focus, folded, prose_chars, lost_idents, digest", [
    ("gen", 3, 16000, None, 130, 21017, 483, "d4f3d8ef1c4bbf111fa91119b5a154d78ab53376459d6b07c3efa37ba385557c"),
    ("gen", 4, 32000, "keep the file paths", 98, 19812, 148,
     "a989e7ae05faab2397917515c24435359ceab001d88f0d72603eba3bf85df2ad"),
    ("gen", 5, 200000, None, 26, 6085, 0, "6babf15bb71ac9ce9ed433ccdcc28a38e1296715467fc86980bdf0db1b551800"),
    ("built", 200, 32000, None, 174, 16920, 490, "ce0e22385f8a200a809d0afd62a732f0bb7a35dd6b425ce874fa732a5a9a5847"),
    # a focus of terms only (no identifier kind), and one that names a kind
    ("gen", 6, 16000, "the deployment budget and the rollout", 130, 16591, 593,
     "23dccf6db5ed227c84f464a47ebda07b5b81c4f2f8f09b27310a606f578a5d59"),
    ("gen", 7, 16000, "keep the errors", 130, 16256, 523,
     "db060a8b525c1887b05328b6c628b555ccac111ee35612f03d35cd44a1bab801"),
])
def test_a_compaction_stores_what_the_earlier_algorithm_stored(tmp_path, kind, seed, window, focus, folded,
                                                                prose_chars, lost_idents, digest):
    store = ocw.Store(str(tmp_path / "pin.duckdb"))
    try:
        s = _session(store, kind, seed, window)
        res = s.compact(provider=OfflineProvider(context_window=window), focus=focus)
        assert res.outcome == "succeeded" and res.summarised_count == folded
        content = s._contents([s._rows.get(res.summary_id)])[res.summary_id]
        lost = s.metadata["compactions"][-1]["lost"]
    finally:
        store.close()
    assert (len(content[0]["text"]), lost["n_identifiers"]) == (prose_chars, lost_idents)
    assert hashlib.sha256(json.dumps([content, lost], sort_keys=True).encode()).hexdigest() == digest


# -- A compaction as its listeners and callers see it (ocw/conversation/compaction.py), on a (the events, a failure, a stop) --
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


def test_a_fact_in_a_pruned_tool_output_reaches_the_memory_and_one_unpruned_reads_the_same(store):
    """The memory pass reads a folded tool result as the model first read it: a stub left by a
    prune is replaced by the result itself (read again); with no prune nothing is read again,
    and the memory is the same."""
    log = "\n".join([f"line {i}: GET /api/orders/{i} 200" for i in range(150)]
                    + ["see https://ci.example.com/runs/4242 and commit deadbeef42"])

    def session():
        s = store.create_session(context_window=16_000)
        for k in range(6):
            s.append_many([("user", f"read day {k} of the order service logs; " + "we look for slow requests. " * 20),
                           ("assistant", [{"type": "tool_use", "id": f"t{k}", "name": "read_log", "input": {"day": k}}]),
                           ("tool", [{"type": "tool_result", "tool_use_id": f"t{k}", "content": log if k == 0 else "ok"}]),
                           ("assistant", f"day {k} looks fine")])
        return s

    def memory_values(s):
        res = s.compact(provider=OfflineProvider(context_window=16_000), keep_recent_tokens=200)
        assert res.outcome == "succeeded", res.reason
        return {i.value for i in pinning.memory(s).items}

    pruned, plain = session(), session()
    assert pruned.prune_tool_output(keep_tokens=100)["results"] >= 1
    assert not any("ci.example.com" in block_text(m["content"]) for m in pruned.rendered_history())  # a stub now
    values = memory_values(pruned)
    assert {"https://ci.example.com/runs/4242", "deadbeef42"} <= values
    assert memory_values(plain) == values
