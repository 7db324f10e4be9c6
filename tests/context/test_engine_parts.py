"""The compaction engine's pure parts, exactly (ocw/context/engine.py).

What the summarizer is sent — each turn as one transcript line, wrapped with the
previous summary — word for word; how `summarize` fills each call to exactly its
budget (the next line waits for the next call; a lone line too large is cut to the
room left, no deeper); the budgets' numbers as literals; and `finish`'s facts pass.
A recording summarizer (tests/conftest.py's FakeSummarizer) stands in for the model:
the engine is pure, it only ever calls `provider.complete`.
"""
from __future__ import annotations

import pytest

from ocw.context import engine, memory_model, summary_text
from ocw.context import memory as mem
from ocw.context.engine import CUT_NOTE, SUMMARY_SYSTEM, Plan, Prepared, plan_compaction, prepare, summarize, summary_budget, transcript_line
from ocw.context.summary_text import facts_budget, finish
from ocw.text.errors import OcwError
from ocw.context.graph import SUMMARY_NAME
from ocw.text.tokens import FRAME_TOKENS, count_message, count_text

ENC = "o200k_base"  # not the default encoding: a count that forgets its encoding is caught


def n(text: str) -> int:
    return count_text(text, ENC)


def body_of(previous: str, lines: list[str]) -> str:
    """The summarizer input, written out (the engine's `_summary_input`)."""
    prev = previous.strip() or "(none)"
    return (f"<previous-summary>\n{prev}\n</previous-summary>\n\n<new-turns>\n" + "\n\n".join(lines)
            + "\n</new-turns>")


def prep_for(lines, *, in_budget, old="", estimates=None, max_tokens=300, out_budget=256, replaced=10_000,
             window=100_000):
    plan = Plan(boundary_id="n_last", new_messages=[], old_summary_text=old, replaced_tokens=replaced)
    return Prepared(plan, window=window, out_budget=out_budget, max_tokens=max_tokens, in_budget=in_budget,
                    encoding=ENC, lines=list(lines), estimates=estimates or [1] * len(lines))


def words(prefix: str, count: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(count))


def mixed(prefix: str, count: int) -> str:
    """Words that cl100k and o200k count differently (Cyrillic)."""
    return " ".join(f"{prefix}{i} мир данные" for i in range(count))


# -- transcript lines ----------------------------------------------------------------------------
def test_transcript_lines_word_for_word():
    assert transcript_line({"role": "user", "content": [{"type": "text", "text": "What is in /tmp?"}]}) == \
        "[user] What is in /tmp?"
    assert transcript_line({"role": "tool", "name": "run", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt\nb.txt"}]}) == "[tool:run] a.txt\nb.txt"
    assert transcript_line({"role": "assistant", "name": None, "content": [
        {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "/tmp"}}]}) == '[assistant] ls({"path": "/tmp"})'
    # Several blocks: each on its own line, all of them.
    assert transcript_line({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "look first"}, {"type": "text", "text": "Listing it."},
        {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]}) == "[assistant] look first\nListing it.\nls({})"
    assert transcript_line({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) \
        == "[user] a\nb"


# -- what each call sends ---------------------------------------------------------------------------
def test_each_call_sends_the_previous_summary_and_the_new_lines(fake_summarizer):
    fake = fake_summarizer(lambda rec: f"  summary {rec['index'] + 1}  ")
    prep = prep_for(["[user] a", "[assistant] b"], in_budget=1_000, old="  Earlier: the plan.  ")
    text, calls = summarize(fake, prep)
    assert (text, calls, prep.calls) == ("summary 1", 1, 1)  # the answer, stripped
    (call,) = fake.calls
    assert call["input"] == body_of("Earlier: the plan.", ["[user] a", "[assistant] b"])
    assert call["input"] == ("<previous-summary>\nEarlier: the plan.\n</previous-summary>\n\n<new-turns>\n"
                             "[user] a\n\n[assistant] b\n</new-turns>")
    assert call["system"] == SUMMARY_SYSTEM and call["max_tokens"] == 300
    assert [m["role"] for m in call["messages"]] == ["user"]


def test_no_previous_summary_reads_none(fake_summarizer):
    fake = fake_summarizer("s")
    summarize(fake, prep_for(["[user] a"], in_budget=1_000, old="   "))
    assert fake.calls[0]["input"] == "<previous-summary>\n(none)\n</previous-summary>\n\n<new-turns>\n[user] a\n</new-turns>"


def test_max_tokens_falls_back_to_the_output_budget(fake_summarizer):
    fake = fake_summarizer("s")
    summarize(fake, prep_for(["[user] a"], in_budget=1_000, max_tokens=0, out_budget=256))
    assert fake.calls[0]["max_tokens"] == 256


def test_the_summarizers_own_usage_is_a_calibration_sample(fake_summarizer):
    fake = fake_summarizer("s")
    prep = prep_for(["[user] a"], in_budget=1_000)
    summarize(fake, prep)
    sent = fake.calls[0]["input"]
    estimate = count_message("user", [{"type": "text", "text": sent}], ENC) + n(SUMMARY_SYSTEM) + FRAME_TOKENS
    assert prep.usage_samples == [(fake.calls[0]["prompt_tokens"], estimate)]


def test_an_empty_answer_fails_the_compaction(fake_summarizer):
    with pytest.raises(OcwError) as ei:
        summarize(fake_summarizer("   "), prep_for(["[user] a"], in_budget=1_000))
    assert "empty" in ei.value.user_message().lower()


@pytest.mark.parametrize("in_budget, ok", [(255, False), (256, True), (257, True)])
def test_a_call_needs_256_tokens_of_room(fake_summarizer, in_budget, ok):
    fake = fake_summarizer("s")
    prep = prep_for(["[user] a"], in_budget=in_budget, window=1_234)
    if ok:
        assert summarize(fake, prep) == ("s", 1)
    else:
        with pytest.raises(OcwError) as ei:
            summarize(fake, prep)
        assert "1,234" in ei.value.user_message() and fake.calls == []


# -- each call is filled to exactly its budget --------------------------------------------------------
LINES = [f"[user] {mixed('alpha', 80)}", f"[assistant] {mixed('beta', 80)}", f"[user] {mixed('gamma', 80)}"]


def test_the_lines_count_differently_in_each_encoding():
    assert all(count_text(x, "cl100k_base") != n(x) for x in LINES)


def test_lines_that_fit_exactly_go_in_one_call(fake_summarizer):
    fake = fake_summarizer("S")
    whole = n(body_of("", LINES))
    assert whole > 256
    assert summarize(fake, prep_for(LINES, in_budget=whole)) == ("S", 1)
    assert fake.calls[0]["input"] == body_of("", LINES)


def test_one_token_over_moves_the_last_line_to_the_next_call(fake_summarizer):
    fake = fake_summarizer(lambda rec: f"S{rec['index'] + 1}")
    whole = n(body_of("", LINES))
    assert summarize(fake, prep_for(LINES, in_budget=whole - 1)) == ("S2", 2)
    assert [c["input"] for c in fake.calls] == [body_of("", LINES[:2]), body_of("S1", LINES[2:])]


def test_two_lines_over_move_both(fake_summarizer):
    fake = fake_summarizer(lambda rec: f"S{rec['index'] + 1}")
    budget = n(body_of("", LINES[:1])) + 2  # room for the first line only
    assert budget >= 256
    summarize(fake, prep_for(LINES, in_budget=budget))
    assert [c["input"] for c in fake.calls] == [body_of("", LINES[:1]), body_of("S1", LINES[1:2]),
                                                 body_of("S2", LINES[2:])]


def test_two_lines_where_only_one_fits(fake_summarizer):
    fake = fake_summarizer(lambda rec: f"S{rec['index'] + 1}")
    two = LINES[:2]
    summarize(fake, prep_for(two, in_budget=n(body_of("", two)) - 1))
    assert [c["input"] for c in fake.calls] == [body_of("", two[:1]), body_of("S1", two[1:])]


def test_a_lone_line_too_large_is_cut_to_the_room_left_and_no_deeper(fake_summarizer):
    """Real bug, fixed: the first cut also subtracted the uncut line's whole excess, so
    a 900-token line beside a 500-token summary in a 1,000-token call kept ~50 tokens
    where ~470 fit (the call went out 578 tokens full)."""
    fake = fake_summarizer("S")
    old = mixed("fact", 130)  # under 3/4 of the budget, so it stays whole
    line = "[user] " + mixed("word", 250)
    assert 400 <= n(old) <= 700 and n(line) >= 900 and count_text(old, "cl100k_base") != n(old)
    summarize(fake, prep_for([line], in_budget=1_000, old=old))
    (call,) = fake.calls
    sent = call["input"]
    assert 1_000 - 4 <= n(sent) <= 1_000  # filled to the budget
    kept = sent.split("<new-turns>\n", 1)[1].rsplit(CUT_NOTE + "\n</new-turns>", 1)[0]
    room = 1_000 - n(body_of(old, [""])) - n(CUT_NOTE)  # what the line may take
    assert line.startswith(kept) and room - 4 <= n(kept) <= room
    assert f"<previous-summary>\n{old}\n</previous-summary>" in sent  # the summary is not cut


@pytest.mark.parametrize("old_words, cut", [(280, False), (300, True)])
def test_a_previous_summary_over_three_quarters_of_the_budget_is_cut_to_half(fake_summarizer, old_words, cut):
    # Budget 800: 3/4 is 600. "fact0 fact1 ..." is 2 tokens a word, plus the wrapper's 21.
    fake = fake_summarizer("S")
    old = words("fact", old_words)
    line = "[user] " + words("word", 400)  # too large beside it either way
    summarize(fake, prep_for([line], in_budget=800, old=old))
    sent = fake.calls[0]["input"]
    prev = sent.split("<previous-summary>\n", 1)[1].split("\n</previous-summary>", 1)[0]
    if cut:
        assert n(prev) <= 400 and old.startswith(prev) and n(prev) >= 398  # half the budget
    else:
        assert prev == old
    assert n(sent) <= 800 and sent.endswith(CUT_NOTE + "\n</new-turns>")


# -- budgets -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("replaced, window, budget", [
    (10_000, 100_000, 2_000),  # a fifth of what it replaces
    (100_000, 1_000_000, 4_096),  # at most 4,096
    (10_000, 4_000, 1_000),  # at most a quarter of the window
    (1_000, 100_000, 256),  # at least 256
    (10_000, 800, 256),  # a quarter of 800 is 200: still 256
    (1_285, 100_000, 257),
])
def test_summary_budget(replaced, window, budget):
    assert summary_budget(replaced, window) == budget


@pytest.mark.parametrize("replaced, summary, window, room", [
    (10_000, 1_000, 1_000_000, 2_048),  # capped at 2,048
    (10_000, 1_000, 16_000, 1_000),  # a sixteenth of the window
    (10_000, 1_000, 16_010, 1_000),  # a whole number of tokens
    (10_000, 8_500, 1_000_000, 500),  # 90 % of 10,000 less the summary
    (10_000, 9_000, 1_000_000, 0),
    (10_000, 9_500, 1_000_000, 0),  # never negative
])
def test_facts_budget(replaced, summary, window, room):
    got = facts_budget(replaced, summary, window)
    assert got == room and isinstance(got, int)


# -- finish: the facts pass and the guard ----------------------------------------------------------
def test_finish_appends_identifiers_the_summary_omitted_from_every_line():
    lines = ["[user] the config is config/settings.toml", "[assistant] see src/app.py"]
    prep = prep_for(lines, in_budget=1_000, old="Earlier: ticket OPS-4471.", replaced=2_000, window=100_000)
    out = finish(prep, "The user set up the app.")
    assert out == "The user set up the app.\n\nKey identifiers: OPS-4471; config/settings.toml; src/app.py"


def test_finish_counts_the_summary_as_it_will_be_stored():
    # Stored as an "llm" node named context/summary: its count includes that framing.
    text = "Short summary."
    stored = count_message("llm", [{"type": "text", "text": text}], ENC, SUMMARY_NAME)
    for replaced, ok in ((stored - 3, False), (stored, False), (stored + 1, True)):
        prep = prep_for(["[user] nothing to list"], in_budget=1_000, replaced=replaced)
        if ok:
            assert finish(prep, text) == text
        else:
            with pytest.raises(OcwError) as ei:
                finish(prep, text)
            assert str(ei.value) == (f"the summary ({stored:,} tokens) is not smaller than what it replaces "
                                     f"({replaced:,} tokens); nothing was saved")


def test_finish_puts_the_kinds_a_focus_names_first_in_the_facts_list():
    lines = ["[user] config/settings.toml is about ticket OPS-4471"]
    text = "Summary."
    stored = count_message("llm", [{"type": "text", "text": text}], ENC, SUMMARY_NAME)
    one = n("Key identifiers:") + 2 + n("config/settings.toml") + 1  # room for the path alone
    replaced = next(r for r in range(1, 10_000) if int(r * 0.9) - stored == one)
    prep = prep_for(lines, in_budget=1_000, replaced=replaced, window=1_000_000)
    assert finish(prep, text) == "Summary.\n\nKey identifiers: OPS-4471"  # newest first: the ticket
    prep.focus = "keep the file paths"
    assert finish(prep, text) == "Summary.\n\nKey identifiers: config/settings.toml"


# -- the room each call leaves for lines, before the exact check -----------------------------------------
def test_a_call_takes_lines_by_their_estimates_within_the_room_left(fake_summarizer):
    # 1,000 − the previous summary − 32 for the wrapper: estimates of 100 take whole lines.
    fake = fake_summarizer(lambda rec: "S")
    old = mixed("fact", 60)  # 240 tokens in o200k (300 in cl100k: a room that forgets its encoding takes 6)
    room = 1_000 - n(old) - 32
    lines = [f"[user] q{i}" for i in range(12)]
    summarize(fake, prep_for(lines, in_budget=1_000, old=old, estimates=[100] * 12))
    first = room // 100
    assert first == 7
    assert fake.calls[0]["input"] == body_of(old, lines[:first])
    # later calls carry the answer "S" (1 token) instead of the old summary
    assert fake.calls[1]["input"] == body_of("S", lines[first:first + (1_000 - 1 - 32) // 100])


def test_the_room_is_never_under_128(fake_summarizer):
    fake = fake_summarizer(lambda rec: "S")
    old = words("fact", 90)  # leaves 300 − 181 − 32 < 128
    assert 300 - n(old) - 32 < 128
    lines = ["[user] a", "[user] b", "[user] c", "[user] d"]
    summarize(fake, prep_for(lines, in_budget=300, old=old, estimates=[64, 64, 1, 1]))
    assert fake.calls[0]["input"] == body_of(old, lines[:2])  # 64 + 64 = 128 fits; one more does not


def test_a_reply_without_usage_or_with_zero_gives_no_sample():
    class Bare:  # a summarizer whose replies carry no usage at all
        def __init__(self, usage=None):
            self.calls, self.usage = 0, usage

        def complete(self, messages, system=None, max_tokens=None):
            self.calls += 1
            reply = type("Reply", (), {"text": "S"})()
            if self.usage is not None:
                reply.usage = type("Usage", (), {"input_tokens": self.usage})()
            return reply

    for usage, samples in ((None, 0), (0, 0), (1, 1), (True, 1)):
        prep = prep_for(["[user] a"], in_budget=1_000)
        assert summarize(Bare(usage), prep) == ("S", 1)
        assert len(prep.usage_samples) == samples, usage
        assert all(m == usage for m, _ in prep.usage_samples)


def test_the_summarizer_is_sent_one_user_message(fake_summarizer):
    fake = fake_summarizer("S")
    summarize(fake, prep_for(["[user] a"], in_budget=1_000))
    assert fake.calls[0]["messages"] == [{"role": "user", "content": [{"type": "text", "text": body_of("", ["[user] a"])}]}]


# -- prepare: the summarizer's budgets and lines, from the plan ---------------------------------------------
def history_msg(i, tokens, text=None, role="user"):
    return {"id": f"n{i}", "role": role, "content": [{"type": "text", "text": text or f"q{i}"}], "tokens": tokens}


def plan_of(messages, old="", replaced=None):
    return Plan(boundary_id=messages[-1]["id"], new_messages=messages, old_summary_text=old,
                replaced_tokens=replaced if replaced is not None else sum(m["tokens"] for m in messages))


def test_prepare_budgets_in_estimated_tokens():
    provider = object()
    plan = plan_of([history_msg(i, 1) for i in range(3_000)], old=mixed("fact", 30), replaced=30_000)
    prep = prepare(plan, provider, window=4_000, calibration=2.0, encoding=ENC)
    assert prep.provider is provider and prep.plan is plan and prep.encoding == ENC
    assert prep.window == 2_000  # 4,000 of the model's tokens are 2,000 estimated ones
    assert prep.out_budget == 500  # min(30,000 × 0.2, 4,096, 2,000 / 4)
    assert prep.max_tokens == 1_000  # asked in the model's own tokens
    # A real model (not the offline one) is asked for the memory as JSON too: its prompt is longer.
    assert prep.structured and prep.system.startswith(SUMMARY_SYSTEM) and len(prep.system) > len(SUMMARY_SYSTEM)
    assert prep.in_budget == 2_000 - 500 - (n(prep.system) + 64)
    first_room = prep.in_budget - n(mixed("fact", 30)) - 32
    room = prep.in_budget - 500 - 32
    # one-token estimates: each planned call holds exactly its room in lines
    assert prep.chunks[0] == (0, first_room) and prep.chunks[1] == (first_room, first_room + room)
    assert prep.lines[:2] == ["[user] q0", "[user] q1"] and prep.estimates == [1] * 3_000
    assert prep.calls == 0 and prep.usage_samples == []


def test_prepare_max_tokens_rounds_up():
    plan = plan_of([history_msg(i, 10) for i in range(300)])
    prep = prepare(plan, None, window=10_000, calibration=1.5, encoding=ENC)
    assert prep.window == 6_666 and prep.out_budget == 600 and prep.max_tokens == 900
    prep = prepare(plan_of([history_msg(i, 10) for i in range(301)]), None, window=10_000, calibration=1.5,
                   encoding=ENC)
    assert prep.out_budget == 602 and prep.max_tokens == 903


@pytest.mark.parametrize("extra, prepared", [(-1, False), (0, True)])
def test_prepare_needs_256_tokens_of_input(extra, prepared):
    # out_budget is 256 on a small window: in_budget = window − 256 − (system + 64).
    window = 256 + n(SUMMARY_SYSTEM) + 64 + 256 + extra
    prep = prepare(plan_of([history_msg(i, 5) for i in range(10)]), None, window=window, calibration=1.0, encoding=ENC)
    assert prep.out_budget == 256 and prep.in_budget == 256 + extra
    assert (prep.lines != [] and prep.chunks != []) is prepared


def test_prepare_floors_both_rooms_at_128():
    # window 1,000: in_budget = 1,000 − 256 − (system + 64) ≈ 506; room = 506 − 256 − 32 ≈ 218;
    # a large old summary leaves the first call under 128: it gets 128.
    plan = plan_of([history_msg(i, 1) for i in range(1_000)], old=words("fact", 200))
    prep = prepare(plan, None, window=1_000, calibration=1.0, encoding=ENC)
    assert prep.in_budget - n(words("fact", 200)) - 32 < 128
    room = prep.in_budget - 256 - 32
    assert prep.chunks[:2] == [(0, 128), (128, 128 + room)]
    plan = plan_of([history_msg(i, 1) for i in range(1_000)])
    prep = prepare(plan, None, window=620 + n(SUMMARY_SYSTEM), calibration=1.0, encoding=ENC)
    assert prep.in_budget - 256 - 32 < 128
    assert prep.chunks[1][1] - prep.chunks[1][0] == 128


def test_prepare_cuts_only_a_line_larger_than_a_call():
    big = mixed("word", 600)
    plan = plan_of([history_msg(0, 10), history_msg(1, 10)], replaced=50_000)
    prep = prepare(plan, None, window=4_000, calibration=1.0, encoding=ENC)
    limit = min(prep.in_budget - 32, prep.in_budget - prep.out_budget - 32)
    assert limit >= 128
    short = "a few words"
    exact = padded_line(limit)
    msgs = [history_msg(0, limit, text="at the limit"),  # cached count at the limit: kept as it is
            history_msg(1, limit + 1, text=short),  # cached count over, real count under: kept, recounted
            history_msg(2, 99_999, text=exact),  # real count exactly the limit: kept
            history_msg(3, 99_999, text=big)]  # really larger: its head is kept
    prep = prepare(plan_of(msgs, replaced=50_000), None, window=4_000, calibration=1.0, encoding=ENC)
    assert prep.lines[0] == "[user] at the limit" and prep.estimates[0] == limit
    assert prep.lines[1] == f"[user] {short}" and prep.estimates[1] == n(f"[user] {short}") + 1
    assert prep.lines[2] == f"[user] {exact}" and n(prep.lines[2]) == limit and prep.estimates[2] == limit + 1
    cut = prep.lines[3]
    assert cut.endswith(CUT_NOTE) and f"[user] {big}".startswith(cut[: -len(CUT_NOTE)])
    assert n(cut[: -len(CUT_NOTE)]) == limit - 32 and prep.estimates[3] == n(cut) + 1
    # at the limit in the session's encoding, over it in cl100k: kept whole (counted in the right one)
    cyrillic = padded_line(limit, word=" мир")
    assert count_text(f"[user] {cyrillic}", "cl100k_base") > limit
    prep = prepare(plan_of([history_msg(0, 99_999, text=cyrillic)], replaced=50_000), None, window=4_000,
                   calibration=1.0, encoding=ENC)
    assert prep.lines == [f"[user] {cyrillic}"] and prep.estimates == [limit + 1]


def padded_line(tokens: int, word: str = " word") -> str:
    """Text whose transcript line ("[user] " + text) counts exactly `tokens`."""
    for k in range(tokens):
        text = "start" + word * k
        if n(f"[user] {text}") == tokens:
            return text
    raise AssertionError(tokens)


# -- plan_compaction -------------------------------------------------------------------------------------
def rendered(n_msgs, tokens=100, summary=None):
    out = [{"role": "system", "content": [{"type": "text", "text": "sys"}], "tokens": 5}]
    if summary:
        out.append({"id": "s1", "role": "llm", "name": SUMMARY_NAME, "content": [{"type": "text", "text": summary}],
                    "tokens": 40})
    return out + [history_msg(i, tokens, role="user" if i % 2 == 0 else "assistant") for i in range(n_msgs)]


def test_plan_folds_what_the_cut_leaves_and_counts_what_it_replaces():
    plan = plan_compaction(rendered(5), 128_000, keep_recent_tokens=400)
    assert [m["id"] for m in plan.new_messages] == ["n0"] and plan.boundary_id == "n0"  # one message folds
    assert plan.old_summary_text == "" and plan.replaced_tokens == 100
    plan = plan_compaction(rendered(5, summary="Earlier: the plan."), 128_000, keep_recent_tokens=300)
    assert [m["id"] for m in plan.new_messages] == ["n0", "n1"]
    assert plan.old_summary_text == "Earlier: the plan." and plan.replaced_tokens == 40 + 200
    # The memory numbers the folded turns from the session's first unless told otherwise.
    assert plan.first_turn == 1 and [t for t, _, _ in summary_text.memory_turns(plan)] == [1, 2]
    assert plan_compaction(rendered(5), 128_000, keep_recent_tokens=300, first_turn=7).first_turn == 7


def test_plan_judges_the_tail_in_calibrated_tokens():
    # 100 estimated tokens count 200 with calibration 2: keeping 400 keeps two, not four.
    assert len(plan_compaction(rendered(10), 128_000, keep_recent_tokens=400).new_messages) == 6
    assert len(plan_compaction(rendered(10), 128_000, 400, 2.0).new_messages) == 8
    assert len(plan_compaction(rendered(10), 128_000, keep_recent_tokens=400, calibration=1.0).new_messages) == 6


@pytest.mark.parametrize("bytewise", [False, True])
def test_the_facts_list_fills_exactly_the_room_the_stored_summary_leaves(bytewise, byte_encoding):
    # The room is 90 % of what is replaced less the summary as stored (framing and name
    # included): sized here so two identifiers fit exactly and a third ("#12") does not.
    # Once in o200k, once where every byte is a token (there "llm" and "None" differ).
    enc = byte_encoding if bytewise else ENC
    text = "Summary."
    stored = count_message("llm", [{"type": "text", "text": text}], enc, SUMMARY_NAME)
    lines = ["[assistant] see #12", "[user] ticket OPS-4471 is about config/settings.toml"]  # #12 oldest: left out
    c = lambda t: count_text(t, enc)  # noqa: E731
    two = c("Key identifiers:") + 2 + (c("OPS-4471") + 1) + (c("config/settings.toml") + 1)
    replaced = next(r for r in range(1, 10_000) if int(r * 0.9) - stored == two)
    prep = prep_for(lines, in_budget=1_000, replaced=replaced, window=1_000_000)
    prep.encoding = enc
    assert finish(prep, text) == "Summary.\n\nKey identifiers: OPS-4471; config/settings.toml"
    prep = prep_for(lines, in_budget=1_000, replaced=replaced + 10, window=1_000_000)
    prep.encoding = enc
    assert finish(prep, text) == "Summary.\n\nKey identifiers: #12; OPS-4471; config/settings.toml"


# -- _fit: one call's input, exactly (in an encoding where every byte is one token) ----------------------
def fit_parts(enc: str, partial: str, memory: str = "") -> tuple[int, int]:
    """(the input's size with no line, CUT_NOTE's size) in `enc`."""
    return count_text(engine._summary_input(partial, [""], memory), enc), count_text(CUT_NOTE, enc)


@pytest.mark.parametrize("memory", ["", '{"settings": {"lr": "3e-4"}}'])
def test_fit_cuts_a_lone_line_to_exactly_the_room_left(monkeypatch, byte_encoding, memory):
    # (The current memory, sent to a real model beside the summary, takes its share of the room.)
    partial, line = "Earlier summary.", "[user] " + "x" * 2_000
    base, note = fit_parts(byte_encoding, partial, memory)
    assert note == len(CUT_NOTE.encode()) and note != count_text(CUT_NOTE)  # counted in the call's encoding
    seen = over_count(monkeypatch, [])  # counts each try of a cut line, exactly
    body, used = engine._fit(partial, [line], 1_000, byte_encoding, memory)
    assert used == 1 and body == engine._summary_input(partial, [line[: 1_000 - base - note] + CUT_NOTE], memory)
    assert count_text(body, byte_encoding) == 1_000  # to the token
    assert seen == [1_000]  # at the first try: no second count of the whole input


@pytest.mark.parametrize("extra_base, cut", [(0, False), (1, True)])
def test_fit_cuts_a_previous_summary_over_three_quarters_to_half(byte_encoding, extra_base, cut):
    # Budget 1,000: the input with no line may take 750 (3/4) and keep the summary whole; 751 cuts it to 500.
    base_empty, note = fit_parts(byte_encoding, "")
    filler = 750 + extra_base - (base_empty - len("(none)"))
    partial = "s" * filler
    assert fit_parts(byte_encoding, partial)[0] == 750 + extra_base
    body, used = engine._fit(partial, ["[user] " + "y" * 2_000], 1_000, byte_encoding)
    prev = body.split("<previous-summary>\n", 1)[1].split("\n</previous-summary>", 1)[0]
    assert prev == ("s" * 500 if cut else partial)  # half the budget, in the call's encoding
    assert count_text(body, byte_encoding) == 1_000 and used == 1


def over_count(monkeypatch, extras: list[int]) -> list[int]:
    """Make the engine count each input holding a cut line `extras[i]` tokens more than
    it is, the i-th time (then exactly): a join that tokenizes longer than its parts.
    Returns the true sizes counted."""
    real, seen = engine.count_text, []

    def count(text, encoding="cl100k_base"):
        n = real(text, encoding)
        if text.startswith("<previous-summary>") and text.endswith(CUT_NOTE + "\n</new-turns>"):
            seen.append(n)
            return n + (extras[len(seen) - 1] if len(seen) <= len(extras) else 0)
        return n

    monkeypatch.setattr(engine, "count_text", count)
    return seen


@pytest.mark.parametrize("extras, deeper", [
    ([2], 4),  # over by 2: the retry keeps a margin of at least 4
    ([10], 10),  # over by 10: 10 deeper
    ([10, 20], 20),  # still over by 10 after the first retry: the margins add up to 20
    ([5_000], None),  # a margin larger than the room: the line is cut to nothing
])
def test_a_cut_line_that_still_overshoots_is_cut_deeper(monkeypatch, byte_encoding, extras, deeper):
    partial, line = "Earlier summary.", "[user] " + "x" * 2_000
    base, note = fit_parts(byte_encoding, partial)
    seen = over_count(monkeypatch, extras)
    body, used = engine._fit(partial, [line], 1_000, byte_encoding)
    kept = line[: max(0, 1_000 - base - note - deeper)] if deeper is not None else ""
    assert used == 1 and body == engine._summary_input(partial, [kept + CUT_NOTE])
    assert len(seen) == len(extras) + 1  # one count per try


def test_fit_gives_up_after_64_tries_with_one_line(monkeypatch, byte_encoding):
    seen = over_count(monkeypatch, [100_000] * 100)  # never fits
    with pytest.raises(OcwError) as ei:
        engine._fit("S", ["[user] " + "x" * 2_000], 1_000, byte_encoding)
    # 64 tries: the line whole (not counted here), then 63 cuts
    assert str(ei.value) == "could not fit a summarizer call into its window" and len(seen) == 63


@pytest.mark.parametrize("over, used", [
    (0, 10),  # all ten fit
    (200, 8),  # 200 over: the last two lines' 200 cover it exactly; no third goes
    (201, 7),  # one more: a third goes
    (408, 5),  # six would fit (their separators count too), but lines go by their own counts: five stay
])
def test_lines_that_do_not_fit_go_by_their_own_counts(byte_encoding, over, used):
    lines = [f"[user] {i} " + "z" * (100 - len(f"[user] {i} ")) for i in range(10)]
    assert {count_text(x, byte_encoding) for x in lines} == {100}
    budget = count_text(engine._summary_input("S", lines), byte_encoding) - over
    body, got = engine._fit("S", lines, budget, byte_encoding)
    assert got == used and body == engine._summary_input("S", lines[:used])


def test_many_lines_over_the_room_go_in_one_step(byte_encoding):
    lines = [f"[user] line {i:03d} " + "q" * 80 for i in range(100)]  # 97 must go: more than 64 tries could take
    budget = count_text(engine._summary_input("S", lines[:3]), byte_encoding)
    body, used = engine._fit("S", lines, budget, byte_encoding)
    # 97 lines and their 97 separators over: the lines' own counts cover that only once 99 have gone,
    # so one stays (separators are not counted, see above) — in one step, not 99 tries
    assert used == 1 and body == engine._summary_input("S", lines[:1])


def test_the_structured_ask_is_dropped_when_only_a_summary_fits():
    """A real model is asked for the memory as JSON unless that ask would leave less than
    MIN_SUMMARIZER_INPUT tokens of input while the plain prompt leaves enough: then the
    summary is still model-written and the memory is the deterministic pass's."""
    from ocw.context.engine import MIN_SUMMARIZER_INPUT
    from ocw.text.prompts import MEMORY_REQUEST

    plan = plan_of([history_msg(i, 1) for i in range(300)], replaced=300)
    plain = 256 + n(SUMMARY_SYSTEM) + 64 + MIN_SUMMARIZER_INPUT  # out_budget 256: room for the plain prompt only
    small = prepare(plan, object(), window=plain, calibration=1.0, encoding=ENC)
    assert not small.structured and small.system == SUMMARY_SYSTEM and small.in_budget == MIN_SUMMARIZER_INPUT
    big = prepare(plan, object(), window=plain + n(MEMORY_REQUEST) + 64, calibration=1.0, encoding=ENC)
    assert big.structured and MEMORY_REQUEST in big.system and big.in_budget >= MIN_SUMMARIZER_INPUT
    assert not prepare(plan, OfflineLike(), window=plain * 4, calibration=1.0, encoding=ENC).structured


class OfflineLike:
    offline = True


def test_the_memory_takes_at_most_a_quarter_of_what_the_compaction_replaces():
    """build_memory's second cap: the memory alone never takes more than a quarter of what
    the compaction replaces, even when the window's share would allow more."""
    old = mem.Memory([mem.Item("setting", f"knob_{i}", f"value_{i}", i) for i in range(60)])
    full = count_text(mem.render(old), ENC)
    replaced = 2 * full  # a quarter is half the memory; the window's share (10 % of 100k) is far more
    plan = Plan(boundary_id="n_last", new_messages=[], old_summary_text="", replaced_tokens=replaced,
                old_memory=old)
    built = summary_text.build_memory(Prepared(plan, window=100_000, encoding=ENC), window=100_000)
    kept = count_text(mem.render(built), ENC)
    assert replaced // 5 < kept <= replaced // 4  # filled to the quarter, not to a fifth
    assert built.evicted == 60 - len(built.current()) > 0


def test_a_stale_value_quoted_in_backticks_takes_out_the_sentence_naming_it_bare():
    """The memory may hold a value as the model quoted it (`config/old.yaml`); the prose names
    it without the quotes, and that sentence must still go (a backtick-only value is no value)."""
    prose = "We began. We loaded config/old.yaml first. Then it went well (twice)."
    assert summary_text.drop_stale(prose, {"`config/old.yaml`"}) == "We began. Then it went well (twice)."
    assert summary_text.drop_stale(prose, {"``"}) == prose
    # a value beginning with X, and a one-letter one, are values like any other
    assert summary_text.drop_stale("We chose XGBoost. It fit.", {"XGBoost"}) == "It fit."
    assert summary_text.drop_stale("We plotted X. It fit.", {"X"}) == "It fit."


def test_finish_counts_the_memory_block_stored_beside_the_prose():
    """The guard judges the summary node as stored: prose and memory block together, so a
    memory that makes the node as large as what it replaces is refused."""
    text = "Short summary."
    memory = mem.Memory([mem.Item("setting", "learning rate", "3e-4", 1), mem.Item("todo", "t1", "write the report", 2)])
    stored = count_message("llm", summary_text.summary_blocks(text, memory), ENC, SUMMARY_NAME)
    assert stored > count_message("llm", summary_text.summary_blocks(text), ENC, SUMMARY_NAME) + 20
    assert finish(prep_for(["[user] nothing to list"], in_budget=1_000, replaced=stored + 1), text, memory) == text
    with pytest.raises(OcwError, match=f"the summary \\({stored:,} tokens\\) is not smaller"):
        finish(prep_for(["[user] nothing to list"], in_budget=1_000, replaced=stored), text, memory)
    assert summary_text.summary_blocks(text) == [{"type": "text", "text": text}]  # no memory: the prose alone


def test_a_window_too_small_for_the_memory_json_asks_for_prose_alone_keeping_the_focus():
    """A real model is asked for the memory as JSON only while the input room left beside the
    current memory's JSON is at least MIN_SUMMARIZER_INPUT (256) tokens; one token less and
    the ask is dropped (the prompt without it, the user's focus still in it)."""
    real = object()  # a provider that is not the offline model
    old = mem.Memory([mem.Item("setting", "learning rate", "3e-4", 1), mem.Item("todo", "t", "plot the résumé data", 2)])
    plan = Plan(boundary_id="n1", new_messages=[history_msg(1, 50)], old_summary_text="", replaced_tokens=1_000,
                old_memory=old)
    json_tokens = count_text(memory_model.current_json(old), ENC)
    assert json_tokens != count_text(memory_model.current_json(old))  # counted in the session's encoding
    focus = "keep the file paths"
    ask = engine.summary_system(focus, True)
    edge = 256 + json_tokens + 256 + count_text(ask, ENC) + 64  # room + JSON + out_budget (256) + prompt
    at = prepare(plan, real, window=edge, calibration=1.0, encoding=ENC, focus=focus)
    assert at.structured and at.system == ask and at.in_budget - json_tokens == 256
    below = prepare(plan, real, window=edge - 1, calibration=1.0, encoding=ENC, focus=focus)
    assert not below.structured and below.system == engine.summary_system(focus) and focus in below.system
    assert below.in_budget == edge - 1 - 256 - (count_text(below.system, ENC) + 64)
    assert not prepare(plan, OfflineLike(), window=edge, calibration=1.0, encoding=ENC).structured


def test_meanwhile_runs_once_while_the_first_input_is_counted_and_that_count_is_the_one_used(fake_summarizer,
                                                                                           monkeypatch):
    """`meanwhile` runs before the first call, once, with the first input's count already
    started on its own thread: the input `_fit` builds is that text, so it is tokenized once."""
    import tiktoken

    from ocw.text import tokens

    encoded, events = [], []
    orig = tiktoken.Encoding.encode_ordinary
    monkeypatch.setattr(tiktoken.Encoding, "encode_ordinary", lambda self, t: encoded.append(t) or orig(self, t))
    fake = fake_summarizer(lambda rec: events.append("call") or f"S{rec['index'] + 1}")
    whole = n(body_of("", LINES))
    encoded.clear()

    def meanwhile():  # the first try (every line: estimates of 1 each) is being counted already
        memo = tokens._memo.get()
        events.append(("meanwhile", (ENC, body_of("", LINES)) in memo if memo is not None else None))

    with tokens.counting_once():
        assert summarize(fake, prep_for(LINES, in_budget=whole - 1), meanwhile=meanwhile) == ("S2", 2)
    # It is one token over, so the first call takes two lines, the second the third.
    assert events == [("meanwhile", True), "call", "call"]
    assert encoded.count(body_of("", LINES)) == 1
    events.clear()
    assert summarize(fake, prep_for(LINES, in_budget=whole), meanwhile=meanwhile) == ("S3", 1)  # no scope: still once
    assert events == [("meanwhile", None), "call"]


def test_meanwhile_counts_the_input_the_first_call_sends_current_memory_included(fake_summarizer):
    """With a structured ask the input carries the current memory: the text counted ahead is
    that whole input, the one the first call sends (a count of anything else is wasted)."""
    from ocw.text import tokens

    old = mem.Memory([mem.Item("setting", "learning rate", "3e-4", 1)])
    prep = prep_for(LINES, in_budget=100_000, old="Earlier: the plan.")
    prep.plan.old_memory, prep.structured = old, True
    ahead = []

    def meanwhile():
        ahead.extend(text for (enc, text), v in tokens._memo.get().items() if isinstance(v, tokens._Counting))

    fake = fake_summarizer("S")
    with tokens.counting_once():
        assert summarize(fake, prep, meanwhile=meanwhile) == ("S", 1)
    (sent,) = [c["input"] for c in fake.calls]
    assert memory_model.current_json(old) in sent and ahead == [sent]
