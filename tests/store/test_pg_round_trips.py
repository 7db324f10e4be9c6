"""Issue 28 item 5 on PostgreSQL: a turn's write — the user message and the reply,
the usage sample and the session row — is one transaction (1 commit) in at most
5 round trips (it takes 2: ocw/store/postgres/append.py). Counted twice, for real:
by libpq's protocol trace on the store's own connection (ocw/bench/wire.py) and
by the server's own record of which transaction wrote each row (`xmin`)."""
from __future__ import annotations

import psycopg
import pytest

import ocw
from ocw.store.postgres.listen import wait_ready
from ocw.bench import wire
from ocw.text.errors import StoreError


def _writers_of(url: str, sid: str, node_ids: list[str]) -> set[str]:
    """The transactions that wrote these rows, as the server records them (`xmin`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0] for r in conn.execute(
            "SELECT xmin::text FROM nodes WHERE id = ANY(%s) UNION SELECT xmin::text FROM sessions WHERE id = %s",
            [node_ids, sid]).fetchall()}


def _turn(s, i: int) -> None:
    s.append_many([("user", f"question {i}"), ("assistant", f"answer {i}")], usage=1000 + i)
    s.occupancy()


def test_a_turn_is_one_commit_and_one_round_trip_on_the_row_it_wrote_last(pg_url):
    """The first turn of a store reads the row under the lock first (2 round trips); each
    turn after its own is sent whole on the row it wrote (ocw/store/postgres/guess.py)."""
    st = ocw.Store(pg_url)
    try:
        s = st.create_session(name="rt", model="gpt-4o", context_window=100_000)
        assert wait_ready(st.backend._listener)  # its first read of the session done: it takes a connection
        pool = st.backend._pool
        _turn(s, 0)  # the row read first; the connection prepares those statements
        _turn(s, 1)  # on the guess: it prepares its own
        for i in range(2, 5):
            with wire.traced(pool) as seen:
                _turn(s, 10 + i)
            assert seen == {"round_trips": 1, "transactions": 1, "commits": 1}
            # The server agrees: the two messages and the session row (HEAD, usage) one transaction wrote.
            assert len(_writers_of(pg_url, s.id, s.branch()[-2:])) == 1
            row = st.backend.session_row(s.id)
            assert row["metadata"]["context_window"]["used"] == 1000 + 10 + i  # the usage sample went in with it
        st.backend._guesses.drop()  # as after a compaction: the next turn reads the row first
        with wire.traced(pool) as seen:
            _turn(s, 20)
        assert seen == {"round_trips": 2, "transactions": 1, "commits": 1}
        assert len(_writers_of(pg_url, s.id, s.branch()[-2:])) == 1
        row = st.backend.session_row(s.id)
        assert row["metadata"]["context_window"]["used"] == 1020
        assert len(s.branch()) == 12 and row["head_id"] == s.branch()[-1]
    finally:
        st.close()


def test_the_counter_sees_every_transaction_of_a_command(pg_url):
    """It can count more than one: a rewind reads the row to sync, then writes (and
    the server's count agrees with the trace's)."""
    st = ocw.Store(pg_url)
    try:
        s = st.create_session(name="rw", model="gpt-4o", context_window=100_000)
        assert wait_ready(st.backend._listener)  # (as above)
        for i in range(3):
            _turn(s, i)
        with wire.traced(st.backend._pool) as seen:
            s.rewind_turns(1)
        assert seen["commits"] >= 2 and seen["round_trips"] > 2
    finally:
        st.close()


def test_the_count_of_a_trace():
    trace = "\n".join([
        "F\t13\tParse\t \"\" \"BEGIN\" 0", "F\t4\tFlush", "B\t4\tParseComplete", "B\t10\tCommandComplete\t \"BEGIN\"",
        "F\t9\tExecute\t \"\" 0", "F\t4\tSync", "B\t11\tCommandComplete\t \"ROLLBACK\"", "B\t5\tReadyForQuery\t I",
        "F\t9\tExecute\t \"\" 0", "F\t4\tSync", "B\t5\tReadyForQuery\t I", "noise"])
    assert wire.count(trace) == {"round_trips": 3, "transactions": 2, "commits": 1}


# -- the transaction's edges (ocw/store/postgres/append.py) -------------------------------------
def _pg(pg_url):
    from ocw.store.postgres.store import PostgresStore
    from test_store_contract import new_session

    b = PostgresStore(pg_url)
    new_session(b)
    return b


def test_a_second_writer_waits_for_the_first_and_chains_under_its_head(pg_url):
    """The session row is locked from the first round trip to the commit: a second
    writer that starts between the two round trips waits, then reads the HEAD the
    first committed — a chain, not a fork."""
    import threading
    import time

    from ocw.store.postgres.store import PostgresStore
    from test_store_contract import msgs

    a, b = _pg(pg_url), PostgresStore(pg_url)
    try:
        a.append_nodes("s1", msgs(("root", "user", 1)))
        started = []

        def theirs():
            b.append_nodes("s1", msgs(("theirs", "user", 2)))

        def change(row, parent):  # runs between the two round trips, the row locked
            t = threading.Thread(target=theirs)
            t.start()
            started.append(t)
            deadline = time.monotonic() + 10
            with psycopg.connect(pg_url, autocommit=True) as look:
                while t.is_alive() and time.monotonic() < deadline and not look.execute(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
                    time.sleep(0.01)
            return None

        a._guesses.drop()  # the turn that reads the row first: its `change` runs between its round trips
        a.append_nodes("s1", msgs(("mine", "user", 3)), change)
        started[0].join(10)
        assert [(n.id, n.parent_id, n.depth, n.cum) for n in a.nodes_since("s1", 0)] == [
            ("root", None, 1, 1), ("mine", "root", 2, 4), ("theirs", "mine", 3, 6)]
        assert a.session_row("s1")["head_id"] == "theirs"
    finally:
        a.close()
        b.close()


def test_a_failed_turn_writes_nothing_and_keeps_its_connection(pg_url):
    """`change` raising (or any error) rolls the transaction back on the connection,
    which goes back to the pool idle: the next turn needs no new connection."""
    from test_store_contract import msgs

    a = _pg(pg_url)
    try:
        a.append_nodes("s1", msgs(("root", "user", 1)))
        connects, row = a._pool.connects, a.session_row("s1")

        calls = []

        def refuse(row, parent):
            calls.append(row["rev"])
            raise ValueError("no")

        with pytest.raises(ValueError):
            a.append_nodes("s1", msgs(("lost", "user", 5)), refuse)
        assert calls == [1]  # not run again: only a connection that lost its statements retries
        assert a.node_count("s1") == 1 and a.session_row("s1") == row
        with pytest.raises(ValueError, match="not a writable session column: nope"):
            a.append_nodes("s1", msgs(("lost", "user", 5)), lambda row, parent: {"nope": 1})
        assert a.node_count("s1") == 1 and a.session_row("s1") == row
        a.append_nodes("s1", msgs(("next", "user", 2)))
        assert a._pool.connects == connects  # the same connection, rolled back and kept
        assert [(n.id, n.parent_id) for n in a.nodes_since("s1", 0)] == [("root", None), ("next", "root")]
    finally:
        a.close()


def test_a_session_gone_meanwhile_is_one_line(pg_url):
    a = _pg(pg_url)
    try:
        with pytest.raises(StoreError, match=r"^session nope vanished from "):
            a.append_nodes("nope", [{"id": "x", "role": "user", "name": None, "content": [], "tokens": 1}])
        assert a.node_count("nope") == 0
    finally:
        a.close()


def test_a_turn_leaves_the_server_nothing_to_warn_about(pg_url):
    """The second message's COMMIT ends the BEGIN the first one sent: without it the server would
    warn "there is no transaction in progress" into its log on every turn."""
    from test_store_contract import msgs

    a = _pg(pg_url)
    try:
        notes = []
        with a._pool.connection() as conn:  # the pool's one connection, which the turns use
            conn.add_notice_handler(lambda d: notes.append(f"{d.severity}: {d.message_primary}"))
        a.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 2)))
        a.append_nodes("s1", msgs(("c", "user", 1)))
        assert a._pool.connects == 1 and notes == []
        assert [n.id for n in a.nodes_since("s1", 0)] == ["a", "b", "c"]
    finally:
        a.close()


# -- the statements, prepared once per connection (ocw/store/postgres/append.py) -----------------
def _ours(conn) -> list[str]:
    return sorted(r[0] for r in conn.execute(
        "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'ocw\\_%'").fetchall())


def test_each_statement_is_prepared_once_per_connection(pg_url):
    """A turn runs EXECUTEs of statements its connection PREPAREd the first time it
    needed them: after any number of turns one each — lock, HEAD, the INSERT of that
    many rows, the UPDATE of those columns (the NOTIFY only once a session is watched:
    none here) — and a new shape adds one."""
    from test_store_contract import msgs

    a = _pg(pg_url)
    try:
        for i in range(4):
            a.append_nodes("s1", msgs((f"q{i}", "user", 1), (f"a{i}", "assistant", 1)))
        with a._pool.connection() as conn:
            seen = _ours(conn)
        assert a._pool.connects == 1
        # The first turn read the row first (lock, HEAD, INSERT, UPDATE); the three after it were
        # sent on the row it wrote (the lock with the guess's check, the chain's INSERT, the UPDATE).
        assert [sum(part in s for s in seen) for part in ("FOR UPDATE", "updated_at = $3", "JOIN nodes h",
                                                          "INSERT INTO nodes", "UPDATE sessions", "pg_notify")
                ] == [2, 1, 2, 2, 2, 0]
        assert len(seen) == 7
        a.append_nodes("s1", msgs(("one", "user", 1)))  # one row: an INSERT of its own
        a.append_nodes("s1", msgs(("two", "user", 1)), lambda row, parent: {"system_prompt": "s"})  # other columns
        with a._pool.connection() as conn:
            assert len(_ours(conn)) == 9
        assert [n.id for n in a.nodes_since("s1", 0)][-3:] == ["a3", "one", "two"]
    finally:
        a.close()


def test_a_connection_that_lost_its_statements_prepares_them_again(pg_url):
    """Someone's DEALLOCATE ALL on the connection: the next turn's first EXECUTE fails,
    nothing is written, and the turn runs once more — written once, on the same connection."""
    from test_store_contract import msgs

    a = _pg(pg_url)
    try:
        a.append_nodes("s1", msgs(("q0", "user", 1), ("a0", "assistant", 1)))  # the row read first
        a.append_nodes("s1", msgs(("q1", "user", 1), ("a1", "assistant", 1)))  # on the guess
        with a._pool.connection() as conn:
            conn.execute("DEALLOCATE ALL")
            assert _ours(conn) == []
        row, written = a.append_nodes("s1", msgs(("q2", "user", 1), ("a2", "assistant", 1)))
        assert [n.id for n in written] == ["q2", "a2"] and row["head_id"] == "a2" and row["rev"] == 3
        assert [(n.id, n.parent_id) for n in a.nodes_since("s1", 0)] == [
            ("q0", None), ("a0", "q0"), ("q1", "a0"), ("a1", "q1"), ("q2", "a1"), ("a2", "q2")]
        with a._pool.connection() as conn:
            assert len(_ours(conn)) == 3  # the turn on a guess: its lock, INSERT and UPDATE
        assert a._pool.connects == 1
    finally:
        a.close()
