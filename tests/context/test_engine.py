"""The compaction engine through `Session.compact` (issue 3, DESIGN.md §4).

Every outcome is checked against the file itself (raw SQL), not only against
the result object: node count, HEAD, active summary, generation, compaction
count, and the compaction events in order.
"""
from __future__ import annotations

import json
import re
import threading

import pytest

import ocw.conversation.session
from ocw.context import engine
from ocw.conversation.compaction import AUTO_FAILURE_LIMIT, auto_compact_paused
from ocw.text.errors import CompactionInProgress, OcwError, StoreError
from ocw.context.render import block_text
from ocw.conversation.sessions import Store

FILLER = "The team reviewed the ingestion pipeline and weighed throughput against latency once more. "
NO_OP = "Context is already compacted; no older messages to fold."


@pytest.fixture
def estore(tmp_path):
    s = Store(str(tmp_path / "engine.duckdb"))
    yield s
    s.close()


def marker(i: int) -> str:
    # Lower-case letters + digits, not hex: the facts pass never picks it up, so a
    # marker reaches a summarizer only as part of its own turn.
    return f"quokka{i:04d}x"


def add_turns(s, start: int, n: int, size: int = 20) -> list[str]:
    return s.append_many([("user" if i % 2 == 0 else "assistant", f"{marker(i)} " + FILLER * size)
                          for i in range(start, start + n)])


def build(store, n: int = 40, window: int = 16_000, size: int = 20, system_prompt: str = "You are careful."):
    s = store.create_session(context_window=window, system_prompt=system_prompt)
    add_turns(s, 0, n, size)
    return s


def state(store, s) -> dict:
    """What the file says, plus what the session object says."""
    with store.db.connect() as con:
        (n_nodes,) = con.execute("SELECT count(*) FROM nodes WHERE session_id = ?", [s.id]).fetchone()
        head, gen, meta = con.execute(
            "SELECT head_id, occupancy_generation, metadata FROM sessions WHERE id = ?", [s.id]).fetchone()
    active = s.active_summary()
    return {
        "nodes": n_nodes,
        "head": head,
        "generation": gen,
        "count": json.loads(meta).get("context_compaction_count", 0),
        "active": active.id if active else None,
        "mem": (s.head, s.generation, s.compaction_count),
    }


def record(s) -> list[tuple[str, dict]]:
    """The compaction's outcome events (its progress steps are pinned in tests/conversation/test_progress.py)."""
    seen: list[tuple[str, dict]] = []
    s.events.subscribe(lambda name, p: seen.append((name, p))
                       if name.startswith("compaction_") and name != "compaction_progress" else None)
    return seen


def names(seen) -> list[str]:
    return [n for n, _ in seen]


def rendered_text(s) -> str:
    return "\n".join(block_text(m["content"]) for m in s.rendered_history())


def node_row(store, nid: str) -> dict:
    with store.db.connect() as con:
        cur = con.execute("SELECT * FROM nodes WHERE id = ?", [nid])
        cols = [d[0] for d in cur.description]
        return dict(zip(cols, cur.fetchone()))


def assert_lock_free(s):
    assert s.compact_lock.acquire(blocking=False), "the compact lock was left held"
    s.compact_lock.release()
    assert s.compaction_running is False


# -- succeeded ---------------------------------------------------------------------------
def test_success_outcome_state_and_events(estore, fake_summarizer):
    s = build(estore)
    before = state(estore, s)
    occ_before = s.occupancy()
    seen = record(s)
    fake = fake_summarizer("Summary: the team reviewed the pipeline.")

    r = s.compact(provider=fake)

    assert r.outcome == "succeeded", r
    assert r.summarised_count > 0 and r.summary_id and r.error is None
    assert len(fake.calls) >= 1 and r.summarizer_calls == len(fake.calls)
    assert names(seen) == ["compaction_started", "compaction_finished"]
    fin = seen[1][1]
    assert "no_op" not in fin
    assert fin["summarised_count"] == r.summarised_count
    assert (fin["tokens_before"], fin["tokens_after"]) == (r.tokens_before, r.tokens_after)
    assert fin["summary_id"] == r.summary_id

    after = state(estore, s)
    assert after["nodes"] == before["nodes"] + 1  # only the summary node was added
    assert after["head"] == before["head"] == s.head  # compaction never moves HEAD
    assert before["active"] is None and after["active"] == r.summary_id
    assert after["generation"] == before["generation"] + 1
    assert after["count"] == before["count"] + 1
    assert after["mem"] == (after["head"], after["generation"], after["count"])

    assert r.tokens_before == occ_before["total"]
    assert r.tokens_after == s.occupancy()["total"]
    assert r.tokens_after < r.tokens_before
    assert r.message() == (f"Context compacted: covered {r.summarised_count} older messages, "
                           f"{r.tokens_before:,} → {r.tokens_after:,} tokens")
    row = node_row(estore, r.summary_id)
    # The covered range is a boundary: the last covered node (its parent) and the count.
    covered = s.branch()[: r.summarised_count]
    assert (row["role"], row["name"], row["parent_id"]) == ("llm", "context/summary", covered[-1])
    assert row["cover_count"] == r.summarised_count and row["covers_ids"] is None
    assert_lock_free(s)


def test_four_messages_are_enough(estore, fake_summarizer):
    s = build(estore, n=4)
    fake = fake_summarizer("Short.")
    r = s.compact(keep_recent_tokens=0, provider=fake)
    assert r.outcome == "succeeded" and r.summarised_count == 4
    assert len(fake.calls) == 1


# -- nothing to compact ----------------------------------------------------------------------
SHORT = ("Nothing to compact yet: the conversation has fewer than 4 messages.", "暂无可压缩的内容：对话还不到 4 条消息。")
TAIL = ("Nothing to compact yet: the whole conversation fits in the recent part that compaction keeps.",
        "暂无可压缩的内容：整个对话都在压缩时保留的最近部分之内。")
SEED = (NO_OP, "当前上下文已是压缩状态，没有可压缩的旧消息。")
NO_OP_TEXTS = {"fewer_than_four": SHORT, "already_compacted": SEED, "keep_covers_everything": TAIL, "empty": SHORT,
               "summarised_then_short": SEED}


@pytest.mark.parametrize("case", ["fewer_than_four", "already_compacted", "keep_covers_everything", "empty",
                                  "summarised_then_short"])
def test_no_op_outcomes_make_no_call_and_no_started(estore, fake_summarizer, session_dump, case):
    if case == "fewer_than_four":
        s = build(estore, n=3)
        kw = {"keep_recent_tokens": 0}
    elif case == "already_compacted":
        s = build(estore)
        assert s.compact(provider=fake_summarizer("First summary.")).outcome == "succeeded"
        kw = {}
    elif case == "keep_covers_everything":
        s = build(estore)
        kw = {"keep_recent_tokens": 10**9}
    elif case == "summarised_then_short":  # a summary and fewer than four messages after it
        s = build(estore)
        assert s.compact(provider=fake_summarizer("First summary."), keep_recent_tokens=0).outcome == "succeeded"
        add_turns(s, 100, 2)
        kw = {"keep_recent_tokens": 0}
    else:
        s = estore.create_session(context_window=16_000)
        kw = {}
    before, dump = state(estore, s), session_dump(estore, s.id)
    seen = record(s)
    fake = fake_summarizer("never used")

    r = s.compact(provider=fake, **kw)

    assert r.outcome == "no_op" and r.reason
    assert fake.calls == []  # decided before any LLM call
    assert names(seen) == ["compaction_finished"]  # no compaction_started
    assert seen[0][1]["no_op"] is True
    assert r.summarised_count == 0 and r.summary_id is None
    assert r.tokens_after == r.tokens_before == s.occupancy()["total"]
    assert state(estore, s) == before
    assert session_dump(estore, s.id) == dump
    # Each case says why, in both languages; the seed's text only where a summary exists.
    assert (r.message(), r.message("zh")) == NO_OP_TEXTS[case]
    assert "covered 0" not in r.message()
    assert_lock_free(s)


def test_recompacting_a_compacted_session_is_no_op(estore, fake_summarizer):
    s = build(estore)
    first = fake_summarizer("First summary.")
    assert s.compact(provider=first).outcome == "succeeded"
    n_calls = len(first.calls)
    again = fake_summarizer("should not be asked")
    r = s.compact(provider=again)
    assert r.outcome == "no_op"
    assert again.calls == [] and len(first.calls) == n_calls
    assert r.message() == NO_OP


# -- failed --------------------------------------------------------------------------------
def _inflated(record):
    return "An inflated summary that repeats itself. " * 2000


FAILURES = {
    "exception": (dict(raises=RuntimeError("summarizer exploded")), "summarizer exploded"),
    "empty": (dict(answer=""), "empty summary"),
    "blank": (dict(answer="  \n\t "), "empty summary"),
    "inflated": (dict(answer=_inflated), "not smaller than what it replaces"),
}


@pytest.mark.parametrize("precompacted", [False, True], ids=["first", "rolling"])
@pytest.mark.parametrize("kind", list(FAILURES) + ["persist"])
def test_failed_outcomes_leave_the_store_byte_for_byte(estore, fake_summarizer, session_dump, monkeypatch,
                                                      kind, precompacted):
    s = build(estore)
    if precompacted:
        assert s.compact(provider=fake_summarizer("Old summary text.")).outcome == "succeeded"
        add_turns(s, 100, 30)
    old_active = s.active_summary().id if precompacted else None
    rendered_before = s.rendered_history()
    before, dump = state(estore, s), session_dump(estore, s.id)
    seen = record(s)
    if kind == "persist":
        # Fail inside the write transaction, after the summary row is inserted:
        # the rollback must take the row with it.
        def boom(meta):
            raise StoreError("disk full while compacting")

        monkeypatch.setattr(ocw.conversation.session.count_rules, "count_own_compaction", boom)
        fake, expect = fake_summarizer("A fine summary."), "disk full while compacting"
    else:
        kwargs, expect = FAILURES[kind]
        fake = fake_summarizer(**kwargs)

    r = s.compact(provider=fake)

    assert r.outcome == "failed"
    assert expect in r.error and r.reason == r.error
    assert len(fake.calls) >= 1
    assert names(seen) == ["compaction_started", "compaction_failed"]
    assert seen[1][1]["error"] == r.error
    assert r.summary_id is None and r.summarised_count == 0
    assert r.message() == f"Context compaction failed: {r.error}"
    # Nothing persisted: the file is byte-for-byte what it was, and so is the session.
    assert session_dump(estore, s.id) == dump
    assert state(estore, s) == before
    assert (s.active_summary().id if s.active_summary() else None) == old_active
    assert s.rendered_history() == rendered_before
    assert_lock_free(s)


def test_keyboard_interrupt_in_summarizer(estore, fake_summarizer, session_dump):
    s = build(estore)
    before, dump = state(estore, s), session_dump(estore, s.id)
    seen = record(s)
    fake = fake_summarizer(raises=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        s.compact(provider=fake)
    assert names(seen) == ["compaction_started", "compaction_failed"]
    assert seen[1][1]["error"] == "KeyboardInterrupt"
    assert session_dump(estore, s.id) == dump
    assert state(estore, s) == before
    assert_lock_free(s)
    # ... and the session still compacts afterwards.
    assert s.compact(provider=fake_summarizer("Later summary.")).outcome == "succeeded"


def test_conversation_moving_during_the_call_fails_without_a_summary(estore, fake_summarizer):
    s = build(estore)
    moved = []

    def answer(record):
        moved.append(s.append("user", "a message that arrived while compacting"))
        return "A summary of a branch that has moved on."

    seen = record(s)
    r = s.compact(provider=fake_summarizer(answer))
    assert r.outcome == "failed" and "changed while compacting" in r.error
    assert names(seen) == ["compaction_started", "compaction_failed"]
    with estore.db.connect() as con:
        (n,) = con.execute("SELECT count(*) FROM nodes WHERE session_id = ? AND role = 'llm'", [s.id]).fetchone()
    assert n == 0
    assert s.head == moved[0] and s.active_summary() is None


def test_a_summarizer_window_without_room_gets_the_structural_summary(estore, fake_summarizer):
    """Issue 23: a summarizer whose window has no room for one call (300 tokens here) never
    blocks compaction: the structural summary is stored with no model call, it shrinks the
    context, the finished message says so in one line, and the next compaction rolls onto it."""
    from ocw.context.structural import STRUCTURAL_HEADER
    from ocw.text.i18n import system_message

    s = build(estore)
    seen = record(s)
    fake = fake_summarizer("never", context_window=300)
    r = s.compact(provider=fake)
    assert r.outcome == "succeeded" and r.summarizer_calls == 0 and fake.calls == []
    assert names(seen) == ["compaction_started", "compaction_finished"]
    assert r.tokens_after < r.tokens_before and s.compaction_count == 1
    summary = block_text(s.node(s.active_summary().id)["content"])
    assert summary.startswith(STRUCTURAL_HEADER) and "- user:" in summary
    msg = system_message("compaction_finished", r.payload)
    assert "structural summary (no model call) was used" in msg and "\n" not in msg
    assert "结构化摘要" in system_message("compaction_finished", r.payload, "zh")
    add_turns(s, 40, 40, 20)
    again = s.compact(provider=fake)
    assert again.outcome == "succeeded" and fake.calls == [] and s.compaction_count == 2
    assert "- earlier: Structural summary" in block_text(s.node(s.active_summary().id)["content"])


def test_a_summarizer_with_room_is_asked(estore, fake_summarizer):
    """The other side of the boundary: with room for a call, the model writes the summary."""
    s = build(estore)
    fake = fake_summarizer("Summary: the review.", context_window=2_000)
    r = s.compact(provider=fake)
    assert r.outcome == "succeeded" and len(fake.calls) >= 1 and "structural_window" not in r.payload


@pytest.mark.parametrize("bad", [-1, 1.5, "100", True])
def test_keep_recent_tokens_is_validated(estore, fake_summarizer, bad):
    s = build(estore, n=6)
    with pytest.raises(OcwError):
        s.compact(keep_recent_tokens=bad, provider=fake_summarizer())
    assert_lock_free(s)


# -- rolling summary -------------------------------------------------------------------------
def _markers(text: str) -> set[str]:
    return set(re.findall(r"quokka\d{4}x", text))


def _covers(s, nid: str) -> list[str]:
    return s.covered_ids(nid)


def _marker_of(store, nid: str) -> str:
    with store.db.connect() as con:
        (content,) = con.execute("SELECT content FROM nodes WHERE id = ?", [nid]).fetchone()
    (m,) = _markers(content)
    return m


def test_rolling_summary_reads_only_new_turns(estore, fake_summarizer):
    s = build(estore, n=40)
    head0 = s.head
    first = fake_summarizer("ROLLING-ONE the early review of the pipeline.")
    r1 = s.compact(provider=first)
    assert r1.outcome == "succeeded" and s.head == head0
    old_covers = _covers(s, r1.summary_id)
    old_markers = {_marker_of(estore, n) for n in old_covers}
    assert old_markers == set().union(*(_markers(c["input"]) for c in first.calls))
    assert len(old_covers) == r1.summarised_count

    add_turns(s, 40, 40)
    head1 = s.head
    second = fake_summarizer(lambda rec: f"ROLLING-TWO part {rec['index']}.")
    r2 = s.compact(provider=second)
    assert r2.outcome == "succeeded" and s.head == head1  # HEAD never moves

    inputs = [c["input"] for c in second.calls]
    assert "ROLLING-ONE the early review of the pipeline." in inputs[0]  # the old summary is read...
    seen_markers = set().union(*(_markers(t) for t in inputs))
    assert not (seen_markers & old_markers)  # ...never the turns it covers
    new_covers = _covers(s, r2.summary_id)
    assert new_covers[: len(old_covers)] == old_covers  # covers = old ∪ new, a branch prefix
    assert new_covers == s.branch()[: len(new_covers)]
    newly = new_covers[len(old_covers):]
    assert len(newly) == r2.summarised_count > 0
    assert seen_markers == {_marker_of(estore, n) for n in newly}  # exactly the newly covered turns
    for nid in new_covers:  # every claimed turn is in the old summary or in this call's input
        assert nid in old_covers or _marker_of(estore, nid) in seen_markers

    row = node_row(estore, r2.summary_id)
    assert row["role"] == "llm" and row["name"] == "context/summary"
    assert row["supersedes"] == r1.summary_id
    assert s.active_summary().id == r2.summary_id
    history = s.rendered_history()
    summaries = [m for m in history if m.get("name") == "context/summary"]
    assert [m["id"] for m in summaries] == [r2.summary_id]  # the old one is superseded
    assert "ROLLING-ONE" not in rendered_text(s)
    # the uncovered tail follows the summary, in branch order
    assert [m["id"] for m in history if m.get("id") and m["id"] != r2.summary_id] == s.branch()[len(new_covers):]


def test_chunked_rolling_summary_passes_each_answer_on(estore, fake_summarizer):
    s = build(estore, n=60)
    fake = fake_summarizer(lambda rec: f"PARTIAL-{rec['index']} so far.", context_window=1_500)
    r = s.compact(provider=fake)
    assert r.outcome == "succeeded"
    assert len(fake.calls) > 1
    for call in fake.calls:
        assert call["prompt_tokens"] + call["max_tokens"] <= 1_500, call["prompt_tokens"]
        assert call["system"].startswith(engine.SUMMARY_MARKER)
    for prev, call in zip(fake.calls, fake.calls[1:]):
        assert f"<previous-summary>\nPARTIAL-{prev['index']} so far.\n</previous-summary>" in call["input"]
    # every folded turn went to exactly one call, in order
    order = [m for c in fake.calls for m in re.findall(r"quokka\d{4}x", c["input"])]
    covered = _covers(s, r.summary_id)
    assert order == [_marker_of(estore, n) for n in covered]
    # one summary, holding the last answer
    with estore.db.connect() as con:
        (n,) = con.execute("SELECT count(*) FROM nodes WHERE session_id = ? AND role = 'llm'", [s.id]).fetchone()
    assert n == 1
    assert block_text(s.node(r.summary_id)["content"]).startswith(f"PARTIAL-{len(fake.calls) - 1} so far.")


def test_chunking_cuts_one_message_larger_than_the_summarizer_window(estore, fake_summarizer):
    s = estore.create_session(context_window=64_000)
    s.append("user", "quokka9999x " + FILLER * 300)  # ~5k tokens
    add_turns(s, 0, 30, size=40)
    fake = fake_summarizer("Partial.", context_window=2_000)
    r = s.compact(keep_recent_tokens=2_000, provider=fake)
    assert r.outcome == "succeeded" and len(fake.calls) > 1
    assert all(c["prompt_tokens"] + c["max_tokens"] <= 2_000 for c in fake.calls)
    assert "quokka9999x" in fake.calls[0]["input"]
    assert engine.CUT_NOTE in fake.calls[0]["input"]


@pytest.mark.parametrize("text", ["a", "[tool]", "  y  "])
def test_many_tiny_messages_never_overflow_a_call(estore, fake_summarizer, text):
    # Many lines per call: the separators between them must be counted too.
    s = estore.create_session(context_window=200_000)
    s.append_many([("user" if i % 2 == 0 else "assistant", text) for i in range(400)])
    fake = fake_summarizer("S.", context_window=800)
    r = s.compact(keep_recent_tokens=0, provider=fake)
    assert r.outcome == "succeeded" and r.summarised_count == 400
    assert len(fake.calls) > 1
    assert all(c["prompt_tokens"] + c["max_tokens"] <= 800 for c in fake.calls)


def test_a_summarizer_ignoring_max_tokens_still_fits_each_call(estore, fake_summarizer):
    s = build(estore, n=60)
    long_answer = "Partial summary that is much too long and ignores its limit. " * 60  # ~700 tokens
    fake = fake_summarizer(lambda rec: long_answer if rec["index"] < 3 else "Short.", context_window=1_500)
    r = s.compact(provider=fake)
    assert r.outcome == "succeeded"
    assert all(c["prompt_tokens"] + c["max_tokens"] <= 1_500 for c in fake.calls)


def test_prepare_builds_the_input_without_writing_or_calling(estore, fake_summarizer, session_dump):
    s = build(estore, n=60)
    dump = session_dump(estore, s.id)
    fake = fake_summarizer("unused", context_window=1_500)
    plan = engine.plan_compaction(s.rendered_history(), s.context_window)
    prep = engine.prepare(plan, fake, window=1_500, calibration=1.0, encoding=s.encoding.name)
    assert fake.calls == [] and session_dump(estore, s.id) == dump
    assert prep.plan is not None and len(prep.lines) == len(prep.plan.new_messages) > 0
    # the planned chunks cover every line once, in order
    flat = [i for a, b in prep.chunks for i in range(a, b)]
    assert flat == list(range(len(prep.lines)))
    assert len(prep.chunks) > 1
    # the estimates bound the real size of each line
    from ocw.text.tokens import count_text

    for line, est in zip(prep.lines, prep.estimates):
        assert count_text("\n\n" + line, prep.encoding) <= est + 1


# -- after success -------------------------------------------------------------------------
def test_after_success_occupancy_is_the_reported_figure_and_estimated(estore, fake_summarizer):
    s = build(estore, n=40)
    s.record_usage(int(s.occupancy()["total"] * 1.2))  # a measured figure for this HEAD and generation
    occ = s.occupancy()
    assert occ["basis"] == "measured"
    gen, count = s.generation, s.compaction_count
    assert s.metadata["context_window"]["used"] == occ["total"]

    r = s.compact(provider=fake_summarizer("One line."))

    assert r.outcome == "succeeded"
    assert r.tokens_before == occ["total"]  # "X" is what the ring showed just before
    after = s.occupancy()
    assert after["total"] == r.tokens_after
    # After a compaction the basis is an estimate, calibrated by the sample the session learned.
    assert after["basis"] == "estimated" and after["calibrated"]
    assert s.calibration != 1.0  # learned from the sample (and the summarizer's own usage)
    assert after["total"] == round(after["estimated_total"] * s.calibration)
    assert r.tokens_after < r.tokens_before * 0.75
    assert s.generation == gen + 1
    assert s.compaction_count == count + 1
    assert s.metadata["context_window"] is None  # usage baseline cleared
    assert after["breakdown"]["summary"] > 0


# -- fact retention ------------------------------------------------------------------------
IDENTIFIERS = [
    "/srv/data/raw/events_2024.parquet", "src/ocw/context/engine.py", "https://api.example.com/v2/orders?limit=50",
    "https://docs.example.org/guide/setup.html", "ABC-123", "OPS-4471", "250 ms", "3.5 GB", "12 MiB",
    "1500 rows", "`load_events`", "`retry_budget`", "`FACTS_SHARE`", "KeyError", "ConnectionResetError",
    "TimeoutException", "deadbeef42", "config/settings.toml", "#4521", "87 %",
]


def test_identifiers_survive_three_compactions(estore, fake_summarizer):
    assert len(set(IDENTIFIERS)) == 20
    s = estore.create_session(context_window=8_192, system_prompt="You are careful.")
    planted = []
    for k in range(10):
        a, b = IDENTIFIERS[2 * k], IDENTIFIERS[2 * k + 1]
        planted += [("user", f"Please remember {a} and also {b} for later. " + FILLER),
                    ("assistant", "Noted, I will keep both in mind. " + FILLER)]
    s.append_many(planted)
    fake = fake_summarizer("Summary: the user shared settings and we discussed the data pipeline.")
    for round_ in range(3):
        add_turns(s, 1000 + 20 * round_, 20, size=20)
        r = s.compact(provider=fake)
        assert r.outcome == "succeeded", r
    text = rendered_text(s)
    kept = [i for i in IDENTIFIERS if i.strip("`") in text]
    assert len(kept) >= 19, sorted(set(IDENTIFIERS) - set(kept))
    # the planted turns themselves are folded: the identifiers live in the summary
    assert "Please remember" not in text
    assert s.occupancy()["breakdown"]["summary"] <= s.context_window // 8


# -- guards ----------------------------------------------------------------------------------
def test_one_compaction_at_a_time(estore, fake_summarizer):
    s = build(estore)
    gate = threading.Event()
    fake = fake_summarizer("Summary.", gate=gate)
    results = {}
    t = threading.Thread(target=lambda: results.setdefault("r", s.compact(provider=fake)))
    t.start()
    try:
        assert fake.entered.wait(10)
        assert s.compaction_running is True
        other = fake_summarizer("never")
        with pytest.raises(CompactionInProgress) as exc:
            s.compact(provider=other)
        assert "already running" in str(exc.value)
        assert "wait" in exc.value.user_message()
        assert other.calls == []
    finally:
        gate.set()
        t.join(10)
    assert results["r"].outcome == "succeeded"
    assert_lock_free(s)


def test_auto_failures_pause_auto_compaction_and_a_success_resets(estore, fake_summarizer):
    s = build(estore)
    failing = fake_summarizer(raises=RuntimeError("provider down"))
    for k in range(AUTO_FAILURE_LIMIT):
        assert not auto_compact_paused(s)
        assert s.compact(trigger="auto", provider=failing).outcome == "failed"
    assert auto_compact_paused(s)
    # a failed manual compaction neither pauses nor resets anything further
    assert s.compact(trigger="manual", provider=failing).outcome == "failed"
    assert auto_compact_paused(s)
    r = s.compact(trigger="manual", provider=fake_summarizer("Manual summary."))
    assert r.outcome == "succeeded" and r.trigger == "manual"
    assert not auto_compact_paused(s)
    assert s.auto_compact_failures == 0


def test_auto_failures_must_be_consecutive(estore, fake_summarizer):
    s = build(estore, n=80)
    failing = fake_summarizer(raises=RuntimeError("provider down"))
    for _ in range(AUTO_FAILURE_LIMIT - 1):
        s.compact(trigger="auto", provider=failing)
    assert s.compact(trigger="auto", provider=fake_summarizer("ok")).outcome == "succeeded"
    add_turns(s, 500, 40)
    s.compact(trigger="auto", provider=failing)
    assert not auto_compact_paused(s)


# -- end to end with the built-in offline model ---------------------------------------------
def test_end_to_end_with_the_offline_provider(estore):
    pytest.importorskip("ocw.providers.offline")
    from ocw.providers import make_provider

    s = estore.create_session(context_window=8_192, system_prompt="You are careful.")
    s.append("user", "The config lives at config/settings.toml and the ticket is OPS-4471. " + FILLER * 10)
    add_turns(s, 0, 40, size=15)
    seen = record(s)
    r = s.compact()  # no provider: the built-in offline model summarizes
    assert r.outcome == "succeeded", r
    assert names(seen) == ["compaction_started", "compaction_finished"]
    assert s.occupancy()["total"] == r.tokens_after < r.tokens_before
    summary = block_text(s.node(r.summary_id)["content"])
    assert "offline model" in summary
    assert "config/settings.toml" in summary and "OPS-4471" in summary
    # and with an explicit offline provider whose window is small: chunked, still one summary
    add_turns(s, 100, 40, size=15)
    small = make_provider("offline", context_window=2_000)
    r2 = s.compact(provider=small)
    assert r2.outcome == "succeeded" and r2.summarizer_calls > 1
    assert "OPS-4471" in rendered_text(s)


# -- the exact fit of one call ------------------------------------------------------------------
def test_fit_always_fits_and_always_progresses():
    import random

    from ocw.text.tokens import count_text

    rng = random.Random(5)
    words = ["alpha", "beta", "\n", "  ", "γ", "数据", "{x}", "[tool]", "a", "ok."]
    for _ in range(80):
        budget = rng.choice([256, 300, 500, 1_000])
        partial = " ".join(rng.choice(words) for _ in range(rng.choice([0, 10, 400, 1_500])))
        lines = [" ".join(rng.choice(words) for _ in range(rng.choice([1, 5, 50, 600])))
                 for _ in range(rng.randint(1, 12))]
        body, used = engine._fit(partial, lines, budget, "cl100k_base")
        assert 1 <= used <= len(lines)
        assert count_text(body, "cl100k_base") <= budget
        assert "<new-turns>" in body


@pytest.mark.parametrize("empties", [1, 2])
def test_an_empty_answer_is_asked_once_more_and_a_second_fails_the_compaction(estore, fake_summarizer, empties):
    """A sampled model can end its answer at once (the random-weights test model sometimes
    does): the same input is asked once more, and only a second empty answer fails."""
    s = build(estore)
    fake = fake_summarizer(lambda call: "" if len(fake.calls) <= empties else "A fine summary.")
    r = s.compact(provider=fake)
    if empties == 1:
        assert r.outcome == "succeeded" and r.summarizer_calls == len(fake.calls) >= 2
        assert fake.calls[0]["messages"] == fake.calls[1]["messages"]  # the same call again
    else:
        assert r.outcome == "failed" and "empty summary" in r.error
        assert len(fake.calls) == 2 and fake.calls[0]["messages"] == fake.calls[1]["messages"]
