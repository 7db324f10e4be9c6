"""One bad turn must not break a session (issue 23), against a scripted provider that
raises overflow errors carrying a server's numbers and counts every call it gets.

- A refused request calibrates nothing; a message too big for the window is refused
  before any compaction or summarizer call, with its size and the window.
- Ocw.reactive_compact: 'auto' compacts and retries, 'ask' and 'off' stop the cell
  after the one refused request with the fixes, and compact nothing.
"""
from __future__ import annotations

import pytest

from ocw.conversation.turn import Turn, run_turn
from ocw.providers.base import Reply, Usage
from ocw.text.errors import ContextOverflowError, OcwError
from ocw.text.tokens import count_message
from test_learned_window import overflow  # a refusal carrying the server's numbers

WORDS = "The nightly load of orders_2024.csv finished in 41 s with no errors. "


class Counting:
    """Scripted replies (text, or an exception to raise); counts requests and summarizer calls."""

    name, offline = "scripted", False
    context_window = None

    def __init__(self, *script, ratio: float = 1.0):
        self.script, self.ratio = list(script), ratio
        self.requests: list[tuple] = []
        self.summaries = 0

    def stream(self, messages, *, system=None, tools=None, max_tokens=None, on_event=None):
        self.requests.append((system, messages))
        item = self.script.pop(0) if self.script else "ok"
        if isinstance(item, BaseException):
            raise item
        if on_event:
            on_event("text", item)
        prompt = sum(count_message(m["role"], m["content"], "cl100k_base") for m in messages)
        return Reply(content=[{"type": "text", "text": item}], usage=Usage(int(prompt * self.ratio), 5))

    def complete(self, messages, *, system=None, max_tokens=None):
        self.summaries += 1
        return Reply(content=[{"type": "text", "text": "Summary: nightly loads."}], usage=Usage())

    def close(self):
        pass


@pytest.fixture
def sess(store):
    return store.create_session(model="tiny", provider="openai", context_window=8_192, system_prompt="Be brief.")


def long_session(sess, pairs=30):
    sess.append_many([(r, f"{r} {i}: " + WORDS * 3) for i in range(pairs) for r in ("user", "assistant")])


def snapshot(sess):
    return sess.head, len(sess.branch()), sess.compaction_count, sess.metadata.get("calibration")


def test_a_refused_request_leaves_the_calibration_as_it_was(sess):
    """Issue 23's first report: a refusal stating 2.84× moved the calibration from 1.96 to
    2.84, and every later compaction then failed."""
    long_session(sess, pairs=10)
    est = sess.occupancy()["estimated_total"]
    sess.record_usage(int(est * 1.96))
    before = sess.metadata["calibration"]
    assert sess.calibration == pytest.approx(1.96, abs=0.01)
    p = Counting(overflow(limit=2_048, prompt_tokens=int(est * 2.84)), "recovered")
    res = run_turn(sess, "What now?", p)
    assert res.text == "recovered" and res.retried_after_overflow
    # The answered retry reported 1.0× (Counting's ratio), below 70 % of what the refusal
    # stated (2.84×): usage that contradicts a refusal is unverified — no sample, no basis.
    assert sess.metadata["calibration"] == before and sess.calibration == pytest.approx(1.96, abs=0.01)
    occ = sess.occupancy()
    assert occ["usage_unverified"] == 1 and occ["basis"] == "estimated"


def test_a_message_larger_than_the_window_is_refused_before_anything(sess):
    long_session(sess)  # over the auto-compact line with the message: it would compact first
    before = snapshot(sess)
    p = Counting("never")
    with pytest.raises(ContextOverflowError) as e:
        run_turn(sess, WORDS * 700, p)  # ~9,800 tokens, window 8,192
    msg = e.value.user_message()
    assert "This message alone is about" in msg and "8,192" in msg and "\n" not in msg
    assert p.requests == [] and p.summaries == 0  # no request, no summarizer call
    assert snapshot(sess) == before


def test_the_refusal_boundary_is_the_window_itself(store):
    """Refused at one token over the window, sent at exactly the window (pinned both sides)."""
    probe = store.create_session(model="tiny", provider="openai", context_window=8_192, system_prompt="Be brief.")
    size = Turn(probe, Counting())._message_size([("user", WORDS * 50)])
    at = store.create_session(model="tiny", provider="openai", context_window=size, system_prompt="Be brief.")
    assert run_turn(at, WORDS * 50, Counting("sent"), threshold=0).text == "sent"
    over = store.create_session(model="tiny", provider="openai", context_window=size - 1, system_prompt="Be brief.")
    p = Counting("never")
    with pytest.raises(ContextOverflowError):
        run_turn(over, WORDS * 50, p, threshold=0)
    assert p.requests == []


def test_a_refusal_that_states_a_smaller_window_refuses_without_compacting(sess):
    """The window was unknown (8,192 assumed); the server states 2,048 and the message
    alone is over 80 % of it: one request, then the refusal, no compaction."""
    long_session(sess)
    before = snapshot(sess)
    p = Counting(overflow(limit=2_048), "never")
    with pytest.raises(ContextOverflowError) as e:
        run_turn(sess, WORDS * 150, p, threshold=0)  # ~2,100 tokens: fits 8,192, not 2,048
    assert "This message alone is about" in e.value.user_message() and "2,048" in e.value.user_message()
    assert len(p.requests) == 1 and p.summaries == 0
    assert snapshot(sess)[:3] == before[:3]


@pytest.mark.parametrize("mode, words", [("off", "recovery is off"), ("ask", "reactive_compact = 'ask'")])
def test_reactive_compact_off_and_ask_stop_after_the_refusal(sess, mode, words):
    long_session(sess)
    before = snapshot(sess)
    p = Counting(overflow(limit=2_048), "never")
    with pytest.raises(ContextOverflowError) as e:
        run_turn(sess, "What now?", p, threshold=0, reactive_compact=mode)
    msg = e.value.user_message()
    assert words in msg and "2,048" in msg and "%compact" in msg and "%new" in msg
    assert len(p.requests) == 1 and p.summaries == 0
    assert snapshot(sess)[:3] == before[:3]
    assert sess.context_window == 2_048  # what the server stated is still learned


def test_reactive_compact_auto_compacts_and_retries(sess):
    long_session(sess)
    p = Counting(overflow(limit=2_048), "recovered")
    res = run_turn(sess, "What now?", p, threshold=0, reactive_compact="auto")
    assert res.text == "recovered" and len(p.requests) == 2 and p.summaries >= 1
    assert [c.trigger for c in res.compactions] == ["reactive"] and sess.compaction_count == 1


def test_reactive_compact_takes_only_its_three_values(sess):
    with pytest.raises(OcwError):
        Turn(sess, Counting(), reactive_compact="sometimes")


def test_a_gateways_own_count_far_below_the_settled_calibration_is_unverified(sess):
    """Issue 23: behind LiteLLM a stream's usage is the gateway's own count (41 where the
    model counts 90). Once the calibration rests on three samples, a report below 70 % of
    it is unverified: no sample, not the measured basis, counted for the panel."""
    for i in range(3):
        run_turn(sess, f"Question {i}: " + WORDS, Counting("fine", ratio=2.0), threshold=0)
    settled = sess.metadata["calibration"]
    assert sess.calibration > 1.5 and sess.occupancy()["basis"] == "measured"  # ~2× on the messages
    run_turn(sess, "And now? " + WORDS, Counting("fine", ratio=0.9), threshold=0)
    occ = sess.occupancy()
    assert sess.metadata["calibration"] == settled and occ["basis"] == "estimated" and occ["usage_unverified"] == 1
    run_turn(sess, "Again. " + WORDS, Counting("fine", ratio=1.9), threshold=0)  # the model's own again: used
    assert sess.occupancy()["basis"] == "measured" and sess.metadata["calibration"]["samples"] == 4
