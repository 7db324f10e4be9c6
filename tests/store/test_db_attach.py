"""Once another process shares the file, it is attached to the Db's own in-memory DuckDB
(ocw/store/duckdb/db.py, issue 28): a hand-over is a DETACH and an ATTACH — the instance
stays, the file's lock goes with the DETACH (another process opens it meanwhile),
closing merges the WAL. Until then it is a plain connection, which a connection the
user holds in this process shares, as before."""
from __future__ import annotations

import os
import subprocess
import sys

import duckdb

import ocw
from ocw.store.duckdb.settings import DUCKDB_CONFIG

READ = ("import sys, duckdb; c = duckdb.connect(sys.argv[1], read_only=True);"
        " print(c.execute('SELECT count(*) FROM nodes').fetchone()[0])")


def _other_process_count(path: str) -> str:
    r = subprocess.run([sys.executable, "-c", READ, path], capture_output=True, text=True, timeout=60)
    return r.stdout.strip() or r.stderr.strip().splitlines()[-1]


def test_a_hand_over_detaches_the_file_and_keeps_the_instance(tmp_db):
    store = ocw.Store(tmp_db)
    try:
        s = store.create_session(name="a", model="gpt-4o")
        first = [s.append("user", f"turn {i}") for i in range(3)]
        assert not store.db._attached and store.db._inst is None  # nobody else yet: a plain connection
        with store.db._cond:
            store.db._hand_over()
        assert _other_process_count(tmp_db) == "3"
        second = s.append("assistant", "after the first hand-over")
        inst, opens = store.db._inst, store.db.opens
        assert inst is not None and store.db._attached  # another process was here: attached from now on
        with store.db._cond:
            store.db._hand_over()
        assert store.db._con is None and not store.db._attached
        assert _other_process_count(tmp_db) == "4"  # the lock went with the DETACH
        more = s.append("user", "after the second")
        assert store.db._inst is inst and store.db.opens == opens + 1  # attached again, same instance
        s.sync()
        assert s.branch() == first + [second, more]
    finally:
        store.close()
    assert store.db._inst is None


def test_closing_merges_the_wal_into_the_file(tmp_db):
    store = ocw.Store(tmp_db)
    s = store.create_session(name="a", model="gpt-4o")
    with store.db._cond:
        store.db._hand_over()  # as if another kernel had had it: attached from now on
    for i in range(4):
        s.append("user", f"turn {i} " + "words " * 40)
    assert store.db._attached and os.path.getsize(tmp_db + ".wal") > 0
    store.close()
    assert not os.path.exists(tmp_db + ".wal") or os.path.getsize(tmp_db + ".wal") == 0
    assert _other_process_count(tmp_db) == "4"


def test_a_connection_of_the_users_own_is_shared(tmp_db):
    ocw.Store(tmp_db).create_session(name="one").store.close()
    mine = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)  # held while ocw writes
    try:
        store = ocw.Store(tmp_db)
        store.open_session("one").append("user", "through the user's instance")
        assert not store.db._attached
        with store.db._cond:
            store.db._hand_over()
        store.open_session("one").append("assistant", "after a hand-over: shared again, not attached")
        assert not store.db._attached
        store.close()
        assert mine.execute("SELECT count(*) FROM nodes").fetchone()[0] == 2
    finally:
        mine.close()
