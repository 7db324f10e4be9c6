"""The session and compaction tests, run again on both backends: the same Session,
engine and count code over a DuckDB file and over a real PostgreSQL database
(the store is the only thing that changes; nothing above it knows which).

The tests are the ones in test_session.py, test_engine.py and
test_compaction_count.py that read through the public API only (those that
read the DuckDB file with SQL stay there); here their `store` / `estore` /
`cstore` fixtures give an `ocw.Store` on each backend in turn.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ocw

# test_engine.py lives with the context engine's tests (tests/context/); its session-level
# tests are collected here too, so that folder is on the path however this file is run.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "context"))
from test_compaction_count import (  # noqa: E402,F401  (collected here, on both backends)
    test_counts_belong_to_one_session, test_failed_or_no_op_compactions_count_nothing,
)
from test_engine import (  # noqa: E402,F401
    test_after_success_occupancy_is_the_reported_figure_and_estimated, test_auto_failures_must_be_consecutive,
    test_auto_failures_pause_auto_compaction_and_a_success_resets,
    test_chunking_cuts_one_message_larger_than_the_summarizer_window, test_end_to_end_with_the_offline_provider,
    test_four_messages_are_enough, test_identifiers_survive_three_compactions, test_one_compaction_at_a_time,
    test_recompacting_a_compacted_session_is_no_op,
)
from test_pins import (  # noqa: E402,F401  (pins and forgets are appended records on both stores)
    test_a_forgotten_item_said_before_the_forget_is_not_re_added, test_a_pin_is_its_own_block_and_its_own_row,
    test_forget_takes_an_item_out_of_what_the_model_reads_and_survives_compactions,
    test_pins_go_verbatim_through_every_compaction, test_the_pins_together_take_at_most_a_quarter_of_the_window,
    test_unpin_is_an_appended_record_and_numbers_stay,
)
from test_session import (  # noqa: E402,F401
    sess, test_append_strings_and_blocks, test_content_cache_is_bounded_and_history_still_complete,
    test_each_message_is_counted_once, test_measured_basis_lives_only_as_long_as_head_and_generation,
    test_model_change_recounts, test_occupancy_equals_full_recount, test_occupancy_fields,
    test_restart_shows_the_same_occupancy_and_count, test_rewind_rules, test_rewind_turns,
    test_summary_nodes_cannot_be_appended, test_tool_result_cap_change_keeps_the_recount_exact,
    test_unknown_model_is_labelled_an_estimate,
)


@pytest.fixture(params=["duckdb", "postgresql"])
def store(request, tmp_path):
    where = str(tmp_path / "s.duckdb") if request.param == "duckdb" else request.getfixturevalue("pg_url")
    s = ocw.Store(where)
    assert s.backend.kind == request.param
    yield s
    s.close()


@pytest.fixture
def estore(store):
    return store


@pytest.fixture
def cstore(store):
    return store


def test_another_kernels_writes_are_seen_by_sync(store):
    """On both backends: a second Store (another kernel) writes; the first one's sync
    (the rev read) sees HEAD, the sample and the totals."""
    s1 = store.create_session(model="gpt-4o", context_window=5000, name="shared")
    s1.append("user", "from one")
    two = ocw.Store(store.path)
    try:
        s2 = two.open_session("shared")
        b = s2.append("assistant", "from two")
        s2.record_usage(123)
        s1.sync()
        assert s1.head == b and len(s1.branch()) == 2
        assert s1.occupancy()["basis"] == "measured" and s1.occupancy()["total"] == 123
        assert s1.occupancy()["estimated_total"] == s2.occupancy()["estimated_total"]
    finally:
        two.close()


def test_a_compaction_and_a_rewind_read_the_same_from_a_second_store(store, fake_summarizer):
    s = store.create_session(context_window=16_000, system_prompt="careful")
    ids = s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 300) for i in range(40)])
    result = s.compact(provider=fake_summarizer("SUMMARY of the early turns"))
    assert result.summarised_count > 0 and s.compaction_count == 1
    s.rewind(ids[-3])
    fork = s.append("assistant", "another ending")
    two = ocw.Store(store.path)
    try:
        t = two.open_session(s.id)
        assert (t.head, t.generation, t.compaction_count) == (fork, s.generation, 1)
        assert t.branch() == s.branch() and [n.id for n in t.summaries()] == [n.id for n in s.summaries()]
        assert t.active_summary().id == s.active_summary().id
        assert t.occupancy()["total"] == s.occupancy()["total"]
        assert t.rendered_history() == s.rendered_history()
        assert sorted(b["id"] for b in t.branches()) == sorted([ids[-1], fork])
    finally:
        two.close()


def test_two_kernels_writing_one_session_read_summaries_only_after_a_compaction(store, fake_summarizer):
    """A turn under another kernel's HEAD brings that kernel's messages, never a summary:
    a summary is written only with a generation bump, so the store's summaries are read
    only when the row's generation moved — and then the other kernel's summary is seen."""
    one = store.create_session(model="gpt-4o", context_window=16_000, name="pair")
    two_store = ocw.Store(store.path)
    try:
        two = two_store.open_session("pair")
        reads = []
        real = two_store.backend.summaries
        two_store.backend.summaries = lambda *a, **k: reads.append(a) or real(*a, **k)
        for i in range(6):  # turns alternate between the kernels
            one.append_many([("user", f"q{i} " + "words " * 200), ("assistant", f"a{i} " + "words " * 200)], usage=900)
            two.append_many([("user", f"Q{i} " + "words " * 200), ("assistant", f"A{i} " + "words " * 200)], usage=900)
        assert reads == []
        one.sync()
        assert one.branch() == two.branch() and len(two.branch()) == 24  # one chain, the turns interleaved
        result = one.compact(provider=fake_summarizer("SUMMARY of the early turns"))
        assert result.summarised_count > 0
        two.append("user", "after the other kernel compacted")
        assert len(reads) == 1  # the generation moved: read once
        assert two.active_summary() is not None and two.active_summary().id == one.active_summary().id
        assert two.occupancy()["breakdown"]["summary"] > 0
    finally:
        two_store.close()
