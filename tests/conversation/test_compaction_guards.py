"""Issue 13: the compaction guards and the turn's threshold, each pinned at its boundary.

Through public functions only (`Session.compact`, `run_turn`, `plan_compaction`,
`plan_chunks`), on a real DuckDB file and the loopback server, with the spec's
numbers written as literals (DESIGN.md §4):
- a summary must be smaller than what it replaces — the old summary plus the newly
  folded turns — so one exactly as large is refused and one a token smaller is kept;
- 3 automatic failures in a row pause automatic compaction; manual ones never count;
- a summarizer call takes lines while they fit its room, a line that fills it exactly included;
- a turn compacts automatically when it would reach 80 % of the window, at exactly 80 % too.
"""
from __future__ import annotations

import pytest

from ocw.conversation.compaction import auto_compact_paused
from ocw.context.engine import plan_chunks, plan_compaction
from ocw.context.graph import SUMMARY_NAME
from ocw.providers import OpenAIProvider
from ocw.context.render import normalize_content
from ocw.text.tokens import count_message
from ocw.conversation.turn import run_turn

FILLER = "The team reviewed the ingestion pipeline and weighed throughput against latency once more. "


def add_turns(s, start: int, n: int, size: int = 20) -> list[str]:
    return s.append_many([("user" if i % 2 == 0 else "assistant", f"turn{i:03d} " + FILLER * size)
                          for i in range(start, start + n)])


def padded(prefix: str, target: int, count) -> str:
    """`prefix` plus single-token words, so that `count(text)` is exactly `target`."""
    k = max(0, target - count(prefix))
    for _ in range(200):
        text = prefix + " word" * k
        n = count(text)
        if n == target:
            return text
        k += 1 if n < target else -1
    raise AssertionError(f"no padding of {prefix!r} counts {target} tokens")


def summary_tokens(enc: str):
    """Tokens of a text stored as the summary node (framing and name included)."""
    return lambda text: count_message("llm", [{"type": "text", "text": text}], enc, SUMMARY_NAME)


def state(store, s) -> tuple:
    with store.db.connect() as con:
        nodes = con.execute("SELECT count(*) FROM nodes WHERE session_id = ?", [s.id]).fetchone()[0]
    active = s.active_summary()
    return nodes, s.generation, s.compaction_count, active.id if active else None


# -- the summary-not-smaller guard, with the old summary in the replaced size -------------------------
def test_a_summary_exactly_as_large_as_what_it_replaces_is_refused(store, fake_summarizer):
    s = store.create_session(context_window=16_000, system_prompt="You are careful.")
    add_turns(s, 0, 60)
    first = s.compact(provider=fake_summarizer("First summary: the ingestion pipeline review. " + "word " * 40))
    assert first.outcome == "succeeded"
    old = s.active_summary()
    add_turns(s, 60, 40)

    plan = plan_compaction(s.rendered_history(), s.context_window)
    folded = sum(m["tokens"] for m in plan.new_messages)
    # The replaced size is the old summary plus the newly folded turns, not the turns alone.
    assert old.tokens > 50 and plan.replaced_tokens == old.tokens + folded
    enc = s.encoding.name
    count = summary_tokens(enc)

    # Exactly as large as what it replaces: refused, and nothing is written.
    before = state(store, s)
    same = padded("Second summary.", plan.replaced_tokens, count)
    r = s.compact(provider=fake_summarizer(same))
    assert r.outcome == "failed" and "not smaller" in r.error, r.error
    assert f"{plan.replaced_tokens:,}" in r.error
    assert state(store, s) == before and s.active_summary().id == old.id

    # One token smaller: kept as it is (no room for a facts list), although it is
    # larger than the folded turns alone.
    smaller = padded("Second summary.", plan.replaced_tokens - 1, count)
    assert count(smaller) > folded
    r = s.compact(provider=fake_summarizer(smaller))
    assert r.outcome == "succeeded", r.error
    new = s.active_summary()
    assert new.id != old.id and new.supersedes == old.id and new.tokens == plan.replaced_tokens - 1
    assert s.compaction_count == 2


def test_a_summary_one_token_over_what_it_replaces_is_refused(store, fake_summarizer):
    s = store.create_session(context_window=16_000, system_prompt="You are careful.")
    add_turns(s, 0, 40)
    plan = plan_compaction(s.rendered_history(), s.context_window)
    before = state(store, s)
    r = s.compact(provider=fake_summarizer(padded("Summary.", plan.replaced_tokens + 1, summary_tokens(s.encoding.name))))
    assert r.outcome == "failed" and "not smaller" in r.error
    assert state(store, s) == before


# -- 3 automatic failures in a row pause automatic compaction; manual ones never count -----------------
def test_three_automatic_failures_pause_and_manual_failures_do_not_count(store, fake_summarizer):
    s = store.create_session(context_window=16_000, system_prompt="You are careful.")
    add_turns(s, 0, 40)
    failing = fake_summarizer(raises=RuntimeError("provider down"))
    for _ in range(5):  # manual failures, more than the limit
        assert s.compact(trigger="manual", provider=failing).outcome == "failed"
    assert s.auto_compact_failures == 0 and not auto_compact_paused(s)
    for k in (1, 2, 3):
        assert s.compact(trigger="auto", provider=failing).outcome == "failed"
        assert s.auto_compact_failures == k
        assert auto_compact_paused(s) is (k == 3)  # paused at the 3rd in a row, not before
    assert len(failing.calls) == 8  # each compaction asked the summarizer once


@pytest.fixture
def turn_provider(refserver):
    p = OpenAIProvider("gpt-4o-mini", base_url=refserver.openai_url, api_key="k-test", max_retries=0,
                       context_window=2000)
    yield p
    p.close()


def over_the_line(store) -> object:
    """A session on a 2,000-token window whose history alone is above 80 %."""
    s = store.create_session(model="gpt-4o-mini", provider="openai", context_window=2000,
                             system_prompt="You are a helpful assistant.")
    add_turns(s, 0, 24, size=5)
    assert s.occupancy()["ratio"] > 0.8
    return s


def test_turns_stop_compacting_after_three_automatic_failures_in_a_row(store, turn_provider, refserver):
    s = over_the_line(store)
    # Three failed manual compactions first: they do not bring the pause nearer.
    for _ in range(3):
        refserver.script_summary(status=500)
        assert s.compact(provider=turn_provider).outcome == "failed"
    assert len(refserver.summary_requests()) == 3

    notes: list[list[str]] = []
    for i in range(5):
        refserver.script_summary(status=500)  # consumed only when a summary is asked for
        refserver.script(text=f"reply {i}")
        msgs: list[str] = []
        res = run_turn(s, f"question {i}", turn_provider, on_system=msgs.append)
        assert res.text == f"reply {i}"
        notes.append(msgs)
        attempts = [c.trigger for c in res.compactions]
        # turns 1-3 try (and fail); from the 4th on, automatic compaction is paused
        assert attempts == (["auto"] if i < 3 else []), i
        assert len(refserver.summary_requests()) == 3 + min(i + 1, 3), i
        assert all(c.outcome == "failed" for c in res.compactions)
    paused = "Automatic compaction is paused for this session after 3 failures in a row; %compact still works."
    assert [m.count(paused) for m in notes] == [0, 0, 1, 0, 0]
    # %compact still works while automatic compaction is paused.
    refserver.clear_scripts()
    refserver.script_summary(text="Summary: questions 0 to 4 and their replies.")
    assert s.compact(provider=turn_provider).outcome == "succeeded"


# -- a chunk takes lines while they fit its room, exactly filling it included ------------------------
def test_chunks_take_lines_up_to_exactly_their_room():
    # first call: room 100; later calls: room 100
    assert plan_chunks([60, 40, 50], first_room=100, room=100) == [(0, 2), (2, 3)]  # 60 + 40 = 100 fits
    assert plan_chunks([60, 40, 50], first_room=99, room=100) == [(0, 1), (1, 3)]  # 100 > 99
    assert plan_chunks([60, 40, 50], first_room=101, room=100) == [(0, 2), (2, 3)]
    assert plan_chunks([100, 30, 70, 10], first_room=100, room=100) == [(0, 1), (1, 3), (3, 4)]  # 30 + 70 = 100
    assert plan_chunks([100, 30, 70, 10], first_room=100, room=99) == [(0, 1), (1, 2), (2, 4)]
    assert plan_chunks([100, 30, 70, 10], first_room=100, room=101) == [(0, 1), (1, 3), (3, 4)]
    # A line larger than a whole call still gets a call of its own; nothing is lost.
    assert plan_chunks([150, 20, 200], first_room=100, room=100) == [(0, 1), (1, 2), (2, 3)]
    assert plan_chunks([], first_room=100, room=100) == []


# -- the turn's threshold: 80 % of the window, at exactly 80 % too -----------------------------------
@pytest.mark.parametrize("tokens, compacts", [(1599, False), (1600, True), (1601, True)])
def test_a_turn_compacts_at_exactly_80_percent(store, turn_provider, refserver, tokens, compacts):
    s = store.create_session(model="gpt-4o-mini", provider="openai", context_window=2000,
                              system_prompt="You are a helpful assistant.")
    add_turns(s, 0, 12, size=5)
    occ = s.occupancy()
    assert occ["basis"] == "estimated" and s.calibration == 1.0 and occ["ratio"] < 0.6
    # The new message brings history plus message to `tokens` of the 2,000-token window.
    enc = s.encoding.name
    message = padded("My next question:", tokens - occ["total"],
                     lambda t: count_message("user", normalize_content(t), enc))
    refserver.script_summary(text="Summary: twelve turns about the ingestion pipeline.")
    refserver.script(text="the answer")
    res = run_turn(s, message, turn_provider)
    assert res.text == "the answer"
    assert [c.trigger for c in res.compactions] == (["auto"] if compacts else [])
    assert len(refserver.summary_requests()) == (1 if compacts else 0)
    assert s.compaction_count == (1 if compacts else 0)


@pytest.mark.parametrize("replaced, widened", [(255, True), (256, False)])
def test_a_fold_under_256_tokens_is_widened_and_one_of_256_is_not(store, monkeypatch, replaced, widened):
    """MIN_SUMMARIZER_INPUT (256) is the least a fold may replace before it is widened (_fold_enough)
    and before a model is asked: pinned on both sides by the plan's own figure."""
    import dataclasses

    from ocw.conversation import compaction

    real = compaction.plan_compaction
    monkeypatch.setattr(compaction, "plan_compaction",
                        lambda *a, **k: dataclasses.replace(real(*a, **k), replaced_tokens=replaced))
    seen = []
    monkeypatch.setattr(compaction, "_fold_enough", lambda session, plan, active, history: seen.append(plan) or plan)
    s = store.create_session(model="ocw-offline", context_window=8192)
    add_turns(s, 0, 12, size=200)
    res = compaction.compact(s)
    assert bool(seen) is widened
    # and under it no model is asked (too little for a smaller summary): the structural one, said so
    assert res.outcome == "succeeded" and res.payload.get("structural_small", False) is widened
