"""Cut selection (`find_cut_index`, pure): which older messages fold into the summary."""
from __future__ import annotations

import pytest

from ocw.context.cut import MIN_MESSAGES, MIN_TAIL_MESSAGES, TAIL_HOLDS_ALL, TOO_SHORT, Cut, default_tail_budget, find_cut_index


def msg(i: int, tokens: int, role: str = "user", text: str | None = None, blocks: list | None = None) -> dict:
    content = blocks if blocks is not None else [{"type": "text", "text": f"message {i}" if text is None else text}]
    return {"id": f"n{i}", "role": role, "content": content, "tokens": tokens}


def uniform(n: int, tokens: int) -> list[dict]:
    return [msg(i, tokens, "user" if i % 2 == 0 else "assistant") for i in range(n)]


def tool_use(i: int, tokens: int, *ids: str) -> dict:
    return msg(i, tokens, "assistant", blocks=[{"type": "text", "text": "calling"}] + [
        {"type": "tool_use", "id": t, "name": "run", "input": {"k": t}} for t in ids])


def tool_result(i: int, tokens: int, *ids: str) -> dict:
    return msg(i, tokens, "tool", blocks=[{"type": "tool_result", "tool_use_id": t, "content": "out"} for t in ids])


def kept_tokens(messages, cut: Cut) -> int:
    return sum(m["tokens"] for m in messages[cut.index:])


def assert_no_split_pair(messages, cut: Cut):
    folded_uses = {b["id"] for m in messages[:cut.index] for b in m["content"] if b["type"] == "tool_use"}
    kept_results = {b["tool_use_id"] for m in messages[cut.index:] for b in m["content"] if b["type"] == "tool_result"}
    assert not folded_uses & kept_results


# -- the default tail budget -------------------------------------------------------------------
@pytest.mark.parametrize("window, budget", [
    (1_000_000, 40_000),  # 10 % = 100k, clamped to 40k
    (400_000, 40_000),
    (200_000, 20_000),  # 10 %
    (128_000, 12_800),
    (80_000, 8_000),  # 10 % = 8k
    (50_000, 8_000),  # 10 % = 5k, clamped up to 8k (25 % = 12.5k: no effect)
    (32_001, 8_000),  # 25 % = 8,000.25: the 8k floor holds
    (32_000, 8_000),  # 25 % = 8k exactly
    (31_999, 7_999),  # 25 % caps the 8k floor
    (12_000, 3_000),  # small windows keep their last quarter
    (10_000, 2_500),
    (8_192, 2_048),
    (6_000, 1_500),
    (4_096, 1_024),
    (2_048, 512),
    (1_000, 250),
])
def test_default_tail_budget(window, budget):
    assert default_tail_budget(window) == budget


@pytest.mark.parametrize("window, expected_kept", [(128_000, 12), (1_000_000, 40), (50_000, 8), (40_000, 8)])
def test_tail_is_the_longest_suffix_within_the_budget(window, expected_kept):
    messages = uniform(100, 1_000)
    cut = find_cut_index(messages, window)
    assert cut.index == 100 - expected_kept
    assert kept_tokens(messages, cut) <= default_tail_budget(window)
    # one more message would not have fit
    assert kept_tokens(messages, cut) + messages[cut.index - 1]["tokens"] > default_tail_budget(window)


def test_tail_keeps_at_least_five_nonempty_messages():
    messages = uniform(20, 5_000)  # the 12.8k budget alone would keep 2
    cut = find_cut_index(messages, 128_000)
    assert cut.index == 20 - MIN_TAIL_MESSAGES == 15


def test_empty_messages_do_not_count_toward_the_five():
    messages = uniform(20, 5_000)
    for i in (17, 18):
        messages[i] = msg(i, 3, text="   ")  # whitespace only: empty
    cut = find_cut_index(messages, 128_000)
    nonempty = [m for m in messages[cut.index:] if m["content"][0]["text"].strip()]
    assert len(nonempty) == 5
    assert cut.index == 13


def test_tool_and_thinking_blocks_count_as_nonempty():
    messages = uniform(20, 5_000)
    messages[19] = tool_result(19, 5_000, "t1")
    messages[18] = msg(18, 5_000, "assistant", blocks=[{"type": "thinking", "thinking": "hmm"},
                                                       {"type": "tool_use", "id": "t1", "name": "x", "input": {}}])
    assert find_cut_index(messages, 128_000).index == 15


def test_small_window_rule_bounds_the_budget():
    # On small windows the tail is the last quarter, not the 8k floor.
    messages = uniform(30, 100)
    assert find_cut_index(messages, 10_000).index == 30 - 25  # 25 × 100 = 2.5k
    assert find_cut_index(messages, 6_000).index == 30 - 15  # 15 × 100 = 1.5k


def test_five_message_floor_yields_to_half_the_window():
    # The floor widens the tail to five nonempty messages only while they fit in half
    # the window: on a 6k window, messages of 1k keep 3 (3k = half), not 5.
    messages = uniform(20, 1_000)
    assert find_cut_index(messages, 6_000).index == 20 - 3
    assert find_cut_index(messages, 5_999).index == 20 - 2  # half is 2,999.5: a third would not fit
    assert find_cut_index(messages, 10_000).index == 20 - 5  # half = 5k: all five fit
    assert find_cut_index(messages, 9_999).index == 20 - 4


# -- keep_recent_tokens ------------------------------------------------------------------------------
def test_keep_recent_tokens_overrides_the_default():
    messages = uniform(100, 1_000)
    assert find_cut_index(messages, 128_000, keep_recent_tokens=2_500).index == 98  # no five-message floor
    assert find_cut_index(messages, 128_000, keep_recent_tokens=30_000).index == 70  # beyond the 12.8k default
    assert find_cut_index(messages, 128_000, keep_recent_tokens=0).index == 100  # fold everything
    assert find_cut_index(messages, 8_192, keep_recent_tokens=50_000).index == 50  # beyond the small-window cap


def test_keep_recent_tokens_covering_everything_is_nothing_to_compact():
    messages = uniform(10, 1_000)
    cut = find_cut_index(messages, 128_000, keep_recent_tokens=10_000)
    assert cut.index == 0 and "nothing older to fold" in cut.reason
    assert find_cut_index(messages, 128_000, keep_recent_tokens=9_999).index == 1


def test_everything_within_the_default_tail_is_nothing_to_compact():
    messages = uniform(12, 1_000)
    cut = find_cut_index(messages, 128_000)
    assert cut == Cut(0, cut.reason, TAIL_HOLDS_ALL) and cut.reason
    assert find_cut_index(uniform(13, 1_000), 128_000).index == 1  # one more message: it folds


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_fewer_than_four_messages_is_nothing_to_compact(n):
    messages = uniform(n, 50_000)
    cut = find_cut_index(messages, 8_192, keep_recent_tokens=0)
    assert cut.index == 0 and str(MIN_MESSAGES) in cut.reason


def test_four_messages_can_be_compacted():
    assert find_cut_index(uniform(4, 50_000), 8_192, keep_recent_tokens=0).index == 4


def test_calibration_scales_every_budget():
    # A local tokenizer counting 2× the estimate: the 12.8k tail holds half as many messages.
    messages = uniform(100, 1_000)
    assert find_cut_index(messages, 128_000, calibration=2.0).index == 100 - 6  # 6 × 2k = 12k ≤ 12.8k
    assert find_cut_index(messages, 128_000, calibration=1.0).index == 100 - 12
    assert find_cut_index(messages, 128_000, keep_recent_tokens=4_000, calibration=2.0).index == 98
    # The floor's half-window limit is calibrated too: 5 × 2k = 10k > 16k/2, so 4 stay.
    assert find_cut_index(uniform(20, 1_000), 16_000, calibration=2.0).index == 20 - 4


def test_no_op_kinds():
    assert find_cut_index(uniform(3, 10), 8_192).kind == TOO_SHORT
    assert find_cut_index(uniform(4, 10), 8_192).kind == TAIL_HOLDS_ALL
    assert find_cut_index(uniform(40, 100), 8_192).kind == ""


# -- tool calls and results stay together ------------------------------------------------------
def test_budget_boundary_between_call_and_result_keeps_the_call():
    # keep_recent_tokens=1_500 fits the result (1k) and the last message (500), not the call.
    messages = uniform(10, 1_000) + [tool_use(10, 1_000, "t1"), tool_result(11, 1_000, "t1"), msg(12, 500)]
    cut = find_cut_index(messages, 128_000, keep_recent_tokens=1_500)
    assert cut.index == 10  # moved earlier: the call stays with its result
    assert_no_split_pair(messages, cut)


def test_default_budget_boundary_between_call_and_result():
    # 12.8k budget: the last 12 messages of 1k fit; make the 12th-from-last a result whose call is 13th.
    messages = uniform(30, 1_000)
    messages[17] = tool_use(17, 1_000, "a")
    messages[18] = tool_result(18, 1_000, "a")
    cut = find_cut_index(messages, 128_000)
    assert cut.index == 17
    assert_no_split_pair(messages, cut)


def test_parallel_calls_with_results_in_separate_messages():
    messages = uniform(10, 1_000) + [
        tool_use(10, 1_000, "x", "y"), tool_result(11, 1_000, "x"), tool_result(12, 1_000, "y"), msg(13, 1_000)]
    for keep in (2_000, 3_000):  # the boundary falls after the first or the second result
        cut = find_cut_index(messages, 128_000, keep_recent_tokens=keep)
        assert cut.index == 10, keep
        assert_no_split_pair(messages, cut)
    assert find_cut_index(messages, 128_000, keep_recent_tokens=1_000).index == 13  # after every result
    assert find_cut_index(messages, 128_000, keep_recent_tokens=4_000).index == 10  # exactly fits: no move
    assert find_cut_index(messages, 128_000, keep_recent_tokens=0).index == 14  # all folded together


def test_five_message_floor_landing_between_call_and_result():
    messages = uniform(20, 5_000)
    messages[14] = tool_use(14, 5_000, "t")
    messages[15] = tool_result(15, 5_000, "t")
    cut = find_cut_index(messages, 128_000)  # the floor alone would cut at 15
    assert cut.index == 14
    assert_no_split_pair(messages, cut)


def test_chained_tool_steps_move_the_cut_to_the_first_call():
    messages = uniform(6, 1_000) + [
        tool_use(6, 1_000, "s1"), tool_result(7, 1_000, "s1"),
        tool_use(8, 1_000, "s2"), tool_result(9, 1_000, "s2"), msg(10, 1_000)]
    cut = find_cut_index(messages, 128_000, keep_recent_tokens=2_000)  # boundary inside the second pair
    assert cut.index == 8
    assert_no_split_pair(messages, cut)


def test_a_tail_that_is_all_one_tool_exchange_is_nothing_to_compact():
    messages = [tool_use(0, 1_000, "a", "b", "c"), tool_result(1, 1_000, "a"), tool_result(2, 1_000, "b"),
                tool_result(3, 1_000, "c")]
    assert find_cut_index(messages, 128_000, keep_recent_tokens=1_000).index == 0


def test_pure_function_does_not_modify_its_input():
    messages = uniform(30, 1_000)
    snapshot = [dict(m) for m in messages]
    find_cut_index(messages, 128_000)
    assert messages == snapshot


def test_a_reused_tool_id_does_not_tie_the_tail_to_an_old_call():
    # Some providers number calls per request (the offline model restarts after a
    # compaction), so an id can recur. A kept result answers the nearest call before it.
    messages = uniform(4, 1_000) + [tool_use(4, 1_000, "toolu_1"), tool_result(5, 1_000, "toolu_1")] \
        + uniform(6, 1_000)[:6] + [tool_use(12, 1_000, "toolu_1"), tool_result(13, 1_000, "toolu_1"), msg(14, 1_000)]
    for i, m_ in enumerate(messages):
        m_["id"] = f"n{i}"
    cut = find_cut_index(messages, 128_000, keep_recent_tokens=3_000)
    assert cut.index == 12  # the new pair is kept whole; the old pair folds
    cut = find_cut_index(messages, 128_000, keep_recent_tokens=2_000)
    assert cut.index == 12  # boundary inside the new pair: moves to its call, not to the old one


def _reference_cut(messages, cut):
    """The set-based rule: move earlier while any folded call's id has a kept result."""
    def uses(ms):
        return {b["id"] for m_ in ms for b in m_["content"] if b["type"] == "tool_use"}

    def results(ms):
        return {b["tool_use_id"] for m_ in ms for b in m_["content"] if b["type"] == "tool_result"}

    while cut > 0 and uses(messages[:cut]) & results(messages[cut:]):
        cut -= 1
    return cut


def test_pairing_matches_the_set_rule_when_ids_are_unique():
    import random

    rng = random.Random(3)
    for trial in range(300):
        messages, n_id = [], 0
        while len(messages) < rng.randint(4, 40):
            r = rng.random()
            if r < 0.3:
                k = rng.randint(1, 3)
                ids_ = [f"t{n_id + j}" for j in range(k)]
                n_id += k
                messages.append(tool_use(len(messages), rng.randint(10, 3_000), *ids_))
                rng.shuffle(ids_)
                while ids_:  # results in one or more following messages
                    take = rng.randint(1, len(ids_))
                    messages.append(tool_result(len(messages), rng.randint(10, 3_000), *ids_[:take]))
                    ids_ = ids_[take:]
            else:
                messages.append(msg(len(messages), rng.randint(10, 3_000), rng.choice(["user", "assistant"])))
        keep = rng.choice([None, rng.randint(0, 20_000)])
        window = rng.choice([8_192, 32_000, 128_000])
        cut = find_cut_index(messages, window, keep_recent_tokens=keep)
        # recompute the pre-pairing cut the same way, then apply the reference rule
        loose = find_cut_index([{**m_, "content": [{"type": "text", "text": "x"}]} for m_ in messages],
                               window, keep_recent_tokens=keep)
        if len(messages) >= 4 and loose.index > 0:
            assert cut.index == _reference_cut(messages, loose.index), trial
        assert_no_split_pair(messages, cut)


# -- issue 13: interleaved calls, thinking-only messages -------------------------------------------
@pytest.mark.parametrize("keep, index", [
    (1_000, 10),  # only the last message: no result kept, no move
    (2_000, 6),  # keeps "res b": b's call at 7 → then "res a" is kept, so a's call at 6
    (3_000, 6),  # keeps both results
    (4_000, 6),  # keeps use b and both results: a's call joins
    (5_000, 6),  # exactly the whole exchange: no move
    (6_000, 5),  # one more, plain message: no move
])
def test_interleaved_calls_in_separate_messages_stay_with_their_results(keep, index):
    # use a, use b, res a, res b: moving the cut to b's call keeps a's result, whose call
    # must then move it again — one pass over the kept results is not enough.
    messages = uniform(6, 1_000) + [
        tool_use(6, 1_000, "a"), tool_use(7, 1_000, "b"), tool_result(8, 1_000, "a"), tool_result(9, 1_000, "b"),
        msg(10, 1_000)]
    cut = find_cut_index(messages, 128_000, keep_recent_tokens=keep)
    assert cut.index == index
    assert_no_split_pair(messages, cut)


def test_three_interleaved_calls_chain_back_to_the_first():
    messages = uniform(6, 1_000) + [
        tool_use(6, 1_000, "a"), tool_use(7, 1_000, "b"), tool_use(8, 1_000, "c"),
        tool_result(9, 1_000, "c"), tool_result(10, 1_000, "a"), tool_result(11, 1_000, "b"), msg(12, 1_000)]
    # keeps "res b, msg": b at 7 → keeps "res a" → a at 6 (c's pair is inside already)
    assert find_cut_index(messages, 128_000, keep_recent_tokens=2_000).index == 6


def test_a_thinking_only_message_counts_toward_the_five():
    # 12.8k budget on a 128k window: the last two 5k messages fit, then the floor widens
    # the tail to five nonempty messages; one of them holds only a thinking block.
    messages = uniform(20, 5_000)
    messages[17] = msg(17, 5_000, "assistant", blocks=[{"type": "thinking", "thinking": "let me see"}])
    assert find_cut_index(messages, 128_000).index == 15
    messages[17] = msg(17, 5_000, "assistant", text="   ")  # empty: does not count, one more is kept
    assert find_cut_index(messages, 128_000).index == 14


# -- issue 13: the rest of the rule's edges --------------------------------------------------------
def test_tiny_windows_keep_no_tail():
    assert [default_tail_budget(w) for w in (0, 3, 4, 7, 8)] == [0, 0, 1, 1, 2]


def test_blocks_that_count_as_nonempty_on_their_own():
    # 12.8k budget: two 5k messages fit; the floor widens to five nonempty ones.
    for block in ({"type": "tool_use", "id": "u", "name": "f", "input": {}},
                  {"type": "tool_result", "tool_use_id": "zz", "content": ""},
                  {"type": "thinking", "thinking": ""}):
        messages = uniform(20, 5_000)
        messages[17] = msg(17, 5_000, "assistant", blocks=[block])
        assert find_cut_index(messages, 128_000).index == 15, block["type"]
    for blocks in ([{"type": "text"}], [{"type": "text", "text": " \n"}], [{"type": "image", "source": "x"}], []):
        messages = uniform(20, 5_000)
        messages[17] = msg(17, 5_000, "assistant", blocks=blocks)
        assert find_cut_index(messages, 128_000).index == 14, blocks


def test_messages_without_content_or_a_count_are_empty_and_free():
    messages = uniform(20, 5_000)
    del messages[17]["content"]
    assert find_cut_index(messages, 128_000).index == 14  # empty: one more is kept
    messages = uniform(10, 1_000) + [tool_use(10, 1_000, "t"), tool_result(11, 1_000, "t"), msg(12, 1_000)]
    del messages[3]["content"]
    assert find_cut_index(messages, 128_000, keep_recent_tokens=2_000).index == 10
    messages = uniform(10, 1_000)
    for m in messages[6:]:
        del m["tokens"]  # counted as 0: the last four fit any budget
    assert find_cut_index(messages, 128_000, keep_recent_tokens=0).index == 6
    assert find_cut_index(messages, 128_000, keep_recent_tokens=1_000).index == 5


def test_keep_zero_tokens_folds_everything_even_a_one_token_message():
    messages = uniform(6, 1_000) + [msg(6, 1)]
    assert find_cut_index(messages, 128_000, keep_recent_tokens=0).index == 7
    assert find_cut_index(messages, 128_000, keep_recent_tokens=1).index == 6


def test_the_suffix_is_measured_message_by_message():
    # keep 2,000: the last two (1k each) fit; the 3k before them does not.
    messages = uniform(3, 100) + [msg(3, 3_000), msg(4, 1_000), msg(5, 1_000)]
    assert find_cut_index(messages, 128_000, keep_recent_tokens=2_000).index == 4
    assert find_cut_index(messages, 128_000, keep_recent_tokens=4_999).index == 4
    assert find_cut_index(messages, 128_000, keep_recent_tokens=5_000).index == 3


def test_the_floor_measures_the_message_it_adds():
    # Window 20k: tail budget 5k (25 %), half the window 10k. The last four (400) fit;
    # the floor adds the 6k message (6.4k ≤ 10k), not judged by the 9.7k before it.
    messages = [msg(0, 9_700), msg(1, 6_000), msg(2, 100), msg(3, 100), msg(4, 100), msg(5, 100)]
    assert find_cut_index(messages, 20_000).index == 1
    # The floor can widen the tail to everything: then there is nothing to fold.
    cut = find_cut_index(uniform(5, 5_000), 128_000)
    assert (cut.index, cut.kind) == (0, TAIL_HOLDS_ALL)
    assert cut.reason == "the recent tail already holds everything; nothing older to fold"


@pytest.mark.parametrize("calibration", [None, 0, -1.0, 1.0])
def test_no_or_a_nonsense_calibration_counts_the_estimate(calibration):
    messages = uniform(30, 1_000)
    assert find_cut_index(messages, 128_000, calibration=calibration).index == 30 - 12
    assert find_cut_index(messages, 128_000, keep_recent_tokens=3_000, calibration=calibration).index == 27


def test_a_calibration_under_one_keeps_more():
    assert find_cut_index(uniform(30, 1_000), 128_000, keep_recent_tokens=3_000, calibration=0.5).index == 24


# -- what counts as a call (issue 13's mutation run) -------------------------------------------
def test_only_tool_use_blocks_with_an_id_are_calls():
    """A text block carrying an "id" is no call, and a tool_use without an id ties
    nothing (nor crashes): the kept result below answers no call, so the cut stays."""
    messages = [msg(0, 100, "assistant", blocks=[{"type": "text", "text": "x", "id": "t1"},
                                                 {"type": "tool_use", "name": "run", "input": {}}])]
    messages += [msg(i, 100) for i in range(1, 5)] + [tool_result(5, 100, "t1")]
    assert find_cut_index(messages, 100_000, keep_recent_tokens=100) == Cut(5)


def test_a_kept_message_without_content_is_read_as_empty():
    messages = [tool_use(0, 100, "t1"), tool_result(1, 100, "t1")] + [msg(i, 100) for i in range(2, 4)]
    messages += [{"id": "n4", "role": "user", "tokens": 100}, msg(5, 100)]  # no "content" at all
    assert find_cut_index(messages, 100_000, keep_recent_tokens=200) == Cut(4)
    messages[5] = tool_result(5, 100, "t1")  # ... and a kept result still pulls its call in
    assert find_cut_index(messages, 100_000, keep_recent_tokens=200).kind == TAIL_HOLDS_ALL


@pytest.mark.parametrize("max_tail, index", [(0.5, 8), (1.0, 7), (0, 8)])
def test_a_landing_room_under_one_token_keeps_nothing_and_one_token_keeps_one(max_tail, index):
    # max_tail caps both the tail and its widening: below a (calibrated) message's size, nothing stays.
    messages = [msg(i, 1) for i in range(8)]
    assert find_cut_index(messages, 2_048, max_tail=max_tail).index == index
