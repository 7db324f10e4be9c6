"""What a PostgreSQL store's work costs on the wire: round trips and commits.

libpq's own protocol trace (`PQtrace`, through psycopg's `pgconn.trace`) lists
every message in the order libpq sends and reads them: `F` lines from the
client, `B` lines from the server. A round trip is a run of `F` messages
followed by `B` messages — the client sent and then had to wait for an answer —
so pipelined statements sent together count once. A transaction ended is a
`ReadyForQuery I` (the server back to idle: an autocommit statement, or a
COMMIT / ROLLBACK block); a commit is such an end after which nothing was
rolled back. Used by the benchmark (ocw/bench/pg.py) and its tests; the tests
also check with the server which transaction wrote the rows (xmin).
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import Iterator


def count(trace: str) -> dict:
    """Round trips, transactions ended and commits in a libpq trace's text."""
    trips = ends = rollbacks = 0
    last = None
    for line in trace.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] not in ("F", "B"):
            continue
        side, msg = parts[0], parts[2].strip()
        if side == "B" and last == "F":
            trips += 1
        last = side
        if side == "B" and msg.startswith("ReadyForQuery") and line.rstrip().endswith("I"):
            ends += 1
        if side == "B" and msg.startswith("CommandComplete") and '"ROLLBACK"' in line:
            rollbacks += 1
    return {"round_trips": trips, "transactions": ends, "commits": ends - rollbacks}


@contextmanager
def traced(pool) -> Iterator[dict]:
    """Trace the idle connections of an ocw PostgreSQL pool (ocw/store/postgres/conn.py)
    while the block runs; the dict it yields is filled with `count()`'s figures at the
    end. The block must use only those connections (a new one would go uncounted:
    `connects` is checked, and a new connection makes the figures None)."""
    import psycopg

    conns = [c for c, _ in list(pool._idle)]
    connects = pool.connects
    fd, path = tempfile.mkstemp(prefix="ocw-pgtrace-")
    out: dict = {}
    try:
        flags = psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE
        for c in conns:
            c.pgconn.trace(fd)
            c.pgconn.set_trace_flags(flags)
        try:
            yield out
        finally:
            for c in conns:
                if not c.closed:
                    c.pgconn.untrace()
        with open(path, encoding="utf-8", errors="replace") as f:
            figures = count(f.read())
        out.update(figures if pool.connects == connects else dict.fromkeys(figures))
    finally:
        os.close(fd)
        os.unlink(path)
