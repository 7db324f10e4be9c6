"""Issue 28 item 5 on PostgreSQL: a turn's write — the user message and the reply,
the usage sample and the session row — is one transaction (1 commit) in at most
5 round trips (it takes 2: ocw/store/postgres/append.py). Counted twice, for real:
by libpq's protocol trace on the store's own connection (ocw/bench/wire.py) and
by the server's own record of which transaction wrote each row (`xmin`)."""
from __future__ import annotations

import psycopg

import ocw
from ocw.bench import wire


def _writers_of(url: str, sid: str, node_ids: list[str]) -> set[str]:
    """The transactions that wrote these rows, as the server records them (`xmin`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0] for r in conn.execute(
            "SELECT xmin::text FROM nodes WHERE id = ANY(%s) UNION SELECT xmin::text FROM sessions WHERE id = %s",
            [node_ids, sid]).fetchall()}


def _turn(s, i: int) -> None:
    s.append_many([("user", f"question {i}"), ("assistant", f"answer {i}")], usage=1000 + i)
    s.occupancy()


def test_a_turn_is_one_commit_and_two_round_trips(pg_url):
    st = ocw.Store(pg_url)
    try:
        s = st.create_session(name="rt", model="gpt-4o", context_window=100_000)
        _turn(s, 0)  # the pool has its connection now
        pool = st.backend._pool
        for i in range(1, 4):
            with wire.traced(pool) as seen:
                _turn(s, 10 + i)
            assert seen == {"round_trips": 2, "transactions": 1, "commits": 1}
            assert seen["round_trips"] <= 5
            # The server agrees: the two messages and the session row (HEAD, usage) one transaction wrote.
            assert len(_writers_of(pg_url, s.id, s.branch()[-2:])) == 1
        row = st.backend.session_row(s.id)
        assert row["metadata"]["context_window"]["used"] == 1013  # the usage sample went in with the append
        assert len(s.branch()) == 8 and row["head_id"] == s.branch()[-1]
    finally:
        st.close()


def test_the_counter_sees_every_transaction_of_a_command(pg_url):
    """It can count more than one: a rewind reads the row to sync, then writes (and
    the server's count agrees with the trace's)."""
    st = ocw.Store(pg_url)
    try:
        s = st.create_session(name="rw", model="gpt-4o", context_window=100_000)
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
