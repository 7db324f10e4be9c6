"""The identifier pass: exact strings a summary must not lose."""
from __future__ import annotations

import pytest

from ocw.context.engine import FACTS_MAX, facts_budget
from ocw.context.facts import FACTS_HEADER, append_facts, extract_identifiers, missing_identifiers
from ocw.tokens import count_text

ENC = "cl100k_base"


@pytest.mark.parametrize("text, ident", [
    ("see https://docs.example.org/guide/setup.html today", "https://docs.example.org/guide/setup.html"),
    ("GET https://api.example.com/v2/orders?limit=50.", "https://api.example.com/v2/orders?limit=50"),
    ("read /srv/data/raw/events.parquet first", "/srv/data/raw/events.parquet"),
    ("edit src/ocw/context/engine.py now", "src/ocw/context/engine.py"),
    ("the notebook analysis.ipynb", "analysis.ipynb"),
    ("call `load_events` again", "`load_events`"),
    ("it raised KeyError twice", "KeyError"),
    ("a ConnectionResetError here", "ConnectionResetError"),
    ("ticket ABC-123 is open", "ABC-123"),
    ("see issue #4521", "#4521"),
    ("commit deadbeef42 fixed it", "deadbeef42"),
    ("p95 is 250 ms", "250 ms"),
    ("it used 3.5 GB", "3.5 GB"),
    ("we loaded 1500 rows", "1500 rows"),
    ("the id 123e4567-e89b-12d3-a456-426614174000 matched", "123e4567-e89b-12d3-a456-426614174000"),
])
def test_extracts_each_kind(text, ident):
    assert ident in extract_identifiers(text)


def test_order_of_first_appearance_without_duplicates():
    text = "KeyError in src/a.py; then ABC-1 and KeyError again in src/a.py, then `x_y`."
    assert extract_identifiers(text) == ["KeyError", "src/a.py", "ABC-1", "`x_y`"]


def test_paths_inside_urls_and_backticks_are_not_repeated():
    idents = extract_identifiers("open https://example.com/a/b/c.py and `src/app.py`")
    assert idents == ["https://example.com/a/b/c.py", "`src/app.py`"]


def test_plain_prose_has_no_identifiers():
    assert extract_identifiers("We talked about the weather and the plan for next week.") == []


def test_missing_identifiers_are_those_the_summary_omits():
    source = "Fix KeyError in src/app.py (ABC-123), took 250 ms."
    summary = "Fixed the KeyError in src/app.py."
    assert missing_identifiers(source, summary) == ["ABC-123", "250 ms"]
    # a longer identifier does not count as the shorter one
    assert missing_identifiers("see ABC-12", "see ABC-123") == ["ABC-12"]
    # backticked names count as present without their backticks
    assert missing_identifiers("call `load_events`", "We call load_events daily.") == []


def test_append_facts_adds_only_what_is_missing_within_the_cap():
    source = "Files src/a.py and src/b.py, ticket OPS-1, and KeyError."
    out = append_facts("Summary mentions src/a.py.", source, 200, ENC)
    assert out.startswith("Summary mentions src/a.py.")
    tail = out.split(FACTS_HEADER, 1)[1]
    assert [x.strip() for x in tail.split(";")] == ["src/b.py", "OPS-1", "KeyError"]
    assert count_text(out, ENC) - count_text("Summary mentions src/a.py.", ENC) <= 200


def test_append_facts_unchanged_when_nothing_is_missing_or_no_room():
    s = "Mentions KeyError."
    assert append_facts(s, "KeyError", 100, ENC) == s
    assert append_facts(s, "ABC-1 and src/x.py", 0, ENC) == s
    assert append_facts(s, "ABC-1", 3, ENC) == s  # the header alone does not fit


def test_append_facts_skips_a_long_identifier_for_shorter_ones():
    long_url = "https://example.com/" + "/".join(f"segment{i}" for i in range(40))
    out = append_facts("S.", f"{long_url} then ABC-7 and KeyError", 30, ENC)
    assert long_url not in out
    assert "ABC-7" in out and "KeyError" in out


def test_appended_facts_are_found_again_by_the_next_pass():
    # The list is part of the summary text, so a rolling re-compaction carries it on.
    source = "Paths /srv/x/y.csv and `fn_a`, error ValueError, 12 MiB."
    first = append_facts("One line.", source, 200, ENC)
    assert missing_identifiers(source, first) == []
    second = append_facts("Another line.", first + "\n[user] new turn", 200, ENC)
    assert missing_identifiers(source, second) == []


# -- the engine's budget for the list ------------------------------------------------------------
def test_facts_budget_keeps_summary_plus_list_under_what_it_replaces():
    assert facts_budget(100, 20, 128_000) == 70  # 90 % of 100 − 20
    assert facts_budget(100, 95, 128_000) == 0
    assert facts_budget(100, 200, 128_000) == 0


def test_facts_budget_is_capped_by_the_window_and_the_maximum():
    assert facts_budget(1_000_000, 100, 8_192) == 8_192 // 16
    assert facts_budget(1_000_000, 100, 10_000_000) == FACTS_MAX


def test_snake_case_names_and_host_names_are_identifiers():
    text = "The flaky test test_merge_orders fails on orders_v2; the 503s come from api.example.com."
    ids = extract_identifiers(text)
    assert "test_merge_orders" in ids and "orders_v2" in ids and "api.example.com" in ids
    # Plain words, a single underscore-free name, and dotted numbers or method calls are not.
    assert extract_identifiers("merge orders version 3.2 df.groupby plain") == []
    # A host inside a URL adds nothing beyond the URL.
    assert extract_identifiers("see https://api.example.com/v1/x") == ["https://api.example.com/v1/x"]
