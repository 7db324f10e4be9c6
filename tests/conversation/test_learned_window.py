"""The window ocw plans with and the calibration of its estimates (issue 10, items 1–3, 8).

Session level: the smallest known window wins, with its source; a stated limit
only lowers it, a server's report replaces it; both belong to the model. The
calibration is learned from measured samples and forgotten with the model.
Turn level, with a scripted provider that raises overflow errors carrying the
server's numbers: the retry fits what the server said, an identical request is
never sent twice, one message too big for the window is one clear line.
"""
from __future__ import annotations

import logging

import pytest

from ocw.text.errors import ContextOverflowError, StoreError
from ocw.providers.base import Reply, Usage
from ocw.conversation.sessions import Store
from ocw.text.tokens import count_message
from ocw.conversation.turn import run_turn

WORDS = "The nightly load of orders_2024.csv finished in 41 s with no errors. "


@pytest.fixture
def sess(store):
    return store.create_session(model="tiny", provider="openai", context_window=8_192, system_prompt="Be brief.")


# -- learned windows ---------------------------------------------------------------------------
def test_a_stated_limit_lowers_the_window_and_says_where_it_came_from(sess):
    assert (sess.context_window, sess.window_source) == (8_192, "configured")
    assert sess.learn_window(2_048, "stated in the server's error") is True
    assert (sess.context_window, sess.window_source) == (2_048, "stated in the server's error")
    assert sess.configured_window == 8_192  # the configuration itself is untouched
    occ = sess.occupancy()
    assert occ["window"] == 2_048 and occ["window_source"] == "stated in the server's error"


def test_a_stated_limit_never_raises_the_window_but_a_report_replaces_it(sess):
    sess.learn_window(2_048, "error")
    assert sess.learn_window(4_096, "error") is False and sess.context_window == 2_048
    assert sess.learn_window(2_048, "error") is False  # the same figure: nothing to announce
    assert sess.learn_window(4_096, "llama.cpp /props", reported=True) is True
    assert (sess.context_window, sess.window_source) == (4_096, "llama.cpp /props")
    # A report above the configured window changes nothing ocw plans with.
    assert sess.learn_window(32_768, "llama.cpp /props", reported=True) is True
    assert (sess.context_window, sess.window_source) == (8_192, "configured")


@pytest.mark.parametrize("bad", [0, -1, 255, True, None, 2048.0, "2048"])
def test_implausible_windows_are_ignored(sess, bad):
    assert sess.learn_window(bad, "error") is False
    assert sess.context_window == 8_192 and "learned_window" not in sess.metadata


def test_256_is_the_smallest_window_learned(sess):
    assert sess.learn_window(256, "error") is True and sess.context_window == 256


def test_learned_window_and_calibration_belong_to_the_model_and_survive_a_restart(tmp_db):
    st = Store(tmp_db)
    s = st.create_session(model="tiny", context_window=8_192)
    s.append_many([("user", WORDS * 4), ("assistant", WORDS * 4)])
    s.learn_window(2_048, "error")
    s.record_usage(int(s.occupancy()["estimated_total"] * 1.9))
    sid = s.id
    st.close()
    st = Store(tmp_db)
    try:
        s = st.open_session(sid)
        assert s.context_window == 2_048 and s.calibration == pytest.approx(1.9, abs=0.01)
        s.reset_context(model="another-model")
        assert s.context_window == 8_192 and s.calibration == 1.0
    finally:
        st.close()


# -- calibration -------------------------------------------------------------------------------
def test_calibration_is_a_moving_average_of_measured_over_estimated(sess):
    sess.append_many([("user", WORDS * 4), ("assistant", WORDS * 4)])
    est = sess.occupancy()["estimated_total"]
    sess.record_usage(int(est * 1.9))
    assert sess.calibration == pytest.approx(1.9, abs=0.01)
    sess.append("user", WORDS)
    est2 = sess.occupancy()["estimated_total"]
    sess.record_usage(int(est2 * 2.1))
    assert sess.calibration == pytest.approx(2.0, abs=0.01)  # half old, half new


@pytest.mark.parametrize("ratio, expected", [(1.03, 1.0), (1.0, 1.0), (0.97, 1.0), (1.05, 1.05), (0.9, 0.9)])
def test_within_three_percent_the_estimate_stands(sess, ratio, expected):
    sess.append_many([("user", WORDS * 20), ("assistant", WORDS * 20)])
    est = sess.occupancy()["estimated_total"]
    sess.record_usage(round(est * ratio))
    assert sess.calibration == pytest.approx(expected, abs=0.002)
    occ = sess.occupancy()
    sess.append("user", "next")  # HEAD moved: the estimate, calibrated or not
    occ = sess.occupancy()
    assert occ["basis"] == "estimated" and occ["calibrated"] is (expected != 1.0)


@pytest.mark.parametrize("ratio", [0.2, 9.0])
def test_implausible_ratios_are_not_learned(sess, ratio):
    sess.append_many([("user", WORDS * 20), ("assistant", WORDS * 20)])
    sess.set_metadata()  # no-op write, to compare against
    est = sess.occupancy()["estimated_total"]
    sess.record_usage(max(1, int(est * ratio)))
    assert sess.calibration == 1.0


def test_a_sample_larger_than_its_window_changes_nothing(sess):
    sess.append_many([("user", WORDS), ("assistant", WORDS)])
    before = sess.metadata
    assert sess.record_usage(8_193) is False
    assert sess.metadata == before and sess.calibration == 1.0
    assert sess.record_usage(8_192) is False  # at the window: valid (first sample: baseline only)
    assert sess.metadata["context_window"]["used"] == 8_192


# -- turns against a scripted provider ------------------------------------------------------------
class Scripted:
    """A provider whose replies are scripted: a reply text, or an exception to raise.
    Records each request's messages (as the provider would send them)."""

    name, offline = "scripted", False

    def __init__(self, *script, usage: bool = True, context_window=None):
        self.script, self.usage, self.context_window = list(script), usage, context_window
        self.requests: list[tuple] = []

    def stream(self, messages, *, system=None, tools=None, max_tokens=None, on_event=None):
        self.requests.append((system, messages))
        item = self.script.pop(0) if self.script else "ok"
        if isinstance(item, BaseException):
            raise item
        if on_event:
            on_event("text", item)
        prompt = sum(count_message(m["role"], m["content"], "cl100k_base") for m in messages)
        return Reply(content=[{"type": "text", "text": item}],
                     usage=Usage(prompt, 5) if self.usage else Usage())

    def complete(self, messages, *, system=None, max_tokens=None):
        return Reply(content=[{"type": "text", "text": "Summary: nightly loads."}], usage=Usage())

    def close(self):
        pass


def overflow(limit=None, prompt_tokens=None) -> ContextOverflowError:
    e = ContextOverflowError("provider: HTTP 400: too long", status=400)
    e.limit, e.prompt_tokens = limit, prompt_tokens
    return e


def request_size(req, calibration=1.0) -> int:
    system, messages = req
    n = count_message("system", [{"type": "text", "text": system}], "cl100k_base") if system else 0
    return int((n + sum(count_message(m["role"], m["content"], "cl100k_base") for m in messages)) * calibration)


def long_session(sess, pairs=30):
    sess.append_many([(r, f"{r} {i}: " + WORDS * 3) for i in range(pairs) for r in ("user", "assistant")])


def test_an_overflow_with_a_stated_limit_learns_it_and_the_retry_fits_it(sess):
    long_session(sess)
    notes = []
    p = Scripted(overflow(limit=2_048), "recovered")
    res = run_turn(sess, "What now?", p, on_system=notes.append)
    assert res.text == "recovered" and res.retried_after_overflow
    assert sess.context_window == 2_048
    assert sum("context window is 2,048 tokens" in n for n in notes) == 1  # announced once
    assert len(p.requests) == 2
    assert request_size(p.requests[1], sess.calibration) <= 0.8 * 2_048  # fits what the server said
    assert request_size(p.requests[0]) > 2_048
    assert [c.trigger for c in res.compactions] == ["reactive"] and res.compactions[0].outcome == "succeeded"


def test_the_stated_prompt_size_sizes_the_retry_but_calibrates_nothing(sess):
    """A refused request is no sample of the model's tokenizer (issue 23): its stated size
    sizes its own retry only; the session's calibration stays where it was."""
    long_session(sess)
    first = request_size((sess.system_prompt, [m for m in sess.rendered_history()[1:]]))
    p = Scripted(overflow(limit=2_048, prompt_tokens=int(first * 1.9)), "recovered", usage=False)
    run_turn(sess, "What now?", p)
    assert sess.calibration == 1.0 and "calibration" not in sess.metadata
    assert request_size(p.requests[1], 1.9) <= 0.8 * 2_048  # the retry fits in the refusal's own measure


def test_an_overflow_without_numbers_retries_at_most_half_the_failed_request(sess):
    long_session(sess)
    p = Scripted(overflow(), "recovered")
    run_turn(sess, "What now?", p)
    assert len(p.requests) == 2
    assert request_size(p.requests[1]) <= request_size(p.requests[0]) // 2 + 10


def test_a_second_overflow_stops_with_one_clear_line_and_stores_nothing(sess):
    long_session(sess)
    head, n = sess.head, len(sess.branch())
    p = Scripted(overflow(limit=2_048), overflow(limit=2_048))
    with pytest.raises(ContextOverflowError) as e:
        run_turn(sess, "What now?", p)
    assert len(p.requests) == 2
    msg = e.value.user_message()
    assert "still too long" in msg and "2,048" in msg and "\n" not in msg
    assert sess.head == head and len(sess.branch()) == n


def test_one_message_bigger_than_the_window_is_said_and_never_resent(sess):
    sess.append_many([("user", "hi"), ("assistant", "hello")])
    p = Scripted(overflow(limit=2_048), "never")
    with pytest.raises(ContextOverflowError) as e:
        run_turn(sess, WORDS * 300, p)
    assert len(p.requests) == 1  # the identical request is not sent again
    msg = e.value.user_message()
    assert "This message alone is about" in msg and "2,048" in msg and "split it" in msg


def test_a_server_without_usage_is_noted_once_per_session(sess):
    notes = []
    p = Scripted("one", "two", usage=False)
    run_turn(sess, "first", p, on_system=notes.append)
    run_turn(sess, "second", p, on_system=notes.append)
    assert notes == ["The server sends no token usage with its replies; the ring shows ocw's estimates."]
    assert sess.occupancy()["basis"] == "estimated"


def test_a_usage_sample_that_cannot_be_decided_never_fails_the_stored_reply(sess, monkeypatch, caplog):
    """The turn and its sample are one write; a failure deciding the sample drops the
    sample (logged), never the reply."""
    import ocw.context.count as count_rules

    def broken(*a, **k):
        raise StoreError("disk full")

    monkeypatch.setattr(count_rules, "apply_sample", broken)
    with caplog.at_level(logging.WARNING, logger="ocw"):
        res = run_turn(sess, "hello", Scripted("stored anyway"))
    assert res.text == "stored anyway"
    assert [sess.node(n)["role"] for n in sess.branch()] == ["user", "assistant"]
    assert sess.metadata.get("context_window") is None  # no sample
    assert any("usage sample" in r.getMessage() for r in caplog.records)


def test_a_turn_is_one_write_with_its_usage_sample(sess):
    rev = sess.backend.rev(sess.id)
    run_turn(sess, "hello", Scripted("one write"))
    assert sess.backend.rev(sess.id) == rev + 1  # user + reply + sample: one transaction
    assert sess.metadata["context_window"]["head"] == sess.head and sess.occupancy()["basis"] == "measured"


def test_the_automatic_threshold_is_judged_in_calibrated_tokens(sess):
    """At 45 % by the raw estimate but 85 % in the model's own tokens, a turn compacts first."""
    long_session(sess, pairs=28)
    est = sess.occupancy()["estimated_total"]
    sess.set_metadata(calibration={"ratio": 1.9, "samples": 1, "model": "tiny"})
    assert est / 8_192 < 0.5 and 0.8 <= sess.occupancy()["ratio"] < 0.9
    res = run_turn(sess, "next", Scripted("ok"))
    assert [c.trigger for c in res.compactions] == ["auto"]
    assert sess.occupancy()["ratio"] < 0.6
