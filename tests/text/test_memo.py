"""`Memo`: a content-addressed memo bounded by the text it keeps (ocw/text/memo.py)."""
import threading

import pytest

from ocw.text.memo import Memo


def test_a_hit_returns_the_kept_value_and_a_miss_keeps_the_new_one():
    memo, calls = Memo(100), []

    def fn():
        calls.append(1)
        return len(calls)

    assert memo.get_or("a", fn) == 1
    assert memo.get_or("a", fn) == 1 and len(calls) == 1  # kept: not called again
    assert memo.get_or("b", fn) == 2
    assert memo.get_or(("enc", "a"), lambda: None) is None  # None is a value like any other
    assert memo.get_or(("enc", "a"), fn) is None and len(calls) == 2
    assert memo.size == 3


def test_past_its_size_the_older_half_goes():
    memo = Memo(10)
    for k in range(5):
        memo.keep(k, k, size=2)
    assert list(memo) == [0, 1, 2, 3, 4] and memo.size == 10  # at the bound, not over it: nothing dropped
    memo.keep(5, 5, size=2)  # 12 > 10: the older half (2 of 5 entries) goes first
    assert list(memo) == [2, 3, 4, 5] and memo.size == 8
    memo.keep(5, 50, size=2)  # a key kept again weighs once
    assert memo[5] == 50 and memo.size == 8
    memo.keep("big", 0, size=30)  # one entry over the whole bound: kept, the older half dropped
    assert list(memo) == [4, 5, "big"] and memo.size == 34
    with pytest.raises(ValueError):
        Memo(1)


def test_two_threads_adding_at_once_stay_within_the_bound():
    memo, sizes = Memo(100), []

    def add(tag):
        for k in range(5_000):
            memo.keep((tag, k), k)
            sizes.append(memo.size)

    threads = [threading.Thread(target=add, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and len(sizes) == 10_000
    assert max(sizes) <= 102  # two threads may each add one past a check of the bound
    assert 40 <= len(memo) <= 102 and memo.size == len(memo)
    assert ("a", 4_999) in memo or ("b", 4_999) in memo  # the newest are kept


def test_the_bound_and_forgetting_every_memo():
    from ocw.text.memo import TEXT_BOUND, forget_all

    assert TEXT_BOUND == 4_000_000  # a ~1M-token tail's lines
    live = Memo(100)
    live.keep("a", 1, size=3)
    gone = Memo(100)
    gone.keep("b", 2)
    del gone  # a memo no one holds: forgetting skips it
    forget_all()
    assert len(live) == 0 and live.size == 0 and live._sizes == {}
    live.keep("a", 1, size=3)
    assert live.size == 3 and live["a"] == 1  # kept again from nothing
