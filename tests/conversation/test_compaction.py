"""A compaction's output is pinned (issue 28, item 3): making the identifier pass one pass,
the offline summarizer's scoring linear and its counts once per text must not change a
byte of what is stored. The digests below were produced by the algorithm before that
work (commit cb9d18c9: one regex per identifier, per-sentence re-reads and recounts) on
these fixed inputs; the summary node's content (prose, identifier list, memory block)
and the compaction log's `lost` record must come out the same. Four were made again in
session 6 for one intended change, checked field by field: a setting's value keeps its
unit (`547.4` became `547.4 %`), and the `lost` record then counts one identifier fewer. The "built" one
was made again in session 9 for another, checked list against list: the facts pass places an
identifier by its own mentions, not by any substring (`8.478ms` inside `18.478ms` is no mention of
it), so the same 223 identifiers, the same prose, and four quantities listed later. Then a compaction as its
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
    ("gen", 3, 16000, None, 130, 21017, 482, "a99281ae929ccd73f6066259867fff658eabe77daebaae7aaaec64a0acb3f743"),
    ("gen", 4, 32000, "keep the file paths", 98, 19812, 148,
     "4135778fe4ccec94f7451a74026d54050f57b08a1185b071dac1bf7c7115ee9a"),
    ("gen", 5, 200000, None, 26, 6085, 0, "6babf15bb71ac9ce9ed433ccdcc28a38e1296715467fc86980bdf0db1b551800"),
    ("built", 200, 32000, None, 174, 16920, 490, "e225399330d4c636d42b2c7a69ca4c7b1b7500bdd452ec9762e75af2c4fec761"),
    # a focus of terms only (no identifier kind), and one that names a kind
    ("gen", 6, 16000, "the deployment budget and the rollout", 130, 16591, 592,
     "32084fe72f3d8bf79dc4c51682f98f9e7b9c53359a568f3c93943f520c08705f"),
    ("gen", 7, 16000, "keep the errors", 130, 16256, 522,
     "ef3bcd853329c2338ae3d2b4ef2d6df28759783ec9db8933b4b611bdffa22940"),
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


@pytest.mark.parametrize("bad", [-1, True, 2.5, "200"])
def test_a_keep_that_is_not_a_whole_number_is_refused_before_anything(sess, fake_summarizer, bad):
    fake, state = fake_summarizer("Summary."), (sess.head, sess.generation)
    with pytest.raises(ocw.OcwError, match=r"^keep_recent_tokens must be a whole number ≥ 0, not "):
        compaction.compact(sess, keep_recent_tokens=bad, provider=fake)
    assert fake.calls == [] and (sess.head, sess.generation) == state and sess.compact_lock.acquire(blocking=False)


def test_the_defaults_a_manual_compaction_without_a_provider(store, sess):
    """No provider: the offline model, as the chat's (not a summarizer of its own, even if asked),
    no focus, and no landing room (`incoming` is an automatic compaction's)."""
    wide = compaction.compact(sess, own_summarizer=True)
    entry = sess.metadata["compactions"][-1]
    assert wide.outcome == "succeeded" and entry["own_summarizer"] is False and entry["focus"] is None
    assert entry["summarizer"] == "offline/ocw-offline"

    def prompted():  # a long system prompt leaves the landing room under the default tail
        s = store.create_session(context_window=16_000, system_prompt="Be terse. " * 1_000)
        s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 400) for i in range(40)])
        return s

    plain, landed = compaction.compact(prompted()), compaction.compact(prompted(), incoming=0)
    assert landed.summarised_count > plain.summarised_count  # landing well under the line folds more


class _OverflowingSummarizer:
    """A summarizer of its own whose server takes less than its stated window: a call over
    `limit` tokens is refused with the limit stated, as a real server does."""

    name, model, offline = "own", "own-model", True

    def __init__(self, context_window: int, limit: int):
        self.context_window, self.limit, self.sizes = context_window, limit, []
        self.inner = OfflineProvider(context_window=context_window)

    def complete(self, messages, system=None, max_tokens=None):
        from ocw.text.errors import ContextOverflowError

        used = self.inner.prompt_tokens(messages, system)
        self.sizes.append(used)
        if used > self.limit:
            raise ContextOverflowError("own: HTTP 400: too long", status=400, limit=self.limit, prompt_tokens=used)
        return self.inner.complete(messages, system=system, max_tokens=max_tokens)


def test_a_summarizer_of_its_own_plans_with_its_window_and_learns_a_smaller_one(store):
    from ocw.conversation import summarizer as own_rules

    made = iter(range(100))

    def session():
        k = next(made)
        return build_session(store, 120, window=16_000, verify=2, name=f"own-{k}", id_salt=f"own{k}_")

    big = _OverflowingSummarizer(context_window=64_000, limit=1_000_000)
    s = session()
    res = compaction.compact(s, provider=big, own_summarizer=True)
    assert res.outcome == "succeeded" and res.summarizer_calls == 1  # its own 64k window: one call
    assert max(big.sizes) > 16_000  # more than the chat's window holds
    chat = _OverflowingSummarizer(context_window=64_000, limit=1_000_000)
    assert compaction.compact(session(), provider=chat).summarizer_calls >= 2  # the chat's: min(64k, 16k)

    small = _OverflowingSummarizer(context_window=64_000, limit=8_000)  # its server takes 8k
    s = session()
    res = compaction.compact(s, provider=small, own_summarizer=True)
    assert res.outcome == "succeeded", (res.error, small.sizes)
    assert res.summarizer_calls >= 2 and small.sizes[0] > 8_000
    assert all(n <= 8_000 for n in small.sizes[1:])
    assert own_rules.window(s, small) == 8_000

    # The chat's model: the refused call is tried once more, planned to the stated window, and
    # nothing is learned here (the turn's own requests learn the chat's window, announced).
    as_chat = _OverflowingSummarizer(context_window=64_000, limit=8_000)
    s = session()
    res = compaction.compact(s, provider=as_chat)
    assert res.outcome == "succeeded", (res.error, as_chat.sizes)
    assert as_chat.sizes[0] > 8_000 and all(n <= 8_000 for n in as_chat.sizes[1:]) and len(as_chat.sizes) >= 3
    assert own_rules.KEY not in s.metadata and "learned_window" not in s.metadata and s.context_window == 16_000


def test_a_pre_compact_hook_reads_no_focus_when_none_was_given(sess, fake_summarizer):
    from ocw.conversation import hooks

    seen = []
    hook = hooks.on("pre_compact", lambda info: seen.append(info.focus))
    try:
        assert compaction.compact(sess, provider=fake_summarizer("Summary.")).outcome == "succeeded"
    finally:
        hooks.off("pre_compact", hook)
    assert seen == [None]
