"""ocw/context/compaction_log.py: the bounded log `%summary` reads, as pure rules over
session metadata (through the magics and the store: tests/conversation/test_parity.py)."""
from __future__ import annotations

from ocw.context import compaction_log


def entry(i: int) -> dict:
    return {"summary": f"n_{i}", "trigger": "manual", "before": 1000 + i, "after": 500}


def test_entries_keep_only_well_formed_ones():
    assert compaction_log.entries({}) == []
    assert compaction_log.entries({"compactions": "not a list"}) == []
    assert compaction_log.entries({"compactions": {"summary": "n_1"}}) == []
    good = entry(1)
    meta = {"compactions": [good, "text", None, {"summary": 7}, {"trigger": "auto"}, entry(2)]}
    assert compaction_log.entries(meta) == [good, entry(2)]


def test_with_entry_appends_a_copy_and_leaves_the_old_metadata_alone():
    meta = {"compactions": [entry(1)], "context_compaction_count": 1}
    new_entry = entry(2)
    out = compaction_log.with_entry(meta, new_entry)
    assert out == {"compactions": [entry(1), entry(2)], "context_compaction_count": 1}
    assert meta == {"compactions": [entry(1)], "context_compaction_count": 1}
    new_entry["after"] = 0
    assert out["compactions"][-1]["after"] == 500  # the log holds its own copy


def test_with_entry_drops_malformed_entries_and_the_oldest_past_50():
    meta = {"compactions": ["junk"] + [entry(i) for i in range(49)]}
    full = compaction_log.with_entry(meta, entry(49))
    assert [e["summary"] for e in full["compactions"]] == [f"n_{i}" for i in range(50)]  # 50 kept: none dropped
    over = compaction_log.with_entry(full, entry(50))
    assert len(over["compactions"]) == 50
    assert over["compactions"][0]["summary"] == "n_1" and over["compactions"][-1]["summary"] == "n_50"
    assert compaction_log.with_entry({}, entry(0)) == {"compactions": [entry(0)]}


def test_entry_for_finds_a_summary_or_none():
    meta = {"compactions": [entry(1), entry(2), {"summary": "n_1", "trigger": "later"}]}
    assert compaction_log.entry_for(meta, "n_2") == entry(2)
    assert compaction_log.entry_for(meta, "n_1") == entry(1)  # the first one
    assert compaction_log.entry_for(meta, "n_9") is None
    assert compaction_log.entry_for({}, "n_1") is None
