"""The compaction count through the Session (DESIGN.md §5, seed 002): provider
samples via `record_usage`, ocw's own compactions, baseline resets, persistence."""
from __future__ import annotations

import json

import pytest

from ocw.text.errors import StoreError
from ocw.conversation.sessions import Store

FILLER = "The team reviewed the ingestion pipeline and weighed throughput against latency once more. "


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "count.duckdb")


@pytest.fixture
def cstore(path):
    s = Store(path)
    yield s
    s.close()


def file_meta(store, sid) -> dict:
    with store.db.connect() as con:
        (meta,) = con.execute("SELECT metadata FROM sessions WHERE id = ?", [sid]).fetchone()
    return json.loads(meta)


def session_with_turns(store, n=40, window=16_000):
    s = store.create_session(context_window=window)
    s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + FILLER * 20) for i in range(n)])
    return s


def baseline(s):
    cw = s.metadata.get("context_window")
    return cw["used"] if cw else None


def test_new_session_counts_zero(cstore):
    s = cstore.create_session()
    assert s.compaction_count == 0
    assert file_meta(cstore, s.id)["context_compaction_count"] == 0


def test_samples_through_the_session(cstore):
    # A window that holds every sample below: a sample larger than its window is not valid.
    s = session_with_turns(cstore, 4, window=256_000)
    assert s.record_usage(120_000) is False  # first sample: baseline only
    assert s.compaction_count == 0 and baseline(s) == 120_000
    assert s.record_usage(80_000) is True  # lower: the provider shed context
    assert s.compaction_count == 1 and baseline(s) == 80_000
    assert s.record_usage(80_000) is False  # the same decreased sample again: counted once
    assert s.compaction_count == 1
    assert s.record_usage(80_001) is False  # higher: nothing
    assert s.record_usage(200_000) is False
    assert s.compaction_count == 1 and baseline(s) == 200_000
    assert s.record_usage(150_000) is True
    assert s.compaction_count == 2
    meta = file_meta(cstore, s.id)  # persisted, not only in memory
    assert meta["context_compaction_count"] == 2 and meta["context_window"]["used"] == 150_000


@pytest.mark.parametrize("bad", [None, -5, "100", 1.5, True])
def test_invalid_samples_change_nothing(cstore, bad):
    s = session_with_turns(cstore, 2)
    s.record_usage(1_000)
    before = file_meta(cstore, s.id)
    assert s.record_usage(bad) is False
    assert file_meta(cstore, s.id) == before and s.compaction_count == 0 and baseline(s) == 1_000


def test_own_compaction_counts_exactly_and_resets_the_baseline(cstore, fake_summarizer):
    s = session_with_turns(cstore)
    s.record_usage(15_000)
    s.record_usage(14_000)  # inferred
    assert s.compaction_count == 1
    r = s.compact(provider=fake_summarizer("Summary."))
    assert r.outcome == "succeeded"
    assert s.compaction_count == 2  # exactly one more
    assert s.metadata["context_window"] is None
    assert file_meta(cstore, s.id)["context_window"] is None
    # The next real request is much smaller; that is ocw's compaction, already counted.
    assert s.record_usage(r.tokens_after) is False
    assert s.compaction_count == 2 and baseline(s) == r.tokens_after


def test_failed_or_no_op_compactions_count_nothing(cstore, fake_summarizer):
    s = session_with_turns(cstore)
    s.record_usage(15_000)
    assert s.compact(provider=fake_summarizer(raises=RuntimeError("down"))).outcome == "failed"
    assert s.compact(keep_recent_tokens=10**9, provider=fake_summarizer()).outcome == "no_op"
    assert s.compaction_count == 0 and baseline(s) == 15_000


@pytest.mark.parametrize("reset", ["rewind", "checkout", "reset_context", "reset_model"])
def test_resets_clear_the_baseline_and_keep_the_count(cstore, reset):
    s = session_with_turns(cstore, 8)
    branch = s.branch()
    s.record_usage(9_000)
    s.record_usage(7_000)
    assert s.compaction_count == 1
    if reset == "rewind":
        s.rewind(branch[3])
    elif reset == "checkout":
        s.checkout(branch[5])
    elif reset == "reset_context":
        s.reset_context()
    else:
        s.reset_context(model="gpt-4-turbo", context_window=128_000)
    assert s.metadata["context_window"] is None
    assert file_meta(cstore, s.id)["context_window"] is None
    assert s.compaction_count == 1
    assert s.record_usage(2_000) is False  # legitimately smaller: a new baseline, not a compaction
    assert s.compaction_count == 1 and baseline(s) == 2_000


def test_a_sample_that_cannot_be_persisted_changes_nothing(cstore, monkeypatch):
    s = session_with_turns(cstore, 2)
    s.record_usage(10_000)
    before = file_meta(cstore, s.id)

    def broken_bump(*a, **kw):
        raise StoreError("disk full")

    monkeypatch.setattr(s.backend, "_write_row", broken_bump)
    with pytest.raises(StoreError):
        s.record_usage(4_000)
    monkeypatch.undo()
    assert s.compaction_count == 0 and baseline(s) == 10_000  # neither the count nor the baseline moved
    assert file_meta(cstore, s.id) == before
    # A later valid sample compares against the last persisted one.
    assert s.record_usage(6_000) is True
    assert s.compaction_count == 1


def test_count_and_baseline_survive_reopening_the_store(path, fake_summarizer):
    store = Store(path)
    s = session_with_turns(store)
    s.record_usage(15_500)
    s.record_usage(15_000)  # inferred: 1
    assert s.compact(provider=fake_summarizer("Summary.")).outcome == "succeeded"  # own: 2
    s.record_usage(9_000)  # baseline after the compaction
    sid = s.id
    store.close()

    store2 = Store(path)
    try:
        s2 = store2.open_session(sid)
        assert s2 is not s
        assert s2.compaction_count == 2
        assert baseline(s2) == 9_000
        assert s2.record_usage(8_000) is True  # compared against the persisted baseline: exactly once
        assert s2.record_usage(8_000) is False
        assert s2.compaction_count == 3
    finally:
        store2.close()


def test_legacy_session_without_the_key_reads_zero(path):
    store = Store(path)
    s = session_with_turns(store, 2)
    sid = s.id
    with store.db.connect() as con:  # what an older ocw wrote: no count, no sample
        con.execute("UPDATE sessions SET metadata = '{}', rev = rev + 1 WHERE id = ?", [sid])
    store.close()

    store2 = Store(path)
    try:
        s2 = store2.open_session(sid)
        assert "context_compaction_count" not in s2.metadata
        assert s2.compaction_count == 0
        assert s2.occupancy()["compaction_count"] == 0
        assert s2.record_usage(5_000) is False
        assert s2.record_usage(4_000) is True
        assert s2.compaction_count == 1
        assert file_meta(store2, sid)["context_compaction_count"] == 1
    finally:
        store2.close()


def test_counts_belong_to_one_session(cstore):
    a = session_with_turns(cstore, 2)
    b = cstore.create_session(name="other")
    a.record_usage(5_000)
    a.record_usage(1_000)
    b.record_usage(900)  # first sample of b: a baseline, not compared with a's
    assert (a.compaction_count, b.compaction_count) == (1, 0)
