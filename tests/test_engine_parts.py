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

from ocw.context.engine import (
    CUT_NOTE,
    SUMMARY_SYSTEM,
    Plan,
    Prepared,
    facts_budget,
    finish,
    summarize,
    summary_budget,
    transcript_line,
)
from ocw.errors import OcwError
from ocw.graph import SUMMARY_NAME
from ocw.tokens import FRAME_TOKENS, count_message, count_text

ENC = "cl100k_base"


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
LINES = [f"[user] {words('alpha', 130)}", f"[assistant] {words('beta', 130)}", f"[user] {words('gamma', 130)}"]


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
    old = words("fact", 250)  # 500 tokens: under 3/4 of the budget, so it stays whole
    line = "[user] " + words("word", 450)  # 902 tokens
    assert n(old) == 500 and n(line) == 902
    summarize(fake, prep_for([line], in_budget=1_000, old=old))
    (call,) = fake.calls
    sent = call["input"]
    assert 1_000 - 4 <= n(sent) <= 1_000  # filled to the budget
    kept = sent.split("<new-turns>\n", 1)[1].rsplit(CUT_NOTE + "\n</new-turns>", 1)[0]
    assert line.startswith(kept) and n(kept) >= 460
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
    for replaced, ok in ((stored, False), (stored + 1, True)):
        prep = prep_for(["[user] nothing to list"], in_budget=1_000, replaced=replaced)
        if ok:
            assert finish(prep, text) == text
        else:
            with pytest.raises(OcwError) as ei:
                finish(prep, text)
            assert f"{stored:,}" in ei.value.user_message()
