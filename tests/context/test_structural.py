"""The structural summary (ocw/context/structural.py): no model call, deterministic, and
bounded to min(budget, a third of what it replaces) tokens, so it always fits and
always shrinks the context."""
from __future__ import annotations

import pytest

from ocw.context.structural import STRUCTURAL_HEADER, structural_summary
from ocw.text.tokens import count_text

ENC = "cl100k_base"


def msgs(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": [{"type": "text", "text": f"Turn {i}: we loaded orders_{i}.csv into the staging table "
                                                  "and checked the row counts against yesterday's run. " * 4}]}
            for i in range(n)]


@pytest.mark.parametrize("replaced, budget, room", [(3_000, 256, 256), (600, 256, 200), (30, 256, 10), (9, 256, 8)])
def test_it_fits_the_smaller_of_its_budget_and_a_third_of_what_it_replaces(replaced, budget, room):
    text = structural_summary("An earlier summary. " * 200, msgs(30), replaced, budget, ENC)
    assert count_text(text, ENC) <= room
    assert text == structural_summary("An earlier summary. " * 200, msgs(30), replaced, budget, ENC)  # deterministic


def test_it_outlines_the_folded_messages_in_order_after_the_previous_summary():
    text = structural_summary("Loads run nightly.", msgs(4), 3_000, 512, ENC)
    lines = text.splitlines()
    assert lines[0] == STRUCTURAL_HEADER and lines[1] == "- earlier: Loads run nightly."
    assert [ln.split(":")[0] for ln in lines[2:]] == ["- user", "- assistant", "- user", "- assistant"]
    assert lines[2].startswith("- user: Turn 0: we loaded orders_0.csv")
    assert all(count_text(ln, ENC) <= 24 + 4 for ln in lines[2:])  # each message: the head of its text


def test_without_a_previous_summary_there_is_no_earlier_line():
    assert "- earlier:" not in structural_summary("", msgs(2), 3_000, 512, ENC)


def notes(n: int) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": f"note {i}"}]} for i in range(n)]


def test_a_line_is_kept_only_while_it_fits_the_room_pinned_on_both_sides():
    # The header is 15 tokens (+1 for its newline); each "- user: note i" line is 6 (+1).
    assert count_text(STRUCTURAL_HEADER, ENC) == 15
    for room, kept in ((22, 0), (23, 1), (29, 1), (30, 2), (36, 2), (37, 3)):
        text = structural_summary("", notes(6), 10**6, room, ENC)
        assert text.splitlines()[1:] == [f"- user: note {i}" for i in range(kept)], room
    # "- earlier: Loads run nightly." is 7 tokens (+1): 24 used before the first line.
    for room, kept in ((30, 0), (31, 1), (37, 1), (38, 2)):
        lines = structural_summary("Loads run nightly.", notes(6), 10**6, room, ENC).splitlines()
        assert lines[1] == "- earlier: Loads run nightly." and lines[2:] == [f"- user: note {i}" for i in range(kept)]


def test_the_room_is_a_third_of_what_it_replaces_and_never_under_8_tokens():
    assert len(structural_summary("", notes(6), 90, 10**6, ENC).splitlines()) == 1 + 2  # room 30
    assert len(structural_summary("", notes(6), 89, 10**6, ENC).splitlines()) == 1 + 1  # room 29
    assert count_text(structural_summary("", notes(6), 0, 10**6, ENC), ENC) == 8


def test_a_message_with_no_text_gets_no_line():
    blank = [{"role": "assistant", "content": [{"type": "text", "text": "  \n "}]}]
    text = structural_summary("", notes(1) + blank + notes(2)[1:], 10**6, 512, ENC)
    assert text.splitlines()[1:] == ["- user: note 0", "- user: note 1"]
