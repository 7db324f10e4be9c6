"""Pure rules: the compaction count (ocw.context.count) and the occupancy metric
(ocw.context.occupancy). No DuckDB, no tokenizer."""
from __future__ import annotations

import copy

import pytest

from ocw.context import count as rules
from ocw.context.occupancy import CATEGORIES, compute_breakdown, estimate_total_used, measured_applies


def sample(used, head="h1", generation=0, size=1000):
    return {"size": size, "used": used, "remaining": size - used if isinstance(used, int) else None,
            "source": "provider", "head": head, "generation": generation}


# -- compaction count -----------------------------------------------------------------
def test_count_absent_or_invalid_reads_zero():
    assert rules.compaction_count({}) == 0
    assert rules.compaction_count({"context_compaction_count": None}) == 0
    assert rules.compaction_count({"context_compaction_count": "3"}) == 0
    assert rules.compaction_count({"context_compaction_count": -2}) == 0
    assert rules.compaction_count({"context_compaction_count": 4}) == 4


def test_inferred_count_is_kept_beside_the_count():
    """Issue 12: a view says "approximate" only when some compaction was inferred, so the
    metadata keeps how many were (context_compaction_inferred; absent reads as 0)."""
    assert rules.inferred_count({}) == 0
    for bad in (None, "1", -1, True):
        assert rules.inferred_count({"context_compaction_inferred": bad}) == 0
    meta, _ = rules.apply_sample({}, sample(500))
    assert rules.inferred_count(meta) == 0
    meta = rules.count_own_compaction(meta)  # ocw's own: exact, not inferred
    assert (rules.compaction_count(meta), rules.inferred_count(meta)) == (1, 0)
    meta, _ = rules.apply_sample(meta, sample(400))  # baseline after our own compaction
    meta, _ = rules.apply_sample(meta, sample(400))  # equal: nothing
    assert (rules.compaction_count(meta), rules.inferred_count(meta)) == (1, 0)
    meta, inferred = rules.apply_sample(meta, sample(399))  # just under: inferred
    assert inferred and (rules.compaction_count(meta), rules.inferred_count(meta)) == (2, 1)
    meta, inferred = rules.apply_sample(meta, sample(399))  # the same sample again: once
    assert not inferred and rules.inferred_count(meta) == 1
    meta = rules.clear_baseline(meta)  # a reset keeps both counts
    assert (rules.compaction_count(meta), rules.inferred_count(meta)) == (2, 1)
    meta = rules.count_own_compaction(meta)
    assert (rules.compaction_count(meta), rules.inferred_count(meta)) == (3, 1)


def test_first_sample_is_baseline_only():
    meta, inferred = rules.apply_sample({}, sample(500))
    assert inferred is False
    assert meta["context_compaction_count"] == 0
    assert meta["context_window"]["used"] == 500


def test_equal_or_higher_sample_counts_nothing():
    meta, _ = rules.apply_sample({}, sample(500))
    for used in (500, 501, 900):
        meta, inferred = rules.apply_sample(meta, sample(used))
        assert inferred is False
        assert meta["context_compaction_count"] == 0
    assert meta["context_window"]["used"] == 900


def test_drop_counts_one_and_duplicate_counts_once():
    meta, _ = rules.apply_sample({"context_compaction_count": 2}, sample(800))
    meta, inferred = rules.apply_sample(meta, sample(300))
    assert inferred is True
    assert meta["context_compaction_count"] == 3
    meta, inferred = rules.apply_sample(meta, sample(300))  # the same sample delivered again
    assert inferred is False
    assert meta["context_compaction_count"] == 3
    meta, inferred = rules.apply_sample(meta, sample(100))  # a second, real drop
    assert inferred is True
    assert meta["context_compaction_count"] == 4


@pytest.mark.parametrize("bad", [None, -1, 1.5, "300", True, False])
def test_invalid_sample_changes_nothing(bad):
    before = {"context_compaction_count": 1, "context_window": sample(800)}
    snapshot = copy.deepcopy(before)
    meta, inferred = rules.apply_sample(before, sample(bad))
    assert inferred is False
    assert meta is before  # the caller sees "nothing to persist"
    assert before == snapshot


def test_apply_sample_does_not_mutate_input():
    before = {"context_compaction_count": 1, "context_window": sample(800), "other": {"x": 1}}
    snapshot = copy.deepcopy(before)
    meta, _ = rules.apply_sample(before, sample(100))
    assert before == snapshot
    assert meta["other"] == {"x": 1}


def test_baseline_without_valid_used_is_no_baseline():
    meta, inferred = rules.apply_sample({"context_window": {"used": None}}, sample(10))
    assert inferred is False and meta["context_window"]["used"] == 10


def test_clear_baseline_keeps_count():
    meta = {"context_compaction_count": 5, "context_window": sample(800), "keep": 1}
    cleared = rules.clear_baseline(meta)
    assert cleared["context_window"] is None
    assert cleared["context_compaction_count"] == 5
    assert cleared["keep"] == 1
    assert meta["context_window"]["used"] == 800  # input untouched
    # After a clear, a smaller sample is a new baseline, not a compaction.
    after, inferred = rules.apply_sample(cleared, sample(100))
    assert inferred is False and after["context_compaction_count"] == 5


def test_own_compaction_counts_exactly_and_resets_baseline():
    meta = {"context_window": sample(900)}
    meta = rules.count_own_compaction(meta)
    assert meta["context_compaction_count"] == 1
    assert meta["context_window"] is None
    meta, inferred = rules.apply_sample(meta, sample(200))  # smaller, legitimately
    assert inferred is False and meta["context_compaction_count"] == 1


@pytest.mark.parametrize("base, used, inferred", [
    (500, 499, True),  # just under the baseline: a drop
    (500, 500, False),  # at the baseline: nothing
    (500, 501, False),  # just over: nothing
    (1, 0, True),  # a sample of 0 is a drop like any other
    (0, 0, False),
    (0, 1, False),
    (1000, 0, True),  # from a full window to empty
])
def test_a_drop_is_a_sample_strictly_below_the_baseline(base, used, inferred):
    meta, _ = rules.apply_sample({"context_compaction_count": 7}, sample(base))
    assert meta["context_compaction_count"] == 7  # the first sample is a baseline only
    meta, got = rules.apply_sample(meta, sample(used))
    assert got is inferred
    assert meta["context_compaction_count"] == (8 if inferred else 7)
    assert meta["context_window"] == sample(used)  # the new sample is the next baseline


@pytest.mark.parametrize("used, size, valid", [
    (1000, 1000, True),  # a full window
    (999, 1000, True),
    (1001, 1000, False),  # more than the window holds: a misreport, or a window ocw has wrong
    (5, None, True),  # window unknown: any whole number ≥ 0
    (5, 0, True), (5, -1, True), (5, "4", True), (5, True, True),  # not a usable window: not checked
    (2, 1, False),
])
def test_a_sample_above_its_window_is_not_valid(used, size, valid):
    assert rules.valid_sample(used, size) is valid
    before = {"context_compaction_count": 1, "context_window": sample(5000, size=5000)}
    meta, inferred = rules.apply_sample(before, {"used": used, "size": size})
    assert (meta is not before) is valid  # an invalid sample leaves the metadata as it was
    assert inferred is valid and meta["context_compaction_count"] == (2 if valid else 1)


def test_a_first_sample_of_0_is_a_baseline_and_0_again_counts_nothing():
    meta, inferred = rules.apply_sample({}, sample(0))
    assert inferred is False and meta["context_window"]["used"] == 0 and meta["context_compaction_count"] == 0
    meta, inferred = rules.apply_sample(meta, sample(0))
    assert inferred is False and meta["context_compaction_count"] == 0


def test_the_same_decreased_sample_twice_counts_once_then_a_lower_one_counts_again():
    meta = {"context_compaction_count": 0, "context_window": sample(10)}
    meta, first = rules.apply_sample(meta, sample(0))
    meta, second = rules.apply_sample(meta, sample(0))
    assert (first, second) == (True, False)
    assert meta["context_compaction_count"] == 1
    meta, _ = rules.apply_sample(meta, sample(5))
    meta, third = rules.apply_sample(meta, sample(4))
    assert third is True and meta["context_compaction_count"] == 2


def test_a_baseline_that_is_not_a_sample_is_no_baseline():
    for bad_baseline in (None, "800", 800, {"used": -1}, {"used": True}, {"used": 8.5}, {}):
        meta, inferred = rules.apply_sample({"context_compaction_count": 2, "context_window": bad_baseline}, sample(0))
        assert inferred is False, bad_baseline
        assert meta["context_compaction_count"] == 2
        assert meta["context_window"] == sample(0)


def test_an_unreadable_count_is_written_back_as_a_number():
    for bad in ("3", -2, None, 1.5):
        meta, inferred = rules.apply_sample({"context_compaction_count": bad}, sample(10))
        assert meta["context_compaction_count"] == 0 and inferred is False
        meta, inferred = rules.apply_sample({"context_compaction_count": bad, "context_window": sample(10)}, sample(9))
        assert meta["context_compaction_count"] == 1 and inferred is True
        assert rules.clear_baseline({"context_compaction_count": bad})["context_compaction_count"] == 0
        assert rules.count_own_compaction({"context_compaction_count": bad})["context_compaction_count"] == 1
    assert rules.compaction_count({"context_compaction_count": 0}) == 0
    assert rules.compaction_count({"context_compaction_count": 1}) == 1


def test_clear_baseline_then_samples_count_from_the_new_baseline():
    meta = {"context_compaction_count": 3, "context_window": sample(900)}
    meta = rules.clear_baseline(meta)
    assert meta["context_compaction_count"] == 3 and meta["context_window"] is None
    meta, inferred = rules.apply_sample(meta, sample(900))  # equal to the forgotten baseline: a new baseline
    assert inferred is False and meta["context_compaction_count"] == 3
    meta, inferred = rules.apply_sample(meta, sample(899))
    assert inferred is True and meta["context_compaction_count"] == 4
    assert rules.clear_baseline(rules.clear_baseline(meta))["context_compaction_count"] == 4


def test_own_compaction_adds_exactly_one_to_any_count():
    for before, after in ((0, 1), (1, 2), (41, 42)):
        meta = {"context_compaction_count": before, "context_window": sample(100), "keep": "x"}
        out = rules.count_own_compaction(meta)
        assert out == {"context_compaction_count": after, "context_window": None, "keep": "x"}
        assert meta["context_compaction_count"] == before  # input untouched


# -- occupancy -----------------------------------------------------------------------
PARTS = {"system": 100, "tools": 50, "summary": 200, "messages": 650}


def test_estimate_total_is_sum_of_categories():
    assert CATEGORIES == ("system", "tools", "summary", "memory", "pins", "messages")
    assert estimate_total_used(PARTS) == 1000
    assert estimate_total_used({"messages": 7}) == 7
    assert estimate_total_used({**PARTS, "free": 10**6}) == 1000  # free is not used space


def test_breakdown_estimated():
    occ = compute_breakdown(PARTS, window=4000, head="h", generation=3)
    assert occ["total"] == occ["estimated_total"] == 1000
    assert occ["basis"] == "estimated" and occ["calibration"] is None
    assert occ["ratio"] == pytest.approx(0.25)
    assert occ["breakdown"] == {**PARTS, "memory": 0, "pins": 0, "free": 3000}
    assert sum(occ["breakdown"].values()) == occ["window"]
    assert occ["reserve"] == 3200
    assert (occ["head"], occ["generation"]) == ("h", 3)


def test_breakdown_measured_only_for_same_head_and_generation():
    s = sample(1100, head="h", generation=3, size=4000)
    occ = compute_breakdown(PARTS, window=4000, sample=s, head="h", generation=3)
    assert occ["basis"] == "measured"
    assert occ["total"] == 1100 and occ["estimated_total"] == 1000
    assert occ["calibration"] == pytest.approx(1.1)
    assert occ["breakdown"]["free"] == 2900
    for head, gen in (("other", 3), ("h", 4), (None, 3)):
        occ = compute_breakdown(PARTS, window=4000, sample=s, head=head, generation=gen)
        assert occ["basis"] == "estimated" and occ["total"] == 1000


def test_measured_applies():
    assert measured_applies(sample(5, "h", 1), "h", 1)
    assert not measured_applies(None, "h", 1)
    assert not measured_applies({}, "h", 1)
    assert not measured_applies(sample(None, "h", 1), "h", 1)
    assert not measured_applies(sample(5, "h", 1), "h", 2)
    assert not measured_applies(sample(5, "h", 1), "g", 1)


def test_breakdown_over_full_window():
    occ = compute_breakdown({"messages": 5000}, window=4000)
    assert occ["breakdown"]["free"] == 0
    assert occ["ratio"] == pytest.approx(1.25)
    occ = compute_breakdown({}, window=0)
    assert occ["ratio"] == 0.0 and occ["total"] == 0


def test_calibration_with_zero_estimate():
    occ = compute_breakdown({}, window=100, sample=sample(10, "h", 0), head="h", generation=0)
    assert occ["basis"] == "measured" and occ["calibration"] is None
