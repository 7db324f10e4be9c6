"""The window ocw plans with and the calibration of its estimates (ocw/context/calibration.py),
pure, with DESIGN.md §3's numbers as literals: a learned window of at least 256 tokens that
only ever lowers the configured one unless the server reports it; measured ÷ estimated
within 0.25–8, the median of the last 9 samples moved at most ×1.25 per sample, and ignored
within ±3 %."""
from __future__ import annotations

import pytest

from ocw.context.calibration import blend, calibration, calibration_samples, effective_window, learn_window, learned_window, positive_int, window_source, with_samples


@pytest.mark.parametrize("v, ok", [(1, True), (256, True), (0, False), (-1, False), (True, False), (1.0, False),
                                   ("5", False), (None, False)])
def test_positive_int(v, ok):
    assert positive_int(v) is ok


# -- the learned window ------------------------------------------------------------------------
def test_a_window_below_256_tokens_is_a_misreading():
    assert learn_window({}, "m", 255, "overflow", reported=False) is None
    assert learn_window({}, "m", 256, "overflow", reported=False) == {
        "learned_window": {"tokens": 256, "source": "overflow", "model": "m"}}
    assert learn_window({}, "m", 0, "overflow", reported=True) is None
    assert learn_window({}, "m", True, "overflow", reported=True) is None


def test_a_stated_window_only_lowers_and_a_reported_one_replaces():
    meta = {"other": 1, "learned_window": {"tokens": 4096, "source": "overflow", "model": "m"}}
    assert learn_window(meta, "m", 4096, "overflow", reported=False) is None  # the same: nothing changes
    assert learn_window(meta, "m", 4096, "/props", reported=True) is None
    assert learn_window(meta, "m", 4097, "overflow", reported=False) is None  # a statement never raises it
    assert learn_window(meta, "m", 4095, "overflow", reported=False) == {
        "other": 1, "learned_window": {"tokens": 4095, "source": "overflow", "model": "m"}}
    assert learn_window(meta, "m", 8192, "/props", reported=True) == {
        "other": 1, "learned_window": {"tokens": 8192, "source": "/props", "model": "m"}}
    # Learned for another model: it does not count.
    assert learn_window(meta, "n", 8192, "overflow", reported=False)["learned_window"]["model"] == "n"


def test_the_effective_window_is_the_smaller_for_the_same_model():
    meta = {"learned_window": {"tokens": 2048, "source": "llama.cpp /props", "model": "m"}}
    assert learned_window(meta, "m") == meta["learned_window"] and learned_window(meta, "n") is None
    assert effective_window(8192, meta, "m") == 2048 and window_source(8192, meta, "m") == "llama.cpp /props"
    assert effective_window(1024, meta, "m") == 1024 and window_source(1024, meta, "m") == "configured"
    assert effective_window(2048, meta, "m") == 2048 and window_source(2048, meta, "m") == "configured"
    assert effective_window(8192, meta, "n") == 8192 and window_source(8192, meta, "n") == "configured"
    bad = {"learned_window": {"tokens": 0, "source": "x", "model": "m"}}
    assert learned_window(bad, "m") is None and effective_window(8192, bad, "m") == 8192
    assert learned_window({"learned_window": "4096"}, "m") is None


# -- calibration: measured ÷ estimated ----------------------------------------------------------------
@pytest.mark.parametrize("ratio, used", [
    (1.0, 1.0), (1.0299, 1.0), (0.9701, 1.0),  # within ±3 %: the estimate stands
    (1.0301, 1.0301), (0.9699, 0.9699),
    (0.25, 0.25), (8.0, 8.0),  # the plausible range's ends are in it
    (0.2499, 1.0), (8.0001, 1.0), (True, 1.0), ("2", 1.0),
])
def test_calibration_in_use(ratio, used):
    assert calibration({"calibration": {"ratio": ratio, "samples": 1, "model": "m"}}, "m") == used


def test_calibration_belongs_to_its_model():
    meta = {"calibration": {"ratio": 2.0, "samples": 3, "model": "m"}}
    assert calibration(meta, "m") == 2.0 and calibration(meta, "n") == 1.0 and calibration({}, "m") == 1.0


@pytest.mark.parametrize("ratio, ok", [(0.25, True), (8.0, True), (0.2499, False), (8.0001, False), (1.0, True),
                                       (True, False), ("2", False)])
def test_a_sample_outside_0_25_to_8_is_a_misreport(ratio, ok):
    got = blend(None, ratio, "m")
    assert (got == {"ratio": ratio, "samples": 1, "recent": [ratio], "model": "m"}) if ok else got is None


def test_the_estimate_is_the_median_of_recent_samples_within_a_bounded_step():
    first = blend(None, 2.0, "m")
    assert first == {"ratio": 2.0, "samples": 1, "recent": [2.0], "model": "m"}
    second = blend(first, 1.8, "m")
    assert second == {"ratio": 1.9, "samples": 2, "recent": [2.0, 1.8], "model": "m"}  # median of two
    third = blend(second, 1.9, "m")
    assert third["ratio"] == 1.9 and third["samples"] == 3
    # One outlier (the refused request of issue 23 stated 2.84 against 1.96): the median of
    # [2.0, 1.8, 1.9, 2.84] stays among the honest samples, never near the outlier.
    fourth = blend(third, 2.84, "m")
    assert fourth["ratio"] == 1.95 and fourth["samples"] == 4
    # A step is bounded on both sides: ×1.25 up, ÷1.25 down, even when every sample agrees.
    up = blend({"ratio": 1.0, "samples": 5, "recent": [4.0] * 8, "model": "m"}, 4.0, "m")
    assert up["ratio"] == 1.25
    down = blend({"ratio": 2.5, "samples": 5, "recent": [1.0] * 8, "model": "m"}, 1.0, "m")
    assert down["ratio"] == 2.0
    just = blend({"ratio": 1.0, "samples": 5, "recent": [1.2] * 8, "model": "m"}, 1.2, "m")
    assert just["ratio"] == 1.2  # within the step: the median itself


def test_only_the_nine_newest_samples_vote():
    cal = None
    for r in [1.0] * 9 + [2.0] * 5:
        cal = blend(cal, r, "m")
    assert cal["recent"] == [1.0] * 4 + [2.0] * 5 and len(cal["recent"]) == 9
    assert cal["samples"] == 14
    assert 1.0 < cal["ratio"] <= 2.0  # the majority of the nine newest is 2.0: it moves towards it
    assert blend(cal, 2.0, "m")["recent"] == [1.0] * 3 + [2.0] * 6


def test_old_entries_and_other_models():
    # An entry written before `recent` existed: its ratio is the one recent sample.
    assert blend({"ratio": 2.0, "samples": 7, "model": "m"}, 1.8, "m") == {
        "ratio": 1.9, "samples": 8, "recent": [2.0, 1.8], "model": "m"}
    assert blend({"ratio": 2.0, "model": "m"}, 1.8, "m")["samples"] == 1
    assert blend({"ratio": 2.0, "samples": 9, "model": "x"}, 1.0, "m") == {"ratio": 1.0, "samples": 1, "recent": [1.0], "model": "m"}
    assert blend({"ratio": "2", "samples": 9, "model": "m"}, 1.0, "m")["ratio"] == 1.0
    # Rounded to 4 decimals.
    assert blend(None, 1.234567, "m")["ratio"] == 1.2346
    assert blend(None, 1.234567, "m")["recent"] == [1.2346]  # the samples kept, too


def test_the_sample_count_the_panel_shows():
    assert calibration_samples({}, "m") == 0
    assert calibration_samples({"calibration": {"ratio": 2.0, "samples": 3, "model": "m"}}, "m") == 3
    assert calibration_samples({"calibration": {"ratio": 2.0, "samples": 3, "model": "m"}}, "n") == 0
    assert calibration_samples({"calibration": {"ratio": 2.0, "model": "m"}}, "m") == 1


def test_with_samples_skips_what_is_not_a_positive_count():
    meta = {"k": "v"}
    assert with_samples(meta, [(10, 0), (0, 10), (None, 5), (5, None), (True, 5)], "m") is meta
    assert with_samples(meta, [(300, 100)], "m") == {
        "k": "v", "calibration": {"ratio": 3.0, "samples": 1, "recent": [3.0], "model": "m"}}
    assert with_samples(meta, [(300, 100), (330, 100)], "m")["calibration"]["ratio"] == 3.15
    assert with_samples(meta, [(100, 1)], "m") is meta  # 100: not plausible, nothing learned


def test_usage_that_contradicts_a_refusal_is_unverified_both_sides():
    """A refusal stated 90 tokens for a prompt estimated at 45 (2.0×): a later report
    below 70 % of that ratio (1.4×) cannot be right (LiteLLM's own count: 41 for 45)."""
    from ocw.context.calibration import refusal_floor, unverified_count, usage_verified, with_unverified

    meta = refusal_floor({}, 90, 45, "tiny")
    assert meta["usage_floor"] == {"ratio": 1.4, "model": "tiny"}
    assert usage_verified(meta, "tiny", 63, 45)  # exactly the floor: accepted
    assert not usage_verified(meta, "tiny", 62, 45)  # one below: unverified
    assert not usage_verified(meta, "tiny", 41, 45)
    assert usage_verified(meta, "other-model", 10, 45)  # another model's refusal says nothing
    assert refusal_floor({}, 90, 0, "tiny") is None and refusal_floor({}, 900, 10, "tiny") is None  # 90× is no ratio
    assert unverified_count(with_unverified(with_unverified({}, 41, 45), 40, 45)) == 2
    # none yet (or a record that is not a count): the panel says nothing about unverified usage
    assert unverified_count({}) == 0 and unverified_count({"usage_unverified": {"count": 0}}) == 0


def test_usage_far_below_a_settled_calibration_is_unverified_both_sides():
    from ocw.context.calibration import usage_verified, with_samples

    meta = with_samples({}, [(200, 100)] * 3, "tiny")  # 2.0×, three samples
    assert usage_verified(meta, "tiny", 140, 100)  # 1.4× = 70 % of 2.0: accepted
    assert not usage_verified(meta, "tiny", 139, 100)
    two = with_samples({}, [(200, 100)] * 2, "tiny")  # two samples: not settled yet
    assert usage_verified(two, "tiny", 50, 100)


def test_a_refusal_floor_takes_the_plausible_ratios_up_to_both_ends_and_rounds_to_four_places():
    from ocw.context.calibration import refusal_floor

    assert refusal_floor({"k": 1}, 25, 100, "m") == {"k": 1, "usage_floor": {"ratio": 0.175, "model": "m"}}  # 0.25×
    assert refusal_floor({}, 800, 100, "m")["usage_floor"]["ratio"] == 5.6  # 8.0×: the top, still taken
    assert refusal_floor({}, 24, 100, "m") is None and refusal_floor({}, 801, 100, "m") is None  # just outside
    assert refusal_floor({}, 1, 3, "m")["usage_floor"]["ratio"] == 0.2333  # 0.7 × 1/3, four places


@pytest.mark.parametrize("measured, estimated", [(50, 0), (0, 45), (-3, 45), (50, -1), (0, 0)])
def test_a_usage_report_without_two_positive_figures_is_not_judged(measured, estimated):
    """Nothing to compare (a server that reported 0, a request ocw estimated at nothing):
    accepted, never a division by zero — the caller records nothing for it anyway."""
    from ocw.context.calibration import refusal_floor, usage_verified, with_samples

    meta = with_samples(refusal_floor({}, 90, 45, "m"), [(90, 45)] * 3, "m")
    assert usage_verified(meta, "m", measured, estimated) is True
    assert usage_verified(meta, "m", 10, 45) is False  # the same metadata does judge two positive figures


def test_a_stored_sample_list_keeps_only_plausible_numbers_edges_included():
    # What a hand-edited or older metadata file may hold: only numbers within [0.25, 8.0] vote.
    old = {"ratio": 2.0, "samples": 3, "recent": [0.25, 8.0, True, "2", None, 0.2499, 8.0001], "model": "m"}
    assert blend(old, 2.0, "m") == {"ratio": 2.0, "samples": 4, "recent": [0.25, 8.0, 2.0], "model": "m"}


@pytest.mark.parametrize("stored", [-3, 0, True, "7", 2.0, None])
def test_a_sample_count_that_is_not_a_positive_integer_starts_again_at_one(stored):
    assert blend({"ratio": 2.0, "samples": stored, "model": "m"}, 1.8, "m")["samples"] == 1
