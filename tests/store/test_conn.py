"""The PostgreSQL store's connections (ocw/store/postgres/conn.py): one line per
error with the hint that fits, the lock wait %config sets applied to a kept
connection too, and a connection handed back mid-transaction closed, never kept."""
from __future__ import annotations

import psycopg
import pytest

from ocw.store.postgres.conn import Pool, _has_input, store_error
from ocw.store.postgres.store import PostgresStore
from ocw.text.errors import StoreError
from test_store_contract import new_session
from waiting import wait_for


@pytest.mark.parametrize("text, hint", [
    ('FATAL:  database "nope" does not exist', "create the database (createdb NAME) or fix its name in the URL"),
    ('FATAL:  role "who" does not exist', "use a user the server knows (postgresql://USER@host/db)"),
    ("connection failed: connection refused", "is the PostgreSQL server running and reachable? check host and port"),
    ("ERROR:  canceling statement due to statement timeout",
     "the server's statement_timeout stopped the write; nothing of it was stored"),
    ("something else entirely", "see %ocw doctor"),
])
def test_a_driver_error_is_one_line_with_the_hint_that_fits(text, hint):
    e = store_error(psycopg.OperationalError(text + "\n  second line"), "postgresql://u@h/d", [])
    assert isinstance(e, StoreError)
    assert str(e) == f"cannot use the ocw database postgresql://u@h/d: " \
        f"{' '.join((text + ' second line').split()).removeprefix('connection failed: ')}"
    assert e.hint == hint
    assert store_error(psycopg.OperationalError(text), "d", [], "connect to").user_message().startswith(
        "cannot connect to the ocw database d: ")


def test_a_changed_lock_wait_reaches_a_kept_connection(pg_url):
    pool = Pool(pg_url, "test")
    try:
        with pool.connection() as conn:
            assert conn.execute("SHOW lock_timeout").fetchone() == ("10s",)  # the default, 10 s
            first = conn
        pool.lock_timeout = 0.5  # %config Ocw.lock_timeout = 0.5
        with pool.connection() as conn:
            assert conn is first and pool.connects == 1  # the kept one
            assert conn.execute("SHOW lock_timeout").fetchone() == ("500ms",)
    finally:
        pool.close()


def test_a_connection_handed_back_mid_transaction_is_closed_not_kept(pg_url):
    """Its transaction (and any lock it took) ends with it: another writer is not left
    waiting behind a connection nobody uses."""
    store = PostgresStore(pg_url)
    pool = store._pool
    try:
        new_session(store)
        with pool.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE")
            pid = conn.info.backend_pid
            held = conn
        assert held.closed and pid not in pool.pids
        with psycopg.connect(pg_url, autocommit=True) as other:  # waits for the lock up to 5 s
            other.execute("SET lock_timeout = '5s'")
            assert other.execute("SELECT id FROM sessions WHERE id = 's1' FOR UPDATE").fetchall() == [("s1",)]
        with pool.connection() as conn:
            assert conn is not held and conn.execute("SELECT 1").fetchone() == (1,)
        assert pool.connects == 2
    finally:
        store.close()


def test_at_most_four_idle_connections_are_kept(pg_url):
    """Six used at once, all handed back: four are kept (KEEP_IDLE), the other two closed."""
    from contextlib import ExitStack

    pool = Pool(pg_url, "test")
    try:
        with ExitStack() as stack:
            conns = [stack.enter_context(pool.connection()) for _ in range(6)]
        kept = [c for c, _ in pool._idle]
        assert len(kept) == 4 and all(not c.closed for c in kept)
        assert sum(c.closed for c in conns) == 2 and len(pool.pids) == 4
    finally:
        pool.close()
    assert all(c.closed for c in conns) and pool.pids == set() and pool._idle == []  # closing closes the kept


def test_a_kept_connection_the_server_ended_is_closed_and_forgotten(pg_url):
    """Checked before use (it has input: the server's farewell), found dead, replaced: the
    dead one is closed and its server process no longer counts as ours (the listener
    leaves out the notifications of our own processes)."""
    pool = Pool(pg_url, "test")
    try:
        with pool.connection() as conn:
            dead, pid = conn, conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert wait_for(lambda: _has_input(dead))
        with pool.connection() as conn:
            assert conn is not dead and conn.execute("SELECT 1").fetchone() == (1,)
        assert dead.closed and pid not in pool.pids and pool.connects == 2
    finally:
        pool.close()
