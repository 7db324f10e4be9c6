"""Issue 5: the turn loop (ocw/conversation/turn.py) against the loopback server, below the magics.

What a turn stores and when: nothing until the reply is complete, then the user
message and the reply together; automatic compaction at the threshold before the
request, snip when that is not enough, reactive compaction on an overflow at most
once per turn; the provider's usage recorded against the HEAD it produced.
"""
from __future__ import annotations

import re

import pytest

from ocw.text.errors import ContextOverflowError, ProviderConnectionError, ServerError
from ocw.providers import OpenAIProvider
from ocw.conversation.turn import run_turn

SYSTEM = "You are a helpful assistant."
USER = "Please keep notes about the garden plan: " + "tomatoes basil " * 45  # ~100 tokens


@pytest.fixture
def sess(store):
    return store.create_session(model="gpt-4o-mini", provider="openai", context_window=2000, system_prompt=SYSTEM)


@pytest.fixture
def provider(refserver):
    p = OpenAIProvider("gpt-4o-mini", base_url=refserver.openai_url, api_key="k-test", max_retries=0,
                       context_window=2000)
    yield p
    p.close()


def turns(sess, provider, srv, n, reply_words=50, threshold=0.8):
    for i in range(n):
        srv.script(text=f"Reply {i}: " + "green leaves grow " * reply_words)
        run_turn(sess, f"Turn {i}. " + USER, provider, threshold=threshold)


def snapshot(sess):
    sess.sync()
    return sess.head, list(sess.branch()), sess.backend.node_count(sess.id), sess.generation


def test_a_turn_stores_user_and_reply_together_and_records_usage(sess, provider, refserver):
    texts = []
    refserver.script(text="Hello there, gardener.")
    res = run_turn(sess, "hi", provider, on_text=texts.append)
    assert "".join(texts) == res.text == "Hello there, gardener."
    assert len(texts) > 1  # it streamed
    path = sess.branch()
    assert res.node_ids == path and [sess.node(n)["role"] for n in path] == ["user", "assistant"]
    occ = sess.occupancy()
    sample = sess.metadata["context_window"]
    assert occ["basis"] == "measured" and sample["head"] == path[-1]
    assert sample["used"] == refserver.requests[-1].prompt_tokens + res.usage.output_tokens
    assert refserver.requests[-1].system == SYSTEM


@pytest.mark.parametrize("script", [dict(status=500), dict(drop_after_chunks=4), dict(stream_error="api_error")])
def test_a_failed_request_stores_nothing(script, sess, provider, refserver):
    turns(sess, provider, refserver, 1)
    before = snapshot(sess)
    texts = []
    refserver.script(text="a partial reply that never finishes " * 5, **script)
    with pytest.raises((ServerError, ProviderConnectionError)):
        run_turn(sess, "this one fails", provider, on_text=texts.append)
    assert snapshot(sess) == before
    refserver.script(text="fine again")
    run_turn(sess, "and now", provider)
    assert len(sess.branch()) == 4


def test_an_interrupt_from_the_stream_stores_nothing(sess, provider, refserver):
    turns(sess, provider, refserver, 1)
    before = snapshot(sess)
    seen = []

    def on_text(delta):
        seen.append(delta)
        if len(seen) == 3:
            raise KeyboardInterrupt

    refserver.script(text="slow " * 50, chunk_delay=0.02)
    with pytest.raises(KeyboardInterrupt) as e:
        run_turn(sess, "stop me", provider, on_text=on_text)
    assert e.value.turn_result.interrupted and e.value.turn_result.tool_steps == 0
    assert snapshot(sess) == before
    assert refserver.wait_closed(3.0)


def test_automatic_compaction_runs_before_the_request_at_the_threshold(sess, provider, refserver):
    turns(sess, provider, refserver, 4)
    assert 0.5 <= sess.occupancy()["ratio"] < 0.8 and not refserver.summary_requests()
    msgs = []
    refserver.script(text="Summary: garden notes.")
    refserver.script(text="after compaction")
    n = len(refserver.requests)
    res = run_turn(sess, "Turn 4. " + USER, provider, threshold=0.5, on_system=msgs.append)
    assert [(r.is_summary, r.stream) for r in refserver.requests[n:]] == [(True, False), (False, True)]
    assert [c.outcome for c in res.compactions] == ["succeeded"] and res.compactions[0].trigger == "auto"
    assert msgs[0] == "Compacting context…" and msgs[1].startswith("Context compacted: covered ")
    assert sess.compaction_count == 1
    # The request carried the summary, not the folded turns.
    sent = str(refserver.requests[-1].messages)
    assert "[Summary of the earlier conversation]" in sent and "Turn 0." not in sent


def test_no_automatic_compaction_when_it_is_off(sess, provider, refserver):
    turns(sess, provider, refserver, 4)
    n = len(refserver.requests)
    res = run_turn(sess, "Turn 4. " + USER, provider, threshold=0.0)
    assert not res.compactions and not refserver.summary_requests()
    assert len(refserver.requests) == n + 1


def test_snip_trims_the_request_only(sess, provider, refserver):
    """Nothing to compact (one long turn: two messages, fewer than four), still over
    the threshold: the oldest messages leave this request, the DAG keeps them."""
    turns(sess, provider, refserver, 1, reply_words=500)
    assert sess.occupancy()["ratio"] > 0.75
    before = snapshot(sess)
    msgs = []
    refserver.script(text="snipped reply")
    res = run_turn(sess, "Turn 1. " + USER, provider, on_system=msgs.append)
    assert res.snipped == 2 and any("left out of this request only" in m for m in msgs)
    assert [c.outcome for c in res.compactions] == ["no_op"] and not refserver.summary_requests()
    sent = refserver.requests[-1].messages
    assert len(sent) == 1 + 3 - 2  # system + 2 stored + the new user message, minus the 2 snipped
    assert "Turn 1." in str(sent[-1]["content"])
    assert sess.branch()[:2] == before[1] and len(sess.branch()) == 4  # nothing removed


def test_reactive_compaction_at_most_once_per_turn(sess, provider, refserver):
    turns(sess, provider, refserver, 4)
    refserver.script(overflow=True)
    refserver.script(text="Summary: garden.")
    refserver.script(text="recovered")
    n = len(refserver.requests)
    res = run_turn(sess, "more", provider)
    assert res.retried_after_overflow and res.text == "recovered"
    assert [c.trigger for c in res.compactions] == ["reactive"] and res.compactions[0].outcome == "succeeded"
    assert [(r.status, r.is_summary) for r in refserver.requests[n:]] == [(400, False), (200, True), (200, False)]

    before = snapshot(sess)
    refserver.script(overflow=True, times=5)
    n = len(refserver.requests)
    with pytest.raises(ContextOverflowError) as e:
        run_turn(sess, "too much", provider)
    assert "after compacting once" in str(e.value)
    # overflow, (fewer than four messages since the summary: no summary request), one
    # smaller retry — then stop.
    assert [(r.status, r.is_summary) for r in refserver.requests[n:]] == [(400, False), (400, False)]
    assert refserver.pending == 3
    assert snapshot(sess) == before


def test_an_empty_message_is_refused_before_anything_happens(sess, provider, refserver):
    from ocw.text.errors import OcwError

    with pytest.raises(OcwError):
        run_turn(sess, "   \n", provider)
    assert refserver.requests == [] and sess.branch() == []


# -- issue 12, item 4: the snip note says "after compaction" only when one ran ------------------
def test_snip_with_automatic_compaction_off_claims_no_compaction(sess, provider, refserver):
    turns(sess, provider, refserver, 3, reply_words=230, threshold=0.0)
    msgs = []
    refserver.script(text="snipped reply")
    res = run_turn(sess, "Turn 3. " + USER, provider, threshold=0.0, on_system=msgs.append)
    assert not res.compactions and not refserver.summary_requests() and sess.compaction_count == 0
    assert res.snipped >= 1
    s = "s" if res.snipped != 1 else ""
    assert msgs == [f"The request was over the window and nothing was compacted this turn; {res.snipped} older "
                    f"message{s} left out of this request only (still kept in the session; %compact folds "
                    "them into the summary)."]
    assert not any("after compaction" in m for m in msgs)


def test_snip_after_a_compaction_that_ran_says_so(sess, provider, refserver):
    """An automatic compaction now folds all it must to land under the line (landing.py),
    so the snip after a compaction is the reactive one's: it keeps a tail (a quarter of
    what the retry must fit) that the long message then pushes out."""
    turns(sess, provider, refserver, 4, reply_words=50)
    msgs = []
    refserver.model_window = 2000
    refserver.script(overflow=True)
    refserver.script(text="Summary: garden notes.")
    refserver.script(text="reply to a long message")
    res = run_turn(sess, "A long one. " + "tomatoes basil " * 700, provider, threshold=0, on_system=msgs.append)
    assert [(c.trigger, c.outcome) for c in res.compactions] == [("reactive", "succeeded")] and res.snipped >= 1
    occ = sess.occupancy()  # the figures are what was sent, and say how much was left out
    assert 1 <= occ["left_out"] <= res.snipped and occ["total"] < sess.occupancy(as_sent=False)["total"]
    assert occ["ratio"] <= 1.0
    n = occ["left_out"]  # the retry's own (res.snipped adds the refused request's too)
    s = "s" if n != 1 else ""
    assert msgs[-1] == (f"The request was still over the window after compaction; {n} older message{s} "
                        "left out of this request only (still kept in the session).")


@pytest.mark.parametrize("lang, compacted, text", [
    ("zh", True, "压缩后请求仍超出窗口；本次请求省略了 1 条较早的消息（会话中仍保留）。"),
    ("zh", False, "请求超出窗口，且本轮没有进行压缩；本次请求省略了 2 条较早的消息（会话中仍保留；%compact 可将其折叠进摘要）。"),
    ("en", True, "The request was still over the window after compaction; 1 older message left out of this request "
                 "only (still kept in the session)."),
])
def test_snip_texts_in_both_languages(lang, compacted, text):
    from ocw.text.i18n import text as i18n_text

    n = 1 if compacted else 2
    assert i18n_text("snipped" if compacted else "snipped_uncompacted", lang, n=n, s="s" if n != 1 else "") == text


# -- issue 26: what a turn says and sends around a refusal, a learned window, a prune ------------
def test_a_window_is_announced_once_when_it_changes_what_ocw_plans_with(sess):
    from ocw.conversation.request import learn_window

    assert sess.context_window == 2000
    note = learn_window(sess, 1500, "stated in the server's error", lang="en")
    assert note == ("The model's context window is 1,500 tokens (stated in the server's error); ocw plans "
                    "with it from now on (it assumed 2,000).")
    assert sess.context_window == 1500
    assert learn_window(sess, 1500, "stated in the server's error", lang="en") is None  # said once: nothing changed
    assert learn_window(sess, 1500, "stated in the server's error", lang="zh") is None
    # A window an error states never raises one learned; one the server reports does.
    assert learn_window(sess, 1800, "stated in the server's error", lang="en") is None
    assert sess.context_window == 1500
    assert learn_window(sess, 1800, "its /props", lang="en", reported=True) is not None
    assert sess.context_window == 1800
    learn_window(sess, 1500, "stated in the server's error", lang="en")
    assert sess.context_window == 1500


def test_a_turn_over_the_line_prunes_old_tool_output_first_and_says_so(store, provider, refserver):
    """Old tool results over the threshold: stubbed (no summary request), and one line says
    how many and the figures before and after."""
    s = store.create_session(model="gpt-4o-mini", provider="openai", context_window=16_000, system_prompt=SYSTEM)
    result = "\n".join(f"line {i}: GET /api/orders/{i} 200" for i in range(150))  # ~1.5k tokens
    for k in range(6):
        s.append_many([("user", f"read day {k}"),
                       ("assistant", [{"type": "tool_use", "id": f"t{k}", "name": "read_log", "input": {"day": k}}]),
                       ("tool", [{"type": "tool_result", "tool_use_id": f"t{k}", "content": result}]),
                       ("assistant", f"day {k} looks fine")])
    before = s.occupancy()["total"]
    assert before / 16_000 >= 0.5
    msgs = []
    refserver.script(text="all six days look fine")
    res = run_turn(s, "and the whole week?", provider, threshold=0.5, on_system=msgs.append)
    assert res.text == "all six days look fine" and not res.compactions and not refserver.summary_requests()
    [line] = msgs
    m = re.fullmatch(r"Pruned old tool output: (\d+) results replaced by one-line stubs \(the store keeps them "
                     r"whole\), ([\d,]+) → ([\d,]+) tokens", line)
    assert m, line
    n, said_before, said_after = int(m[1]), int(m[2].replace(",", "")), int(m[3].replace(",", ""))
    assert 1 < n < 6 and said_before == before and said_after < before - 1_000 * n
    assert "[old tool output pruned: read_log(" in str(refserver.requests[-1].messages)


def test_a_retry_that_would_be_the_same_request_is_not_sent(sess, provider, refserver):
    """Refused, with nothing to compact and nothing to leave out: the retry would be the
    refused request again — the turn stops without sending it."""
    turns(sess, provider, refserver, 1)
    before = snapshot(sess)
    refserver.model_window = 2000  # the refusal states a window: the retry must fit 80 % of it
    refserver.script(overflow=True, times=3)
    n = len(refserver.requests)
    with pytest.raises(ContextOverflowError, match="after compacting once this turn"):
        run_turn(sess, "and the roses?", provider)
    assert [(r.status, r.is_summary) for r in refserver.requests[n:]] == [(400, False)]
    assert snapshot(sess) == before and refserver.pending == 2


def test_a_second_refusal_ends_the_turn_however_much_could_still_be_left_out(sess, provider, refserver):
    """One reactive compaction and one retry per turn: the retry refused too, the turn
    stops — even with older messages left that a smaller retry could leave out."""
    for i in range(14):
        refserver.script(text=f"Reply {i}: beans and peas.")
        run_turn(sess, f"Turn {i}: where do the beans go?", provider, threshold=0.0)
    before = snapshot(sess)
    refserver.summary_text = "Summary: beans and peas."
    refserver.script(overflow=True, times=6)
    n = len(refserver.requests)
    with pytest.raises(ContextOverflowError, match="after compacting once this turn"):
        run_turn(sess, "ok?", provider, threshold=0.0)
    chat = [r for r in refserver.requests[n:] if not r.is_summary]
    assert [r.status for r in chat] == [400, 400]
    assert len(chat[1].messages) < len(chat[0].messages)  # the retry was smaller, and still refused
    assert refserver.pending == 4 and before[0] == snapshot(sess)[0]


def test_a_refusal_that_states_the_prompt_size_sets_the_floor_for_later_usage(sess, provider, refserver):
    """The prompt size a refusal states (a plausible ratio to ocw's estimate) is noted:
    later usage far below it is not trusted. An implausible one (over 8×) is not."""
    turns(sess, provider, refserver, 4)
    refserver.model_window = 2000
    refserver.summary_text = "Summary: garden."
    refserver.script(overflow=True)
    refserver.script(text="recovered")
    res = run_turn(sess, "more", provider)
    assert res.retried_after_overflow and res.text == "recovered"
    floor = sess.metadata["usage_floor"]
    assert floor["model"] == "gpt-4o-mini" and 0.35 <= floor["ratio"] <= 0.7  # 0.7 × (stated ÷ estimated)

    other = sess.store.create_session(model="gpt-4o-mini", provider="openai", context_window=2000,
                                      system_prompt=SYSTEM)
    turns(other, provider, refserver, 4)
    refserver.usage_scale = 10.0  # the server counts ten times ocw's estimate: not a tokenizer
    refserver.script(overflow=True)
    refserver.script(text="recovered")
    assert run_turn(other, "more", provider).text == "recovered"
    assert "usage_floor" not in other.metadata


def test_a_message_too_big_for_the_retry_is_said_to_be_the_message(sess, provider, refserver):
    """Refused without a stated size: the retry must fit half the refused request. A new
    message bigger than that alone is named as the problem, not the history."""
    turns(sess, provider, refserver, 1, reply_words=20)
    before = snapshot(sess)
    refserver.script(overflow=True)
    with pytest.raises(ContextOverflowError, match=r"This message alone is about [\d,]+ tokens, more than "
                                                   r"the model's window of 2,000 tokens can take"):
        run_turn(sess, "Please read all of this: " + "tomatoes basil " * 300, provider)
    assert [r.status for r in refserver.requests[-1:]] == [400] and snapshot(sess) == before


def test_usage_far_below_the_settled_calibration_is_stored_as_unverified_with_its_figures(sess, provider, refserver):
    """A gateway's own count (0.9× where the model counted 2×): not a sample; the session
    keeps how many, and the last report's measured and estimated figures, in that order."""
    refserver.usage_scale = 2.0
    turns(sess, provider, refserver, 3, reply_words=10, threshold=0)
    settled = sess.metadata["calibration"]
    assert sess.calibration > 1.5 and sess.occupancy()["basis"] == "measured"
    refserver.usage_scale = 0.9
    refserver.script(text="fine")
    run_turn(sess, "And now? " + USER, provider, threshold=0)
    measured = refserver.requests[-1].prompt_tokens
    unverified = sess.metadata["usage_unverified"]
    assert unverified["count"] == 1 and unverified["last"][0] == measured
    assert measured < unverified["last"][1] < measured * 1.4  # ocw's estimate of what it sent: more than 0.9×
    assert sess.metadata["calibration"] == settled and sess.occupancy()["basis"] == "estimated"


def test_a_turn_without_a_step_limit_stops_after_8_tool_steps(sess, provider, refserver):
    """run_turn's own default (the API's, below %config Ocw.max_tool_steps): 8 steps, not 9.
    The calls name no tool on: each is answered with an error result and the model asks again."""
    refserver.script(times=12, tool_calls=[{"name": "lookup", "input": {"q": "x"}}])
    notes = []
    res = run_turn(sess, "Look it up, forever.", provider, on_system=notes.append)
    assert res.tool_steps == 8 and res.step_limit_reached and refserver.pending == 4
    assert notes[-1].startswith("Stopped after 8 tool steps (the limit, %config Ocw.max_tool_steps = 8)")
