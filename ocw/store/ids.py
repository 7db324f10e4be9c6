"""Node and session ids: a prefix and 16 hex digits — the time in milliseconds (11)
and a random part (5) — in increasing order within a process (no I/O, no database
import, so anything may make one).

Why in time order: `nodes.id` is the primary key, and DuckDB keeps a primary key
as an ART index that it loads from the file piece by piece as keys are touched.
Random ids scatter every append's uniqueness check and every lookup of a recent
node across the whole index, so a kernel ends up holding all of it (41 MB for 1M
nodes after 500 appends, measured) and the file carries a larger index (98 vs
50 MB for 1M bare rows); ids in time order touch only its newest corner. They
also let DuckDB's zone maps skip most of the file on a scan by id. The random
part keeps ids of two kernels apart within one millisecond (1 in 2^20 if both
make one in the same millisecond; from the OS, so a seeded or forked `random`
never repeats them); within a process a millisecond's ids count up.
"""
from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = 0  # the last (ms << 20 | random) value handed out by this process
_RANDOM_BITS = 20


def new_id(prefix: str = "") -> str:
    global _last
    with _lock:
        value = (int(time.time() * 1000) << _RANDOM_BITS) | (int.from_bytes(os.urandom(3), "big") >> 4)
        if value <= _last:  # same millisecond (or a clock step back): count up
            value = _last + 1
        _last = value
    return f"{prefix}{value:016x}"
