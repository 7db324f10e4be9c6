"""Every figure agrees (DESIGN.md §3, issue 10 item 5): `ocw.context.occupancy`, pure.

The ring's total, the panel's rows and their percents all come from one dict, so
they are checked here as arithmetic: calibrated rows add up to the total exactly,
percents add up to 100.0 whenever the total fits the window.
"""
from __future__ import annotations

import itertools
import random

import pytest

from ocw.context.occupancy import compute_breakdown, largest_remainder, percents, sent_parts

PARTS = {"system": 21, "tools": 0, "summary": 203, "messages": 362}  # 586 estimated


def sample(used, head="h", generation=0, size=2048):
    return {"used": used, "head": head, "generation": generation, "size": size}


def row_sum(occ) -> int:
    return sum(occ["breakdown"][k] for k in ("system", "tools", "summary", "messages"))


def pct_sum(occ) -> float:
    return round(sum(float(v) for v in occ["percents"].values()), 1)


# -- largest remainder ---------------------------------------------------------------------
@pytest.mark.parametrize("values, total, want", [
    ([1, 1, 1], 10, [4, 3, 3]),  # ties: earlier rows first
    ([1, 1, 1], 3, [1, 1, 1]),
    ([21, 0, 203, 362], 596, [21, 0, 207, 368]),  # the 586 → 596: .46 rounds up, not .18
    ([21, 0, 203, 362], 586, [21, 0, 203, 362]),  # nothing to scale: unchanged
    ([5, 5], 0, [0, 0]),
    ([0, 0], 7, [7, 0]),  # no weights: all to the first row
    ([], 5, []),
])
def test_largest_remainder(values, total, want):
    got = largest_remainder(values, total)
    assert got == want
    assert sum(got) == (max(0, total) if values else 0)


def test_largest_remainder_adds_up_and_stays_within_one_of_the_exact_share():
    rng = random.Random(7)
    for _ in range(500):
        values = [rng.randint(0, 5000) for _ in range(rng.randint(1, 6))]
        total = rng.randint(0, 20_000)
        got = largest_remainder(values, total)
        assert sum(got) == total
        s = sum(values)
        if s:
            for v, g in zip(values, got):
                assert abs(g - v * total / s) < 1


# -- percents --------------------------------------------------------------------------------
def test_percents_add_up_to_100_when_the_total_fits():
    occ = compute_breakdown({"system": 1, "tools": 1, "summary": 1, "messages": 1}, window=3)
    assert occ["total"] == 4 and occ["breakdown"]["free"] == 0  # over the window: no 100 %
    for window in (3, 7, 2048, 6000, 128_000):
        for parts in itertools.product((0, 1, 13, 333), repeat=2):
            p = {"system": parts[0], "tools": 0, "summary": 0, "messages": parts[1]}
            occ = compute_breakdown(p, window=window)
            if occ["total"] <= window:
                assert pct_sum(occ) == 100.0, (window, p, occ["percents"])


def test_percents_of_thirds_are_33_3_33_3_33_4():
    assert percents({"a": 333, "b": 333, "c": 334}, 1000) == {"a": "33.3", "b": "33.3", "c": "33.4"}
    assert percents({"a": 1, "b": 2}, 0) == {"a": "0.0", "b": "0.0"}


# -- measured: rows calibrated to the total ---------------------------------------------------
def test_measured_rows_add_up_to_the_measured_total():
    occ = compute_breakdown(PARTS, window=2048, sample=sample(596), head="h")
    assert occ["basis"] == "measured" and occ["total"] == 596 and occ["calibrated"]
    assert row_sum(occ) == 596 and occ["breakdown"]["free"] == 2048 - 596
    assert pct_sum(occ) == 100.0
    assert occ["calibration"] == pytest.approx(596 / 586, abs=1e-4)
    assert occ["estimated_total"] == 586  # the raw estimate stays available


def test_measured_equal_to_the_estimate_is_not_calibrated():
    occ = compute_breakdown(PARTS, window=2048, sample=sample(586), head="h")
    assert occ["basis"] == "measured" and not occ["calibrated"]
    assert occ["breakdown"]["summary"] == 203


# -- estimated: scaled by the session's learned calibration -----------------------------------
def test_estimate_times_learned_calibration():
    occ = compute_breakdown(PARTS, window=2048, calibration=1.9)
    assert occ["basis"] == "estimated" and occ["total"] == round(586 * 1.9) == 1113
    assert occ["calibrated"] and occ["calibration"] == 1.9
    assert row_sum(occ) == 1113 and pct_sum(occ) == 100.0
    assert occ["ratio"] == pytest.approx(1113 / 2048)


@pytest.mark.parametrize("cal", [None, 1.0, 0, -2])
def test_no_calibration_leaves_the_estimate(cal):
    occ = compute_breakdown(PARTS, window=2048, calibration=cal)
    assert occ["total"] == 586 and not occ["calibrated"] and occ["calibration"] is None
    assert occ["breakdown"]["messages"] == 362


def test_a_measured_sample_wins_over_the_learned_calibration():
    occ = compute_breakdown(PARTS, window=2048, sample=sample(700), head="h", calibration=1.9)
    assert occ["total"] == 700 and occ["basis"] == "measured"
    # ... until HEAD moves: then the learned calibration applies.
    occ = compute_breakdown(PARTS, window=2048, sample=sample(700), head="other", calibration=1.9)
    assert occ["total"] == 1113 and occ["basis"] == "estimated"


def test_a_measured_ratio_is_the_measured_total_over_the_window():
    # issue 13: the ratio (the ring, the 80 % line) follows the measured figure, not the estimate.
    occ = compute_breakdown(PARTS, window=2048, sample=sample(1024), head="h")
    assert occ["basis"] == "measured" and occ["estimated_total"] == 586
    assert occ["ratio"] == 0.5
    occ = compute_breakdown(PARTS, window=2048, sample=sample(1639), head="h")
    assert occ["ratio"] == 1639 / 2048 and occ["ratio"] > 0.8
    assert compute_breakdown(PARTS, window=0, sample=sample(10), head="h")["ratio"] == 0.0
    assert compute_breakdown(PARTS, window=0)["ratio"] == 0.0


# -- issue 13: the rest of the edges ------------------------------------------------------------------
def test_largest_remainder_edges():
    assert largest_remainder([1, 3], 1) == [0, 1]  # one unit to share: the larger remainder
    assert largest_remainder([0, 1], 5) == [0, 5]  # weights that add up to 1
    assert largest_remainder([0.5, 0.5], 3) == [2, 1]
    assert largest_remainder([3, 1], 0) == [0, 0]


def test_percents_of_a_one_token_window():
    assert percents({"messages": 1, "free": 0}, 1) == {"messages": "100.0", "free": "0.0"}
    assert percents({"messages": 0, "free": 1}, 1) == {"messages": "0.0", "free": "100.0"}
    assert percents({"messages": 5, "free": 0}, 0) == {"messages": "0.0", "free": "0.0"}


def test_measured_calibration_is_rounded_to_four_decimals():
    occ = compute_breakdown(PARTS, window=2048, sample=sample(596), head="h")
    assert occ["calibration"] == 1.0171  # 596 / 586 = 1.017064...


def test_missing_categories_are_zero_when_rows_are_scaled():
    occ = compute_breakdown({"system": 10, "messages": 90}, window=1_000, calibration=2.0)
    assert occ["total"] == 200
    assert occ["breakdown"] == {"system": 20, "tools": 0, "summary": 0, "memory": 0, "pins": 0, "messages": 180, "free": 800}


def test_the_reserve_is_80_percent_of_the_window():
    occ = compute_breakdown(PARTS, window=2048)
    assert (occ["reserve"], occ["reserve_ratio"]) == (1638, 0.8)
    occ = compute_breakdown(PARTS, window=2048, reserve_ratio=0.5)
    assert (occ["reserve"], occ["reserve_ratio"]) == (1024, 0.5)


def test_sent_parts_describes_a_snipped_request_only_while_its_reply_is_current():
    """What a request that left messages out sent: the branch's parts less the tokens left
    out, and how many messages, while HEAD and the generation are that reply's; otherwise
    (or with nothing left out) the branch as it stands."""
    parts = {"system": 10, "messages": 1_000, "tools": 5}
    left = {"head": "h", "generation": 3, "messages": 4, "tokens": 300}
    assert sent_parts(parts, left, "h", 3) == ({"system": 10, "messages": 700, "tools": 5}, 4)
    assert sent_parts(parts, {**left, "messages": 1}, "h", 3) == ({"system": 10, "messages": 700, "tools": 5}, 1)
    for record, head, generation in [(left, "h2", 3), (left, "h", 4), ({**left, "messages": 0}, "h", 3),
                                     ({**left, "messages": None}, "h", 3), (None, "h", 3)]:
        assert sent_parts(parts, record, head, generation) == (parts, 0)
    assert sent_parts(parts, {**left, "tokens": None}, "h", 3) == (parts, 4)  # no token figure: nothing taken off
    assert sent_parts(parts, {**left, "tokens": 5_000}, "h", 3)[0]["messages"] == 0  # never below zero
    assert sent_parts({"system": 10}, left, "h", 3) == ({"system": 10, "messages": 0}, 4)  # no messages part yet
