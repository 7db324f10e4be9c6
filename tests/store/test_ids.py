"""Ids: a prefix and 20 hex digits (ms << 36 | 36 random bits), increasing within a
process — so appends touch only the newest corner of the primary-key index."""
from __future__ import annotations

import re

from ocw.store import ids


def test_shape_and_order():
    made = [ids.new_id("n_") for _ in range(2000)]
    assert all(re.fullmatch(r"n_[0-9a-f]{20}", i) for i in made)
    assert made == sorted(made) and len(set(made)) == 2000


def test_the_time_is_in_the_high_bits(monkeypatch):
    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.123)
    monkeypatch.setattr(ids, "_last", 0)
    value = int(ids.new_id("s_")[2:], 16)
    assert value >> 36 == 1_700_000_000_123


def test_same_millisecond_and_a_clock_step_back_still_count_up(monkeypatch):
    clock = iter([1_700_000_000.5] * 3 + [1_700_000_000.0] * 3)  # three in one ms, then 500 ms back
    monkeypatch.setattr(ids.time, "time", lambda: next(clock))
    monkeypatch.setattr(ids, "_last", 0)
    made = [ids.new_id() for _ in range(6)]
    values = [int(m, 16) for m in made]
    assert values == sorted(values) and len(set(values)) == 6
    assert values[3] == values[2] + 1  # after the step back: the last one plus one


def test_the_random_part_comes_from_the_os_not_the_seeded_module(monkeypatch):
    import random

    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.0)
    got = set()
    for _ in range(3):
        monkeypatch.setattr(ids, "_last", 0)
        random.seed(7)
        got.add(ids.new_id())
    assert len(got) == 3  # a seeded `random` does not repeat them


def test_the_random_part_is_exactly_the_low_36_bits(monkeypatch):
    """Five bytes from the OS, shifted right by 4: 36 random bits, never reaching the time's."""
    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.123)
    for byte, low in ((b"\xff", 0xF_FFFF_FFFF), (b"\x00", 0), (b"\x12", 0x1_2121_2121)):
        monkeypatch.setattr(ids, "_last", 0)
        monkeypatch.setattr(ids.os, "urandom", lambda n, byte=byte: byte * n)
        value = int(ids.new_id(), 16)
        assert (value >> 36, value & 0xF_FFFF_FFFF) == (1_700_000_000_123, low)


def test_an_id_of_the_older_16_digit_shape_sorts_among_these_by_its_millisecond():
    """Before session 18 an id was ms << 20 | 20 random bits in 16 hex digits: a session
    keeps them, and they still sort by time beside today's (the same 11 leading digits)."""
    ms = 1_700_000_000_123
    older = [f"n_{(t << 20) | r:016x}" for t, r in ((ms - 1, 0xFFFFF), (ms, 0), (ms + 1, 0))]
    newer = [f"n_{(t << 36) | r:020x}" for t, r in ((ms - 1, 0xF_FFFF_FFFF), (ms, 0), (ms + 1, 0))]
    assert sorted(older + newer) == [older[0], newer[0], older[1], newer[1], older[2], newer[2]]


def test_the_same_millisecond_and_the_same_random_part_still_give_two_ids(monkeypatch):
    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.123)
    monkeypatch.setattr(ids.os, "urandom", lambda n: b"\x55" * n)
    monkeypatch.setattr(ids, "_last", 0)
    a, b = ids.new_id("n_"), ids.new_id("n_")
    assert a != b and int(b[2:], 16) == int(a[2:], 16) + 1
