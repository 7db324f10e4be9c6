"""A transaction pooler between ocw and PostgreSQL (PgBouncer in transaction mode, as
teams run it): each transaction may get another server connection, so a statement
prepared on one — by ocw's turn (ocw/store/postgres/append.py) or by psycopg itself
after five runs of a query — is missing on the next, or already there from another
client. Seen before this: two of three turns refused ("prepared statement … already
exists"), and reads too. Now a connection that reaches another server process than
the one it was told of makes its pool `plain` (no server-side prepared statements),
and a turn that meets a missing or foreign prepared statement recovers."""
from __future__ import annotations

import psycopg
import pytest

import ocw
from ocw.store.postgres import append as pg_append
from ocw.store.postgres import guess as pg_guess
from ocw.store.postgres import statements as pg_statements
from ocw.store.postgres.listen import wait_ready
from ocw.text.errors import StoreBusy
from test_store_contract import msgs


def test_turns_and_reads_of_three_kernels_through_a_transaction_pooler(bouncer_url):
    stores = [ocw.Store(bouncer_url) for _ in range(3)]
    try:
        # Known at the first connection, before any turn: the server process is not the one
        # the connection was told of. So reads past psycopg's threshold work from the start.
        assert [st.backend._pool.plain for st in stores] == [True, True, True]
        for _ in range(8):
            assert [len(st.sessions()) for st in stores] == [0, 0, 0]
        sessions = [st.create_session(name=f"k{k}") for k, st in enumerate(stores)]
        shared = [stores[0].create_session(name="shared")] + [st.open_session("shared") for st in stores[1:]]
        for i in range(12):  # past psycopg's own threshold (a query's 5th run is prepared)
            for st, s, sh in zip(stores, sessions, shared):
                s.sync()
                s.append_many([("user", f"q{i}"), ("assistant", f"a{i}")], usage=100 + i)
                sh.sync()
                sh.append("user", f"{s.name} {i}")
                assert s.occupancy()["total"] > 0 and len(st.sessions()) == 4
        assert [st.backend._pool.plain for st in stores] == [True, True, True]
        for s in sessions:
            assert len(s.branch()) == 24 and [m["content"][0]["text"] for m in s.rendered_history()][-2:] == [
                "q11", "a11"]
        again = ocw.Store(bouncer_url)
        try:
            texts = [m["content"][0]["text"] for m in again.open_session("shared").rendered_history()]
        finally:
            again.close()
        assert len(texts) == 36 and sorted(texts) == sorted(f"k{k} {i}" for k in range(3) for i in range(12))
    finally:
        for st in stores:
            st.close()


@pytest.mark.timeout(120)
def test_a_turn_through_the_pooler_still_gives_up_on_a_held_lock(bouncer_url, pg_cluster):
    """A connection's SET goes to whichever server connection the pooler gave it then: the
    turn's own transaction carries its lock_timeout (SET LOCAL), so a session another
    writer holds is given up on — one StoreBusy line, nothing written — not waited for."""
    store = ocw.Store(bouncer_url)
    try:
        s = store.create_session(name="held")
        s.append("user", "before")
        store.backend.lock_timeout = 0.5
        s.sync()  # the pool sends its SET now (its connection's next use), not before the turns below
        # Another client of the pooler leaves both server connections waiting forever for
        # locks (a session-level SET, made while each holds one of the two).
        others = [psycopg.connect(bouncer_url) for _ in range(2)]
        for c in others:
            c.execute("SET lock_timeout = 0")  # each in its own open transaction: two server connections
        for c in others:
            c.commit()
            c.close()
        dbname = bouncer_url.rsplit("/", 1)[1]
        with psycopg.connect(pg_cluster.url(dbname)) as holder:  # direct, in a transaction
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [s.id])
            for _ in range(3):  # whichever server connection each turn gets
                with pytest.raises(StoreBusy, match="gave up after 0.5 s, nothing was written"):
                    s.append("user", "while held")
        assert [m["content"][0]["text"] for m in s.rendered_history()] == ["before"]
    finally:
        store.close()


def test_a_direct_connection_keeps_preparing(pg_url):
    store = ocw.Store(pg_url)
    try:
        s = store.create_session(name="direct")
        # Its own listener up first: a turn that read "no listener yet" (own = 0) while the
        # listener was recording its watch sees that watch as another's, and notifies once.
        assert wait_ready(store.backend._listener)
        for i in range(8):
            s.append_many([("user", f"q{i}"), ("assistant", f"a{i}")])
            s.sync()
        pool = store.backend._pool
        assert pool.plain is False
        conns = [c for c, _ in pool._idle]  # (the listener's reads may have used a second one)
        names = {n for c in conns for (n,) in c.execute("SELECT name FROM pg_prepared_statements")}
        # The first turn's lock, HEAD, INSERT and UPDATE; the turns on a guess after it: their
        # lock, INSERT and UPDATE (no one watches: no NOTIFY).
        assert len({n for n in names if n.startswith("ocw_")}) == 7
        assert conns and all(c.prepare_threshold == 5 for c in conns)  # psycopg's own preparing left on
    finally:
        store.close()


def _pg(url):
    from ocw.store.postgres.store import PostgresStore
    from test_store_contract import new_session

    b = PostgresStore(url)
    new_session(b, "s1")
    return b


def test_a_statement_there_that_this_connection_never_prepared_makes_the_pool_plain(pg_url):
    """42P05 — a PREPARE of a name the server connection already has: not ours, so a
    pooler is sharing server connections. The turn runs again without prepared
    statements and is written once."""
    b = _pg(pg_url)
    try:
        b.append_nodes("s1", msgs(("q0", "user", 1)))  # the row read first
        b.append_nodes("s1", msgs(("q0b", "user", 1)))  # on the guess: its statements prepared too
        with b._pool.connection() as conn:
            pg_statements.PREPARED.pop(conn)  # as if another client had prepared them on this server connection
        row, written = b.append_nodes("s1", msgs(("q1", "user", 1)))
        assert b._pool.plain is True and [n.id for n in written] == ["q1"] and row["rev"] == 3
        assert [n.id for n in b.nodes_since("s1", 0)] == ["q0", "q0b", "q1"]
        b.append_nodes("s1", msgs(("q2", "user", 1)))  # plain from now on
        b._guesses.drop()
        b.append_nodes("s1", msgs(("q3", "user", 1)))  # plain, the row read first
        assert [(n.id, n.depth) for n in b.nodes_since("s1", 0)] == [
            ("q0", 1), ("q0b", 2), ("q1", 3), ("q2", 4), ("q3", 5)]
    finally:
        b.close()


def test_statements_lost_twice_in_one_turn_make_the_pool_plain_and_once_do_not(pg_url, monkeypatch):
    """26000 once (someone's DISCARD ALL): prepared again, the pool stays preparing; twice
    within one turn (each transaction on another server connection): plain. Either way
    the turn is written once."""
    b = _pg(pg_url)
    losses = []

    def losing(real, plain_at):
        def run(store, conn, *args):
            if losses and losses[0] > 0 and not args[plain_at]:  # a prepared attempt: the server has lost them
                losses[0] -= 1  # (as a pooler does: prepared on one server connection, run on another)
                conn.execute("DEALLOCATE ALL")
                pg_statements.PREPARED[conn] = set(pg_statements.NAMES.values())
            return real(store, conn, *args)
        return run

    monkeypatch.setattr(pg_append, "_append", losing(pg_append._append, -1))  # (…, plain)
    monkeypatch.setattr(pg_guess, "append", losing(pg_guess.append, -2))  # (…, plain, guess)
    try:
        b.append_nodes("s1", msgs(("q0", "user", 1)))  # the row read first
        b.append_nodes("s1", msgs(("q0b", "user", 1)))  # on the guess: both turns' statements prepared
        losses[:] = [1]
        b.append_nodes("s1", msgs(("q1", "user", 1)))
        assert b._pool.plain is False and losses == [0]
        losses[:] = [2]
        b.append_nodes("s1", msgs(("q2", "user", 1)))
        assert b._pool.plain is True and losses == [0]
        assert [n.id for n in b.nodes_since("s1", 0)] == ["q0", "q0b", "q1", "q2"]
    finally:
        b.close()


def test_a_plain_statement_puts_each_value_where_its_number_stands():
    """$1 … $n as %s in the order they stand (an UPDATE names its $1 last), % doubled, a
    lone $ left as it is; asked again, the same answer (remembered)."""
    sql = "UPDATE t SET a = $2, b = $3 || '%' || '$' WHERE id = $1"
    text, order = pg_statements.plain_text(sql)
    assert text == "UPDATE t SET a = %s, b = %s || '%%' || '$' WHERE id = %s" and order == [2, 3, 1]
    assert pg_statements.plain_text(sql) is pg_statements.plain_text(sql) == (text, order)
