"""The landing rule of an automatic compaction (ocw/context/landing.py) and the cut's
`max_tail` (ocw/context/cut.py): pure figures, pinned on both sides."""
from __future__ import annotations

from ocw.context.cut import find_cut_index
from ocw.context.landing import LANDING_SHARE, SUMMARY_SHARE, landing_tail_room


def msgs(n: int, tokens: int) -> list[dict]:
    return [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "tokens": tokens,
             "content": [{"type": "text", "text": f"message {i}"}]} for i in range(n)]


def test_the_room_is_half_the_window_less_fixed_incoming_and_the_summary_share():
    assert (LANDING_SHARE, SUMMARY_SHARE) == (0.5, 0.25)
    assert landing_tail_room(200_000, fixed=1_000, incoming=500) == 100_000 - 1_500 - 50_000
    assert landing_tail_room(2_048, fixed=40, incoming=200) == 1_024 - 240 - 512
    assert landing_tail_room(2_048, fixed=40, incoming=472) == 0.0  # exactly nothing left
    assert landing_tail_room(2_048, fixed=40, incoming=473) == 0.0  # never negative


def test_max_tail_shrinks_the_tail_and_its_five_message_widening():
    m = msgs(12, 100)
    # The default rule on a 2,048 window: 25 % (512 → 5 messages), widened to five.
    assert find_cut_index(m, 2_048).index == 7
    assert find_cut_index(m, 2_048, max_tail=300).index == 9  # three messages of 100 fit 300 ...
    assert find_cut_index(m, 2_048, max_tail=299).index == 10  # ... two fit 299
    assert find_cut_index(m, 2_048, max_tail=0).index == 12  # no room: everything folds


def test_max_tail_above_the_default_changes_nothing_and_an_explicit_keep_wins():
    m = msgs(40, 1_000)
    assert find_cut_index(m, 200_000, max_tail=90_000).index == find_cut_index(m, 200_000).index == 20
    assert find_cut_index(m, 2_048, keep_recent_tokens=3_000, max_tail=0).index == 37
