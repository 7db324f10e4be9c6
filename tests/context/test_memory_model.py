"""A real summarizer's memory answer, parsed and grounded (ocw/context/memory_model.py):
a block at the very start of the answer, what each section becomes, and values, rejected
options and retractions the folded turns never said are dropped."""
from __future__ import annotations

from ocw.context.memory import Item, Memory
from ocw.context.memory_model import events_of, split_answer

TURNS = [(3, "user", "We compared Postgres and DuckDB; go with DuckDB."),
         (5, "user", "Always answer in English. Read conf/prod.yaml, the columns region_id, and retry 3 times."),
         (8, "user", "Forget the old rule about tabs; the deploy to staging is done.")]


def test_a_block_at_the_start_of_the_answer_is_parsed_and_kept_out_of_the_prose():
    assert split_answer('<memory>{"todos": ["rerun"]}</memory>\nProse after.') == ("Prose after.", {"todos": ["rerun"]})
    assert split_answer(None) == ("", None)


def test_each_section_becomes_items_at_the_turn_that_said_them():
    long_rule = "Always answer in English"
    answer = {"instructions": [long_rule], "settings": [{"name": "retries", "value": "3"}],
              "decisions": [{"chosen": "DuckDB", "over": "Postgres"}],
              "working_set": [{"kind": "columns", "value": "region_id"}, {"value": "conf/prod.yaml"}]}
    got = [(e.action, e.turn, e.item.kind, e.item.key, e.item.value, e.item.detail) for e in
           events_of(answer, TURNS, Memory())]
    assert got == [("add", 5, "instruction", "always_answer_in_english", long_rule, ""),
                   ("add", 3, "decision", "duckdb", "DuckDB", "Postgres"),
                   ("add", 5, "setting", "retries", "3", ""),
                   ("add", 5, "working", "columns:region_id", "region_id", "columns"),
                   ("add", 5, "working", "item:conf/prod.yaml", "conf/prod.yaml", "item")]


def test_an_instructions_key_is_its_first_60_characters():
    rule = "Always answer in English " + "and keep every reply very short " * 3
    turns = [(2, "user", rule)]
    (e,) = events_of({"instructions": [rule]}, turns, Memory())
    assert len(e.item.key) == 60 and e.item.key == "always_answer_in_english_and_keep_every_reply_very_short_and"


def test_an_invented_rejected_option_drops_the_decision():
    answer = {"decisions": [{"chosen": "DuckDB", "over": "SQLite"}]}  # SQLite was never said
    assert events_of(answer, TURNS, Memory()) == []


def test_retractions_and_closings_are_grounded_like_values():
    answer = {"retracted": ["the old rule about tabs", "a rule nobody said"],
              "closed": ["the deploy to staging"]}
    got = [(e.action, e.turn, e.target) for e in events_of(answer, TURNS, Memory())]
    assert got == [("retract", 8, "the old rule about tabs"), ("close", 8, "the deploy to staging")]
    old = Memory([Item("todo", "x", "migrate the queue", 1)])  # said before these turns: the old memory's turn
    assert [(e.action, e.turn) for e in events_of({"closed": ["migrate the queue"]}, TURNS, old)] == [("close", 1)]
