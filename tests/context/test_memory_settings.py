"""The settings grammar of the memory pass (issue 22): the shapes people state a setting
in — verbs, copulas, noun phrases, measurements, questions, pronouns, numbers in words,
a question answered in the next turn — each read to the same key and value; and what
is not a setting stays out."""
from __future__ import annotations

import pytest

from ocw.context.memory import Memory, same_key
from ocw.context.memory_rules import update

FORMS = [  # (sentence, {key: value})
    ("Make the batch size 64.", {"batch_size": "64"}),
    ("Can we make the batch size 64?", {"batch_size": "64"}),
    ("Keep the timeout at 30 s.", {"timeout": "30 s"}),
    ("Cap retries at five.", {"retries": "five"}),
    ("Set lr 3e-4 for now.", {"lr": "3e-4"}),
    ("Batch size needs to be 64.", {"batch_size": "64"}),
    ("The batch size becomes 64.", {"batch_size": "64"}),
    ("Use a batch size of 64.", {"batch_size": "64"}),
    ("Take 64 as the batch size.", {"batch_size": "64"}),
    ("How about 64 for the batch size?", {"batch_size": "64"}),
    ("What if the batch size were 64?", {"batch_size": "64"}),
    ("For the batch size, let's use 64.", {"batch_size": "64"}),
    ("The batch size is too small, make it 64.", {"batch_size": "64"}),
    ("Make it 64 for the batch size.", {"batch_size": "64"}),
    ("Let the batch size be 64.", {"batch_size": "64"}),
    ("I want the batch size at 64.", {"batch_size": "64"}),
    ("We're changing the timeout, it needs to be 45 s.", {"timeout": "45 s"}),
    ("The p95 latency peaked at 741 ms.", {"p95_latency": "741 ms"}),
    ("Throughput dropped to 12 req/s.", {"throughput": "12 req/s"}),
    ("Set the number of workers to sixty-four.", {"number_of_workers": "sixty-four"}),
    ("Switch the optimizer to `adamw`.", {"optimizer": "`adamw`"}),
    ("Set the batch size to 64 and the timeout is 30 s.", {"batch_size": "64", "timeout": "30 s"}),
    ("For the port, make it 8080 — the staging port is 8080 as well.", {"port": "8080"}),  # "it" names the port
    ("Our batch size is too small: make it 64, the eval batch size of 64 works.", {"batch_size": "64"}),
    ("Set the axis to log.", {"axis": "log"}),  # a name ending in "is" keeps it: only a separate word is cut
    ("Make the redis 7.2.", {"redis": "7.2"}),
    # a value keeps the unit it was said with, also after "to" and for a unit that is not a word
    ("Set the timeout to 45 s.", {"timeout": "45 s"}),
    ("Set the budget share to 30%.", {"budget_share": "30%"}),
    ("Keep the budget share at 30 %.", {"budget_share": "30 %"}),
    ("Bump the version to 1.2.3.", {"version": "1.2.3"}),  # not a number with a unit: the token whole
    # a unit is never the setting's name, a counted thing can be
    ("The timeout is too short, make it 45 s, like the request timeout of 45 s.", {"timeout": "45 s"}),
    ("Make it 45 seconds.", {}),
    ("Use 8 workers.", {"workers": "8"}),
    # not settings: prose without a value, a value without a name
    ("The endpoint looks fine compared with the cache we looked at.", {}),
    ("It is 64.", {}),
]


def settings_of(*texts, roles=None):
    roles = roles or ["user"] * len(texts)
    m = update(Memory(), [(i + 1, r, t) for i, (r, t) in enumerate(zip(roles, texts))], budget=4_000,
               encoding="cl100k_base")
    return {i.key: i.value for i in m.current("setting")}


@pytest.mark.parametrize("sentence, expected", FORMS)
def test_each_shape_reads_the_same_key_and_value(sentence, expected):
    assert settings_of(sentence) == expected


def test_a_verb_inside_a_name_is_not_the_verb():
    # "limit" in "sample limit dqkb" must not cut the key to "dqkb": the change supersedes.
    got = settings_of("Make the sample limit dqkb 7085, please.", "On second thought sample limit dqkb should be 7388.")
    assert got == {"sample_limit_dqkb": "7388"}


@pytest.mark.parametrize("question, answer, roles, expected", [
    ("What batch size should we use?", "64, please.", None, {"batch_size": "64"}),
    ("Which timeout should I set?", "Let's say ninety seconds.", None, {"timeout": "ninety seconds"}),
    ("How many workers should we run?", "Eight.", ["assistant", "user"], {"workers": "Eight"}),
    ("What batch size should we use?", "I don't know yet.", None, {}),
    ("The weather is nice.", "64, please.", None, {}),  # no question: a bare value names nothing
    ("What should the answer be?", "42.", None, {}),  # "answer" names no setting
    ("Which answer timeout should we use?", "30 s.", None, {}),
])
def test_a_question_answered_in_the_next_turn(question, answer, roles, expected):
    assert settings_of(question, answer, roles=roles) == expected


def test_a_change_after_a_lead_in_supersedes_and_keys_match_by_suffix():
    assert settings_of("Yesterday the batch size was 64.", "Now batch size is 128.") == {"batch_size": "128"}
    assert same_key("second_thought_batch_size", "batch_size") and same_key("batch_size", "batch_size")
    assert not same_key("p95_size", "size")  # a one-word key is too vague to match a longer one
    assert not same_key("batch_size", "window_size")


def test_a_setting_name_is_at_most_48_characters():
    from ocw.context.memory_settings import settings

    base = "max_retry_count_for_nightly_load_jobs_"
    k48, k49 = base + "x" * 10, base + "x" * 11
    assert [(i.key, i.value) for i in settings(f"set {k48} to 64", 1)] == [(k48, "64")]
    assert settings(f"set {k49} to 64", 1) == []


def test_the_rules_hints_never_change_the_settings(monkeypatch):
    """Issue 28: without a value's hint only the first rule reads a sentence, and the copula
    and "=" rules run only where a copula before a value or "=" occurs."""
    from ocw.bench.quality_gen import generate
    from ocw.context import memory_settings as ms
    from ocw.context.memory_rules import clean, sentences

    texts = [s for s, _ in FORMS] + ["x = 5", "lr=3e-4", "the batch isten", "often it is", "set the mode to fast",
                                     "the limit is `big`", "batch size: sixty", "it weighs eight"]
    for seed in range(3):
        texts += [s for st in generate(seed, 40, "ABC"[seed]).steps for s in sentences(clean(st.text))]
    fast = [ms.settings(s, 1) for s in texts]
    monkeypatch.setattr(ms, "_VALUE_HINT_F", type("Always", (), {"search": staticmethod(lambda s: True)}))
    monkeypatch.setattr(ms, "_NEEDS", {})
    assert fast == [ms.settings(s, 1) for s in texts]
    assert sum(bool(f) for f in fast) > 40
    found = {(i.key, i.value) for f in fast for i in f}
    assert {("x", "5"), ("lr", "3e-4"), ("mode", "fast"), ("limit", "`big`"), ("batch_size", "sixty")} <= found


@pytest.mark.parametrize("sentence, expected", [
    ("x = 5", {"x": "5"}),  # a key before its value is a name whatever it spells
    ("h is 64 now", {"h": "64"}),
    ("Make it 45 s.", {}),  # a unit after a value is not its key
    ("Take 30 min for it.", {}),
    ("Use 8 threads.", {"threads": "8"}),  # a counted thing is
])
def test_a_unit_is_a_key_only_before_a_value(sentence, expected):
    assert settings_of(sentence) == expected


def test_a_trailing_word_is_cut_only_when_it_is_a_word_of_its_own():
    # "format" ends in "at", "tobe" is no "to be": only " at" / " be" after a space is a connector
    assert settings_of("Set the format to json.") == {"format": "json"}
    assert settings_of("Set the timeout to 30 s.", "The timeout is at 45 s.") == {"timeout": "45 s"}


def test_the_asked_setting_is_the_one_the_question_names_whatever_its_form():
    from ocw.context.memory_settings import asked_key

    assert asked_key("What batch size should we use?") == "batch_size"  # k2: "<key> should we"
    assert asked_key("What should the batch size be?") == "batch_size"  # k1: "should the <key> be"
    assert asked_key("What value for the timeout?") == "timeout"  # k3
    assert asked_key("How many workers should we run?") == "workers"  # k4
