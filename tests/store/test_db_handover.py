"""Handing the file over between kernels (ocw/store/duckdb/db.py and sidecar.py, issue 14): a busy holder yields on
its own caller's next use, a process that yielded lets the waiter in before queueing
again, and a small WAL is handed over unmerged (a large one checkpointed)."""
from __future__ import annotations

import os
import threading
import time

import ocw
from ocw.store.duckdb import sidecar as sidecar_module
from ocw.store.duckdb.db import Db


def test_a_busy_holder_hands_over_on_its_callers_next_use(tmp_db, monkeypatch):
    """With the reaper never running (as when back-to-back uses starve it of the lock),
    the holder's caller still hands the file to a waiter once it had its share."""

    def no_reaper(self):
        return None

    monkeypatch.setattr(Db, "_reap", no_reaper)
    a = ocw.Store(tmp_db, contended_hold=0.05, lock_timeout=5)
    sa = a.create_session(name="busy", model="gpt-4o")
    sa.append("user", "first")
    got: dict = {}

    def waiter():
        b = ocw.Store(tmp_db, contended_hold=0.05, lock_timeout=5)
        try:
            got["id"] = b.open_session("busy").append("assistant", "the waiter's turn")
        except Exception as e:  # StoreBusy if the holder never let go
            got["error"] = e
        finally:
            b.close()  # no reaper: give the file back by closing

    t = threading.Thread(target=waiter)
    t.start()
    mine = []
    for i in range(400):
        mine.append(sa.append("user", f"busy {i}"))
        if "id" in got or "error" in got:
            break
    for i in range(3):  # a few more after the waiter's turn
        mine.append(sa.append("user", f"after {i}"))
    t.join(10)
    assert "error" not in got, got.get("error")
    sa.sync()
    branch = sa.branch()
    assert got["id"] in branch
    assert branch.index(got["id"]) < len(branch) - 3  # it got in while the holder was still busy
    assert a.db.handoffs >= 1
    a.close()


def test_a_yielder_waits_for_the_waiter_to_take_the_file(tmp_db, monkeypatch):
    # The bound (HANDOVER_WAIT, 0.5 s) raised out of reach: under load the other thread
    # may start late, and what is asserted is that the yielder waits for it, not how fast.
    monkeypatch.setattr(sidecar_module, "HANDOVER_WAIT", 60.0)
    db = Db(tmp_db)
    mine = b"1:1".ljust(32)
    with open(db.sidecar.path, "wb") as f:
        f.write(mine)
    db.sidecar.yield_token, db.sidecar.yielded_at = mine, time.monotonic()
    taken = threading.Event()

    def other_holder():
        time.sleep(0.05)
        fd = os.open(db.sidecar.path, os.O_RDWR)
        os.pwrite(fd, b"2:1".ljust(32), 0)
        os.close(fd)
        taken.set()

    threading.Thread(target=other_holder).start()
    db.sidecar.let_the_waiter_in()
    assert taken.is_set()  # it returned only once another holder had taken the file
    assert db.sidecar.yield_token is None


def test_a_yielder_stops_waiting_for_a_waiter_that_gave_up(tmp_db, monkeypatch):
    monkeypatch.setattr(sidecar_module, "HANDOVER_WAIT", 0.05)
    db = Db(tmp_db)
    mine = b"1:1".ljust(32)
    with open(db.sidecar.path, "wb") as f:
        f.write(mine)
    os.utime(db.sidecar.path, ns=(1, 1))  # an mtime of long ago: a signal sets it to now
    db.sidecar.yield_token, db.sidecar.yielded_at = mine, time.monotonic()
    db.sidecar.let_the_waiter_in()  # nobody takes the file: it returns anyway
    assert db.sidecar.holder_token() == mine
    assert os.stat(db.sidecar.path).st_mtime_ns > 1  # it kept signalling while it waited


def test_the_holder_names_itself_in_the_sidecar(tmp_db):
    store = ocw.Store(tmp_db)
    try:
        store.create_session(name="x")
        token = store.db.sidecar.holder_token()
        assert token == store.db.sidecar.token and token.startswith(f"{os.getpid()}:".encode())
    finally:
        store.close()


def _handed_over_wal(tmp_db, monkeypatch, limit: int) -> int:
    monkeypatch.setattr(Db, "HANDOVER_WAL_BYTES", limit)
    store = ocw.Store(tmp_db)
    s = store.create_session(name="w", model="gpt-4o")
    ids = [s.append("user", f"turn {i} " + "words " * 50) for i in range(5)]
    with store.db._cond:
        store.db._hand_over()
    wal = os.path.getsize(tmp_db + ".wal") if os.path.exists(tmp_db + ".wal") else 0
    other = ocw.Store(tmp_db)  # the next holder replays what was left
    assert other.open_session("w").branch() == ids
    other.close()
    store.close()
    return wal


def test_a_small_wal_is_handed_over_unmerged(tmp_db, monkeypatch):
    assert _handed_over_wal(tmp_db, monkeypatch, 64 << 10) > 0


def test_a_wal_over_the_limit_is_checkpointed_on_hand_over(tmp_db, monkeypatch):
    assert _handed_over_wal(tmp_db, monkeypatch, 0) == 0


def test_reading_the_holders_token_leaves_no_file_open(tmp_db):
    store = ocw.Store(tmp_db)
    try:
        store.create_session(name="x")
        before = len(os.listdir("/proc/self/fd"))
        tokens = {store.db.sidecar.holder_token() for _ in range(50)}
        assert tokens == {store.db.sidecar.token} and len(os.listdir("/proc/self/fd")) == before
    finally:
        store.close()


def test_taking_and_letting_go_of_the_file_leaves_no_file_open(tmp_db):
    db = Db(tmp_db)
    with db.connect() as con:
        con.execute("SELECT 1")
    db.close()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with db.connect() as con:
            con.execute("SELECT 1")
        db.close()
    assert len(os.listdir("/proc/self/fd")) == before and db.opens == 21
