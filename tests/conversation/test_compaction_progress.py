"""Issue 23, deliverable 3: `%compact` always makes progress while anything is older
than the kept tail — whatever the window, the calibration (up to its 8× bound) and the
summarizer's own window. Where a model-written summary cannot fit, the structural
summary (no model call) is stored; it never fails for lack of room."""
from __future__ import annotations

import pytest

from test_small_windows import ScaledSummarizer, fill_to


@pytest.mark.parametrize("window", [1_500, 2_048, 8_192])
@pytest.mark.parametrize("scale", [1.0, 2.84, 8.0])
@pytest.mark.parametrize("own_window", [None, 300])
def test_compact_makes_progress_whatever_the_window_and_calibration(store, window, scale, own_window):
    s = store.create_session(model="tiny", context_window=window, system_prompt="Be brief.")
    fill_to(s, 0.9 / scale, words=30)  # ~90 % of the window in the model's tokens once calibrated
    s.record_usage(int(s.occupancy()["estimated_total"] * scale))
    assert s.calibration == pytest.approx(scale, rel=0.02) if scale != 1.0 else s.calibration == 1.0
    summarizer = ScaledSummarizer(scale, own_window or window)
    before = s.occupancy()
    older = len(s.tail())

    r = s.compact(provider=summarizer)

    assert r.outcome == "succeeded", (r.reason, r.error)
    assert r.summarised_count >= 1 and len(s.tail()) < older and s.compaction_count == 1
    assert r.tokens_after < before["total"]
    if own_window == 300:  # no room for one call in 300 tokens: no model call at all
        assert summarizer.max_tokens == [] and ("structural_window" in r.payload or "structural_small" in r.payload)


def test_an_automatic_compaction_counts_the_incoming_message_and_folds_more(store):
    """landing.py through Session.compact: the same session folds more when the message
    being sent is large, and `incoming` takes a whole number ≥ 0 only."""
    from ocw.text.errors import OcwError

    def session():
        s = store.create_session(model="tiny", context_window=4_000, system_prompt="Be brief.")
        fill_to(s, 0.85, words=40)
        return s

    plain = session().compact(provider=ScaledSummarizer(1.0, 4_000), trigger="auto")
    small = session().compact(provider=ScaledSummarizer(1.0, 4_000), trigger="auto", incoming=0)
    large = session().compact(provider=ScaledSummarizer(1.0, 4_000), trigger="auto", incoming=1_000)
    assert plain.summarised_count < small.summarised_count < large.summarised_count
    assert large.tokens_after + 1_000 <= 0.5 * 4_000 < plain.tokens_after + 1_000
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(OcwError):
            session().compact(provider=ScaledSummarizer(1.0, 4_000), incoming=bad)


def test_the_small_fold_structural_summary_is_said_in_one_line_in_both_languages():
    from ocw.text.i18n import system_message

    payload = {"summarised_count": 3, "tokens_before": 900, "tokens_after": 700, "trigger": "manual",
               "structural_small": True}
    en, zh = system_message("compaction_finished", payload), system_message("compaction_finished", payload, "zh")
    assert en.endswith("; a structural summary (no model call) was used.") and "window" not in en and "\n" not in en
    assert zh.endswith("已改用结构化摘要（不调用模型）。") and "\n" not in zh
