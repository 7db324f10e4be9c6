"""The DuckDB file's holder (ocw/store/duckdb/db.py): what a kernel sees when it opens,
shares and lets go of the file — a file it cannot open is one line at once (not a
wait), an empty file is a new database, the file goes back when idle, a hand-over
leaves a small WAL unmerged, and a process the kernel forked does not keep the file
locked after the kernel let go. (Hand-over timing: test_db_handover.py; the attached
instance: test_db_attach.py; the lock's bound: test_lock_bound.py.)"""
from __future__ import annotations

import fcntl
import os

import duckdb
import pytest

import ocw
from ocw.store.duckdb.db import Db
from ocw.text.errors import StoreBusy, StoreError
from waiting import wait_for


def _free(sidecar: str) -> bool:
    """Could another kernel take the file now? (A fresh open of the sidecar: flock
    conflicts between open files, even within one process.)"""
    fd = os.open(sidecar, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_path_that_is_a_folder_is_one_line_at_once_not_a_wait(tmp_path):
    folder = tmp_path / "notes.duckdb"
    folder.mkdir()
    db = Db(str(folder), lock_timeout=2)
    with pytest.raises(StoreError) as e:
        with db.connect():
            pass
    assert type(e.value) is StoreError  # not StoreBusy: nothing to wait for
    assert e.value.user_message().startswith(f"cannot open {folder}:") and "Is a directory" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_users_connection_of_another_configuration_is_one_line(tmp_db):
    setup = duckdb.connect(tmp_db)
    setup.execute("CREATE TABLE t (x INTEGER)")
    setup.close()
    for mine in (dict(read_only=True), dict(config={"threads": 3})):  # the user's own connection, in this process
        user = duckdb.connect(tmp_db, **mine)
        try:
            db = Db(tmp_db, lock_timeout=2)
            with pytest.raises(StoreError) as e:
                with db.connect():
                    pass
            assert str(e.value).startswith(f"cannot open {tmp_db}:") and "different configuration" in str(e.value)
            db.close()
        finally:
            user.close()


def test_an_empty_file_is_taken_as_a_new_database(tmp_db):
    open(tmp_db, "w").close()  # `touch`: zero bytes, which DuckDB itself refuses
    store = ocw.Store(tmp_db)
    try:
        sid = store.create_session(name="fresh", model="gpt-4o").append("user", "hello")
    finally:
        store.close()
    again = ocw.Store(tmp_db)
    try:
        assert again.open_session("fresh").branch() == [sid]
    finally:
        again.close()


def test_an_idle_file_goes_back_after_idle_close(tmp_db):
    db = Db(tmp_db, idle_close=0.2)
    with db.transaction() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    assert not _free(db.sidecar.path)  # held while in use
    assert wait_for(lambda: _free(db.sidecar.path), 10.0, 0.01)  # the reaper let it go once idle
    assert db.opens == 1 and db.handoffs == 0  # closed for idleness: nobody was waiting
    db.close()


def test_a_lone_holder_keeps_the_file_until_idle_close_not_handing_it_to_nobody(tmp_db):
    db = Db(tmp_db, idle_close=0.5, contended_idle=0.01)
    with db.transaction() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    assert wait_for(lambda: db._con is None, 10.0, 0.01)
    assert db.handoffs == 0 and db.waits == 0  # closed for idleness, not handed over: nobody signalled
    with db.connect():
        assert not db._attached  # reopened as a plain connection (one hand-over would make it attach)
    db.close()


def test_an_attached_hand_over_leaves_a_small_wal_unmerged(tmp_db):
    store = ocw.Store(tmp_db)
    try:
        s = store.create_session(name="w", model="gpt-4o")
        with store.db._cond:
            store.db._hand_over()  # as if another kernel had had it: attached from now on
        ids = [s.append("user", f"turn {i} " + "words " * 50) for i in range(5)]
        assert store.db._attached
        with store.db._cond:
            store.db._hand_over()  # a DETACH: 1–20 ms, not a checkpoint
        assert os.path.getsize(tmp_db + ".wal") > 0
        other = ocw.Store(tmp_db)  # the next holder replays it
        try:
            assert other.open_session("w").branch() == ids
        finally:
            other.close()
    finally:
        store.close()


def test_a_forked_child_does_not_keep_the_file_after_the_kernel_lets_go(tmp_db):
    """A notebook that forks (multiprocessing's default on Linux) while the store holds
    the file: the child shares the sidecar's open file, so closing it in the kernel
    alone would leave the lock held as long as the child lives."""
    db = Db(tmp_db)
    with db.transaction() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait to be told, then go
        try:
            os.read(r, 1)
        finally:
            os._exit(0)
    try:
        db.close()
        other = Db(tmp_db, lock_timeout=2)  # another kernel
        with other.connect() as con:
            assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
        other.close()
    finally:
        os.write(w, b"x")
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)


def test_a_large_wal_is_merged_once_the_file_is_idle(tmp_db):
    db = Db(tmp_db, checkpoint_idle=0.05)  # idle_close None: the kernel keeps the file
    with db.transaction() as con:
        con.execute("CREATE TABLE t (x INTEGER, s VARCHAR)")
        con.execute("INSERT INTO t SELECT range, repeat('w', 60) FROM range(40000)")
    assert os.path.getsize(tmp_db + ".wal") > Db.CHECKPOINT_BYTES  # over 1 MiB
    assert wait_for(lambda: db.checkpoints >= 1, 10.0, 0.01)
    assert db.checkpoints == 1
    assert not os.path.exists(tmp_db + ".wal") or os.path.getsize(tmp_db + ".wal") == 0
    assert db._con is not None and not _free(db.sidecar.path)  # merged, still held
    db.close()


def test_a_small_wal_is_left_while_the_file_is_idle(tmp_db):
    db = Db(tmp_db, checkpoint_idle=0.05)
    with db.transaction() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t SELECT range FROM range(100)")
    wal = os.path.getsize(tmp_db + ".wal")
    assert 0 < wal <= Db.CHECKPOINT_BYTES
    assert wait_for(lambda: not db._dirty, 10.0, 0.01)  # the reaper looked at it once idle
    assert db.checkpoints == 0 and os.path.getsize(tmp_db + ".wal") == wal
    db.close()


def test_opening_the_file_first_lets_in_a_waiter_it_handed_the_file_to(tmp_db):
    db = Db(tmp_db)
    seen: list = []
    db.sidecar.let_the_waiter_in = lambda: seen.append(db.sidecar.fd)
    with db.connect():
        pass
    assert seen == [None]  # asked before the lock was taken: a yielder queues only once the waiter is in
    db.close()


def test_a_read_only_look_shares_a_connection_this_process_has_open(tmp_db):
    from ocw.store.duckdb.settings import DUCKDB_CONFIG

    user = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)  # the user's own, read-write, in this process
    try:
        user.execute("CREATE TABLE t (x INTEGER)")
        user.execute("INSERT INTO t VALUES (7)")
        db = Db(tmp_db, lock_timeout=5)
        with db.read_only() as con:  # DuckDB refuses a read-only one beside it: that one is shared
            assert con.execute("SELECT x FROM t").fetchall() == [(7,)]
        db.close()
    finally:
        user.close()
