"""Node and session ids: a prefix and 20 hex digits — the time in milliseconds (11)
and a random part (9) — in increasing order within a process (no I/O, no database
import, so anything may make one).

Why in time order: `nodes.id` is the primary key, and DuckDB keeps a primary key
as an ART index that it loads from the file piece by piece as keys are touched.
Random ids scatter every append's uniqueness check and every lookup of a recent
node across the whole index, so a kernel ends up holding all of it (41 MB for 1M
nodes after 500 appends, measured) and the file carries a larger index (98 vs
50 MB for 1M bare rows); ids in time order touch only its newest corner. They
also let DuckDB's zone maps skip most of the file on a scan by id. The random
part keeps ids of two kernels apart within one millisecond (from the OS, so a
seeded or forked `random` never repeats them); within a process a millisecond's
ids count up.

Why 36 random bits: with 20 (16 hex digits in all, before session 18) two kernels
writing at once met about once in 2^20 ids made in the same millisecond — with 8
writers on one PostgreSQL database (`ocw.bench.pg`, 2,400 turns a run) a turn was
refused for a duplicate node id twice in about 60 runs. With 36 that is 2^16 times
rarer. Ids of the older shape sort among these by time all the same: both
begin with the millisecond in 11 hex digits.
"""
from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = 0  # the last (ms << 20 | random) value handed out by this process
_RANDOM_BITS = 36


def new_id(prefix: str = "") -> str:
    global _last
    with _lock:
        value = (int(time.time() * 1000) << _RANDOM_BITS) | (int.from_bytes(os.urandom(5), "big") >> 4)
        if value <= _last:  # same millisecond (or a clock step back): count up
            value = _last + 1
        _last = value
    return f"{prefix}{value:020x}"
