"""The memory pass's hints (issue 28, item 3): a sentence the retraction or closing
pattern matches always holds its hint, so searching the cheap hint first never loses
an event."""
from __future__ import annotations

import pytest

from ocw.bench.quality_gen import generate
from ocw.context import memory_rules as mr

HAND = [
    "forget data/raw.csv, it is gone", "Forget about `old_table`.", "ignore  run_7 please", "never mind x.py",
    "don't forget to ship", "run_3 is actually corrupt", "the file a.csv turned out to be bogus",
    "there's no such column user_id", "there is no foo", "orders_v2 doesn't exist", "x did not  exist",
    "the migration is now done", "the bug is fixed.", "we did the rollout", "wrapped up\tthe report",
    "tickets are off my list", "nothing to see here", "it is done", "is done", "isdone", "fixedis done",
    "a.csv is not valid", "a.csv is not a real file", "b.json wasn't right", "DONE WITH the thing",
]


def _sentences(seeds=range(3)):
    out = list(HAND)
    for seed in seeds:
        for ph in "ABC":
            for st in generate(seed, 40, ph).steps:
                out += mr.sentences(mr.clean(st.text))
    return out


@pytest.mark.parametrize("rx, hint", [(mr._RETRACT, mr._RETRACT_HINT), (mr._CLOSE, mr._CLOSE_HINT)],
                         ids=["retract", "close"])
def test_every_match_has_its_hint(rx, hint):
    sents = _sentences()
    matched = [s for s in sents if rx.search(s)]
    assert len(matched) >= 15  # the hand-written ones and the generator's are among them
    assert [s for s in matched if not hint.search(s)] == []
    assert any(not hint.search(s) for s in sents)  # and the hint does rule sentences out


def test_the_events_of_hinted_sentences_are_those_of_the_full_search(monkeypatch):
    turns = [(k, "user", s) for k, s in enumerate(_sentences(range(1)))]
    fast = mr.events(turns)
    always = type("Always", (), {"search": staticmethod(lambda s: True)})
    for gate in ("_RETRACT_HINT_F", "_CLOSE_HINT_F", "_DECISION_F", "_TODO_F", "_QUESTION_F"):  # the pure gates
        monkeypatch.setattr(mr, gate, always)
    monkeypatch.setattr(mr, "_INSTRUCTION_F", mr._INSTRUCTION)  # the deciding one: as IGNORECASE reads it
    full = mr.events(turns)
    assert len(full) > 30 and fast == full
    kinds = {e.action for e in full} | {e.item.kind for e in full if e.item is not None}
    assert {"retract", "close", "instruction", "decision", "todo", "setting"} <= kinds


def test_the_working_sets_needs_never_change_the_items(monkeypatch):
    """A working-set pattern runs only where what it needs occurs (issue 28, item 3)."""
    texts = _sentences() + ["df.shape is (3, 4)", "df has columns a, b", "see https://x.io/a", "deadbeef42 landed",
                            "KeyError: 'x'", "open notes/a.md", "read plan.md now", "Exception raised", "x.pyc"]
    fast = [mr.working_items(t, 1) for t in texts]
    monkeypatch.setattr(mr, "_WORKING_NEEDS", {kind: (lambda t: True) for kind, _ in mr._WORKING})
    assert fast == [mr.working_items(t, 1) for t in texts]
    kinds = {i.detail.split()[-1] for items in fast for i in items}
    assert {"url", "commit", "error", "shape", "columns", "file"} <= kinds


def test_an_identifier_list_is_ocw_s_own_text_unless_kept():
    assert mr.own_text("  Key identifiers: data/a.csv, run_7") and mr.own_text("Identifiers: x.py")
    assert not mr.own_text("Key identifiers: data/a.csv", keep_lists=True)
    assert mr.own_text("(offline model) It is 5 tokens long", keep_lists=True)
    assert mr.clean("Key identifiers: a.csv\nreal line") == "real line"
    assert mr.clean("Key identifiers: a.csv\nreal line", keep_lists=True) == "Key identifiers: a.csv\nreal line"


@pytest.mark.parametrize("text, shape", [("df.shape=(3, 4)", "(3, 4)"), ("df.shape (120, 7)", "(120, 7)"),
                                         ("df.shape: (5,2)", "(5,2)"), ("orders has shape (10, 3)", "(10, 3)")])
def test_a_shape_is_read_with_or_without_space_after_it(text, shape):
    items = [i for i in mr.working_items(text, 1) if i.detail.endswith("shape")]
    assert [i.value for i in items] == [shape]


def test_a_sentence_is_three_characters_or_more():
    assert mr.sentences("ok\nno\nfine. Go\n  hi  \nyes. run it!") == ["fine.", "yes.", "run it!"]


@pytest.mark.parametrize("sentence, decision", [("polars, not pandas", ("polars", "pandas")),
                                                 ("it, not pandas", None), ("polars, not it", None),
                                                 ("prefer duckdb to sqlite", ("duckdb", "sqlite"))])
def test_a_choice_names_two_things(sentence, decision):
    evs = [e for e in mr.events([(1, "user", sentence)]) if e.item is not None and e.item.kind == "decision"]
    assert [(e.item.value, e.item.detail) for e in evs] == ([decision] if decision else [])


def test_a_value_named_twice_is_one_working_item():
    items = mr.working_items("read data/a.csv, then data/a.csv again, and data/b.csv", 4)
    assert [(i.value, i.turn) for i in items] == [("data/a.csv", 4), ("data/b.csv", 4)]


def test_a_bare_answer_to_the_question_before_is_a_setting_of_its_turn():
    evs = mr.events([(1, "assistant", "What batch size should we use?"), (2, "user", "64, please.")])
    assert [(e.action, e.turn, e.item.kind, e.item.key, e.item.value) for e in evs] == \
        [("add", 2, "setting", "batch_size", "64")]


@pytest.mark.parametrize("digits, kept", [(6, False), (7, True), (40, True), (41, False)])
def test_a_commit_is_7_to_40_hex_digits(digits, kept):
    sha = ("a1" * 21)[:digits]
    items = [i.value for i in mr.working_items(f"landed {sha} today", 1) if i.detail == "commit"]
    assert items == ([sha] if kept else [])


def test_a_working_item_is_kept_once_by_value():
    items = mr.working_items("see notes/a.md then notes/a.md again and notes/b.md", 1)
    assert [i.value for i in items] == ["notes/a.md", "notes/b.md"]


# -- each message read once per kernel (ocw/text/memo.py, issue 28) ----------------------------
def test_a_message_read_again_gives_the_same_events_as_new_items_for_its_own_turn():
    from ocw.context.memory_rules import events

    turns = [(1, "user", "Set the batch size to 64. From now on, answer in French."),
             (2, "tool", "wrote out/part_1.parquet"), (3, "user", "Set the batch size to 64. From now on, answer in French.")]
    first, again = events(turns), events(turns)
    assert first == again and len(first) == 5
    assert [e.turn for e in first] == [1, 1, 2, 3, 3]  # the kept reading, stamped with each message's turn
    assert [e.item.turn for e in first] == [1, 1, 2, 3, 3]
    first[0].item.status = "superseded"  # merge changes items: a kept reading never hands out the same ones
    assert again[0].item.status == "current" and events(turns)[0].item.status == "current"


def test_an_answer_is_read_with_the_question_before_it_each_time():
    from ocw.context.memory_rules import events

    asked = [(1, "assistant", "What batch size should we use?"), (2, "user", "Use 64.")]
    other = [(1, "assistant", "How many workers should we run?"), (2, "user", "Use 64.")]
    plain = [(1, "assistant", "Here it is."), (2, "user", "Use 64.")]
    for _ in range(2):  # the second time from the kept readings: the same answers
        assert [(e.item.key, e.item.value) for e in events(asked)] == [("batch_size", "64")]
        assert [(e.item.key, e.item.value) for e in events(other)] == [("workers", "64")]
        assert events(plain) == []
    tool_between = [(1, "assistant", "What batch size should we use?"), (2, "tool", "ok"), (3, "user", "Use 64.")]
    assert [(e.item.key, e.turn) for e in events(tool_between)] == [("batch_size", 3)]  # a tool's output answers nothing


def test_clean_with_nothing_of_ocw_in_a_text_is_the_text_itself():
    """`clean`'s shortcut (two searches, then the text as it is) against its line-by-line rule."""
    import random

    from ocw.context.memory_rules import _OWN_PREFIXES, _OWN_LINE, clean, own_text

    def by_lines(text, keep_lists):
        return "\n".join(_OWN_LINE.sub(" ", ln) for ln in text.splitlines() if not own_text(ln, keep_lists))

    bits = ["a", " ", "\n", "\r", "\r\n", "\x0b", "\u2028", "\x1c", "\x85", "\t", "word", "\n\n", "Identifiers",
            "[… 1 of 2 tokens cut from this tool result]", "[… ", *(" " + p for p in _OWN_PREFIXES), *_OWN_PREFIXES]
    rng = random.Random(28)
    for _ in range(20_000):
        text = "".join(rng.choice(bits) for _ in range(rng.randint(0, 10)))
        for keep_lists in (False, True):
            assert clean(text, keep_lists) == by_lines(text, keep_lists), (text, keep_lists)
    assert clean("plain\ntext\n") == "plain\ntext"  # the shortcut: only a last line break goes


def test_clean_reads_no_line_of_a_text_with_nothing_of_ocw_in_it(monkeypatch):
    from ocw.context import memory_rules

    def line_by_line(*a):
        raise AssertionError("read line by line")

    monkeypatch.setattr(memory_rules, "own_text", line_by_line)
    assert memory_rules.clean("plain\ntext, a [user] mark and Summary words\n") == \
        "plain\ntext, a [user] mark and Summary words"
    with pytest.raises(AssertionError):
        memory_rules.clean("(offline model) a digest\nplain")


def test_a_shape_is_named_with_its_word_and_a_three_character_sentence_is_read():
    from ocw.context.memory_rules import sentences, working_items

    assert working_items("df has ashape (3, 4)", 1) == []
    assert [i.value for i in working_items("df has a shape (3, 4)", 1)] == ["(3, 4)"]
    assert sentences("Yes. ok. No") == ["Yes.", "ok."]  # three characters read, two not
