"""snip: trims the outgoing request only; the store is never touched."""
from __future__ import annotations

import copy

import pytest

from ocw.context.snip import snip
from ocw.conversation.sessions import Store


def m(i, tokens, role="user", blocks=None, name=None):
    out = {"id": f"n{i}", "role": role, "tokens": tokens,
           "content": blocks or [{"type": "text", "text": f"message {i}"}]}
    if name:
        out["name"] = name
    return out


SYSTEM = {"role": "system", "content": [{"type": "text", "text": "sys"}], "tokens": 50}
SUMMARY = m("s", 300, "llm", name="context/summary")


def call(i, tokens, *ids):
    return m(i, tokens, "assistant", [{"type": "tool_use", "id": t, "name": "run", "input": {}} for t in ids])


def result(i, tokens, *ids):
    return m(i, tokens, "tool", [{"type": "tool_result", "tool_use_id": t, "content": "out"} for t in ids])


def total(msgs):
    return sum(x["tokens"] for x in msgs)


def ids(msgs):
    return [x.get("id", "system") for x in msgs]


def assert_pairs_intact(msgs):
    uses = {b["id"] for x in msgs for b in x["content"] if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for x in msgs for b in x["content"] if b["type"] == "tool_result"}
    assert uses == results


def test_under_budget_nothing_is_dropped():
    msgs = [SYSTEM, SUMMARY, m(1, 100), m(2, 100)]
    out, dropped = snip(msgs, 10_000)
    assert out == msgs and dropped == 0


def test_drops_oldest_first_and_keeps_system_summary_and_newest():
    msgs = [SYSTEM, SUMMARY] + [m(i, 1_000) for i in range(1, 6)]
    before = copy.deepcopy(msgs)
    out, dropped = snip(msgs, 2_500)
    assert ids(out) == ["system", "ns", "n4", "n5"]
    assert dropped == 3 and total(out) <= 2_500
    assert msgs == before  # the input list is not modified


def test_pinned_messages_stay_even_over_budget():
    msgs = [SYSTEM, SUMMARY, m(1, 1_000), m(2, 5_000)]
    out, dropped = snip(msgs, 100)
    assert ids(out) == ["system", "ns", "n2"]  # newest stays even though it alone is over
    assert dropped == 1


def test_a_tool_call_leaves_with_all_its_results():
    msgs = [SYSTEM, call(1, 100, "a", "b"), result(2, 2_000, "a"), result(3, 2_000, "b"), m(4, 100), m(5, 100)]
    out, dropped = snip(msgs, 500)
    assert ids(out) == ["system", "n4", "n5"]
    assert dropped == 3
    assert_pairs_intact(out)


@pytest.mark.parametrize("newest", ["text", "result"])
def test_never_leaves_an_orphan_result_or_call(newest):
    msgs = [SYSTEM, m(1, 1_000), call(2, 100, "a"), result(3, 3_000, "a"), call(4, 100, "b", "c"),
            result(5, 100, "b")]
    msgs += [result(6, 100, "c"), m(7, 100)] if newest == "text" else [result(6, 100, "c")]
    for budget in range(0, 5_000, 100):
        out, _ = snip(msgs, budget)
        assert_pairs_intact(out)
        assert out[0] is SYSTEM and out[-1] is msgs[-1]
        assert total(out) <= budget or len(out) == (2 if newest == "text" else 4)


def test_a_call_answered_by_the_newest_message_stays():
    # The newest message (being sent) is a tool result: its call must go with it, i.e. stay.
    msgs = [SYSTEM, m(1, 1_000), m(2, 1_000), call(3, 500, "z"), result(4, 500, "z")]
    for budget in (1_100, 600, 0):  # even over budget: snip never sends a result without its call
        out, dropped = snip(msgs, budget)
        assert ids(out) == ["system", "n3", "n4"]
        assert dropped == 2
        assert_pairs_intact(out)


def test_snip_never_writes_to_the_store(tmp_path, session_dump):
    store = Store(str(tmp_path / "snip.duckdb"))
    try:
        s = store.create_session(context_window=8_192, system_prompt="sys")
        s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 200) for i in range(12)])
        dump, head, gen = session_dump(store, s.id), s.head, s.generation
        history = s.rendered_history()
        out, dropped = snip(history, 1_000)
        assert dropped > 0 and out[-1]["id"] == s.head
        assert session_dump(store, s.id) == dump
        assert (s.head, s.generation) == (head, gen)
        assert s.rendered_history() == history  # the session still renders everything
    finally:
        store.close()


# -- boundaries (issue 13) --------------------------------------------------------------------
def test_a_total_exactly_on_the_budget_is_sent_whole():
    msgs = [SYSTEM, m(1, 100), m(2, 100), m(3, 100)]  # 350 in all
    assert snip(msgs, 350) == (msgs, 0)
    out, dropped = snip(msgs, 349)
    assert ids(out) == ["system", "n2", "n3"] and dropped == 1


def test_snip_stops_as_soon_as_the_total_lands_on_the_budget():
    msgs = [SYSTEM, m(1, 100), m(2, 100), m(3, 100), m(4, 100)]  # 450
    for budget, kept in ((351, ["n2", "n3", "n4"]), (350, ["n2", "n3", "n4"]), (349, ["n3", "n4"]),
                         (250, ["n3", "n4"]), (249, ["n4"])):
        out, dropped = snip(msgs, budget)
        assert ids(out) == ["system"] + kept, budget
        assert dropped == 4 - len(kept)


def test_an_older_call_and_result_leave_before_a_newer_message_between_them():
    # Groups go oldest first by their first message: the pair (n1, n3) is older than n2.
    msgs = [SYSTEM, call(1, 100, "a"), m(2, 100), result(3, 100, "a"), m(4, 100)]  # 450
    out, dropped = snip(msgs, 250)
    assert ids(out) == ["system", "n2", "n4"] and dropped == 2
    out, dropped = snip(msgs, 149)
    assert ids(out) == ["system", "n4"] and dropped == 3


def test_interleaved_calls_pair_each_call_with_its_own_result():
    # use a, use b, result a, result b: two calls made before either answer arrived.
    msgs = [SYSTEM, call(1, 100, "a"), call(2, 100, "b"), result(3, 100, "a"), result(4, 100, "b"), m(5, 100)]
    out, dropped = snip(msgs, 350)  # dropping the a-pair (200) is enough
    assert ids(out) == ["system", "n2", "n4", "n5"] and dropped == 2
    assert_pairs_intact(out)
    out, dropped = snip(msgs, 149)
    assert ids(out) == ["system", "n5"] and dropped == 4


def test_results_joined_through_one_message_leave_together():
    # n3 answers both a (from n1) and b (from n2): all three are one group.
    msgs = [SYSTEM, call(1, 100, "a"), call(2, 100, "b"), result(3, 100, "a", "b"), m(4, 100), m(5, 100)]
    out, dropped = snip(msgs, 300)
    assert ids(out) == ["system", "n4", "n5"] and dropped == 3
    msgs = [SYSTEM, call(1, 100, "a"), m(2, 100), call(3, 100, "b"), result(4, 100, "b", "a"), m(5, 100)]
    out, dropped = snip(msgs, 200)  # the n1/n3/n4 group goes first, then n2
    assert ids(out) == ["system", "n5"] and dropped == 4
    out, dropped = snip(msgs, 300)
    assert ids(out) == ["system", "n2", "n5"] and dropped == 3
    assert_pairs_intact(out)


def test_a_result_whose_call_is_already_gone_leaves_alone():
    # The call was compacted into the summary: its result is an ordinary message here.
    msgs = [SYSTEM, result(1, 100, "gone"), m(2, 100), m(3, 100)]
    out, dropped = snip(msgs, 250)
    assert ids(out) == ["system", "n2", "n3"] and dropped == 1
    # a result listed before its call does not tie the two together either
    msgs = [SYSTEM, result(1, 100, "x"), call(2, 100, "x"), m(3, 100)]
    out, dropped = snip(msgs, 250)
    assert ids(out) == ["system", "n2", "n3"] and dropped == 1


def test_a_call_without_an_id_ties_nothing():
    anon = m(1, 100, "assistant", [{"type": "tool_use", "name": "run", "input": {}}])
    msgs = [SYSTEM, anon, result(2, 100, "a"), m(3, 100)]
    out, dropped = snip(msgs, 250)
    assert ids(out) == ["system", "n2", "n3"] and dropped == 1


def test_the_summary_and_system_stay_by_name_and_role_alone():
    summary = {"role": "llm", "name": "context/summary", "tokens": 100, "content": [], "id": "s"}
    other_llm = {"role": "llm", "name": "context/other", "tokens": 100, "content": [], "id": "o"}
    system = {"role": "system", "tokens": 100, "content": [], "id": "sys"}
    msgs = [system, summary, other_llm, m(1, 100), m(2, 100)]
    out, dropped = snip(msgs, 300)
    assert ids(out) == ["sys", "s", "n2"] and dropped == 2
    # an assistant message named like the summary is pinned too: the name is what counts
    named = m(3, 100, "assistant", name="context/summary")
    out, _ = snip([named, m(4, 100), m(5, 100)], 150)
    assert ids(out) == ["n3", "n5"]


def test_a_pinned_call_keeps_its_results():
    # the system prompt never calls tools, but a pinned group stays whole whatever it holds
    msgs = [SYSTEM, {**call(1, 100, "a"), "role": "system"}, result(2, 100, "a"), m(3, 100), m(4, 100)]
    out, dropped = snip(msgs, 0)
    assert ids(out) == ["system", "n1", "n2", "n4"] and dropped == 1


def test_messages_without_tokens_or_content_count_as_empty():
    bare = {"role": "user", "id": "bare"}  # no tokens, no content
    msgs = [SYSTEM, bare, m(1, 100), m(2, 100)]
    assert snip(msgs, 250) == (msgs, 0)
    out, dropped = snip(msgs, 249)
    assert ids(out) == ["system", "n2"] and dropped == 2  # bare (0 tokens) goes first, then n1


def test_empty_and_single_message_requests():
    assert snip([], 0) == ([], 0)
    assert snip([], -5) == ([], 0)
    only = [m(1, 500)]
    out, dropped = snip(only, 10)
    assert out == only and dropped == 0  # the newest message always stays
    assert snip([m(1, 100), m(2, 100)], 99) == ([m(2, 100)], 1)
