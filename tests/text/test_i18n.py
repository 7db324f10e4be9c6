"""The four compaction system messages, English and Chinese (DESIGN.md §4)."""
from __future__ import annotations

import pytest

from ocw.context.engine import CompactionResult
from ocw.text.i18n import normalize_lang, system_message

FINISHED = {"summarised_count": 12, "tokens_before": 800, "tokens_after": 300}

EXPECTED = {
    "en": {
        "started": "Compacting context…",
        "finished": "Context compacted: covered 12 older messages, 800 → 300 tokens",
        "failed": "Context compaction failed",
        "failed_error": "Context compaction failed: provider timed out",
        "no_op": "Context is already compacted; no older messages to fold.",
    },
    "zh": {
        "started": "正在压缩上下文…",
        "finished": "上下文已压缩：覆盖了 12 条较早的消息，800 → 300 tokens",
        "failed": "上下文压缩失败",
        "failed_error": "上下文压缩失败：provider timed out",
        "no_op": "当前上下文已是压缩状态，没有可压缩的旧消息。",
    },
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_four_variants(lang):
    want = EXPECTED[lang]
    assert system_message("compaction_started", {}, lang) == want["started"]
    assert system_message("compaction_finished", FINISHED, lang) == want["finished"]
    assert system_message("compaction_failed", {}, lang) == want["failed"]
    assert system_message("compaction_failed", {"error": None}, lang) == want["failed"]
    assert system_message("compaction_failed", {"error": "provider timed out"}, lang) == want["failed_error"]
    assert system_message("compaction_finished", {"no_op": True, "tokens_before": 5, "tokens_after": 5}, lang) \
        == want["no_op"]


def test_default_language_is_english():
    assert system_message("compaction_started") == "Compacting context…"
    assert system_message("compaction_finished", {"no_op": True}, None) == EXPECTED["en"]["no_op"]


@pytest.mark.parametrize("lang, norm", [("zh", "zh"), ("zh-CN", "zh"), ("ZH_tw", "zh"), ("en-US", "en"),
                                        ("fr", "en"), ("", "en"), (None, "en")])
def test_language_normalisation(lang, norm):
    assert normalize_lang(lang) == norm


def test_large_figures_use_thousands_separators():
    msg = system_message("compaction_finished", {"summarised_count": 3, "tokens_before": 125_000,
                                                 "tokens_after": 40_700})
    assert msg == "Context compacted: covered 3 older messages, 125,000 → 40,700 tokens"


def test_no_op_never_says_covered_zero():
    for lang in ("en", "zh"):
        msg = system_message("compaction_finished", {"no_op": True, "summarised_count": 0,
                                                     "tokens_before": 9, "tokens_after": 9}, lang)
        assert "0" not in msg


def test_not_a_compaction_event():
    with pytest.raises(ValueError):
        system_message("occupancy_changed", {})


def test_result_message_follows_its_outcome():
    ok = CompactionResult("succeeded", payload=FINISHED)
    assert ok.event == "compaction_finished" and ok.message() == EXPECTED["en"]["finished"]
    assert ok.message("zh") == EXPECTED["zh"]["finished"]
    noop = CompactionResult("no_op", payload={"no_op": True})
    assert noop.message() == EXPECTED["en"]["no_op"]
    bad = CompactionResult("failed", error="provider timed out", payload={"error": "provider timed out"})
    assert bad.event == "compaction_failed" and bad.message("zh") == EXPECTED["zh"]["failed_error"]


def test_one_message_is_singular_two_plural():
    one = system_message("compaction_finished", {"summarised_count": 1, "tokens_before": 900, "tokens_after": 400})
    assert one == "Context compacted: covered 1 older message, 900 → 400 tokens"
    two = system_message("compaction_finished", {"summarised_count": 2, "tokens_before": 900, "tokens_after": 400})
    assert two == "Context compacted: covered 2 older messages, 900 → 400 tokens"
    assert system_message("compaction_finished", {"summarised_count": 1}, "zh").startswith("上下文已压缩：覆盖了 1 条")


@pytest.mark.parametrize("lang, want", [
    ("en", "Compacting… 2 of 3 · 4.3 s"), ("zh", "正在压缩… 第 2 / 3 步 · 4.3 秒")])
def test_progress_says_the_call_of_the_calls_and_the_seconds_to_one_decimal(lang, want):
    assert system_message("compaction_progress", {"call": 2, "calls": 3, "elapsed": 4.34}, lang) == want


def test_progress_before_any_time_is_measured_says_zero_seconds_and_call_one_of_one():
    assert system_message("compaction_progress", {}, "en") == "Compacting… 1 of 1 · 0.0 s"
    assert system_message("compaction_progress", {"elapsed": None}, "en") == "Compacting… 1 of 1 · 0.0 s"


def test_a_vetoed_compaction_quotes_the_hooks_reason_in_both_languages():
    vetoed = {"no_op": True, "no_op_kind": "vetoed", "reason": "keep the draft whole"}
    assert system_message("compaction_finished", vetoed, "en") == \
        "Compaction skipped: a pre_compact hook vetoed it (keep the draft whole)."
    assert system_message("compaction_finished", vetoed, "zh") == "已跳过压缩：pre_compact 钩子否决了它（keep the draft whole）。"


def test_a_finished_payload_without_a_count_says_zero_messages():
    assert system_message("compaction_finished", {"tokens_before": 10, "tokens_after": 4}, "en") == \
        "Context compacted: covered 0 older messages, 10 → 4 tokens"


def test_a_failure_in_ocws_own_words_fills_in_its_figures_in_the_users_language():
    payload = {"error": "raw", "error_key": "err_not_smaller", "error_params": {"new": 900, "old": 800}}
    assert system_message("compaction_failed", payload, "en") == (
        "Context compaction failed: the summary (900 tokens) is not smaller than what it replaces (800 tokens); "
        "nothing was saved")
    assert system_message("compaction_failed", {"error": "raw", "error_key": "err_empty_summary"}, "en") == \
        "Context compaction failed: the summarizer returned an empty summary"
