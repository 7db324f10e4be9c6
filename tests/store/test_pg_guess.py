"""A turn sent whole on the row its kernel wrote last (ocw/store/postgres/guess.py):
one round trip; a chain under HEAD as the server reads it after the lock, numbered
by chain.py's rule; `change`'s columns written only if the row is still the state
guessed — (rev, updated_at); the guess dropped when the store learns the row moved.
Two kernels writing one session flat out, each on its guess after its first turn:
test_store_contract.py's `test_concurrent_appends_to_one_session_form_one_chain`."""
from __future__ import annotations

import pytest

from ocw.bench import wire
from ocw.context.graph import Node
from ocw.store.chain import chain_rows
from ocw.store.postgres import statements as pg_statements
from ocw.store.postgres.guess import Guesses, as_read, guessed_update_sql
from ocw.store.postgres.listen import wait_ready
from ocw.store.postgres.store import PostgresStore
from ocw.text.errors import StoreError
from test_store_contract import msgs, new_session
from waiting import wait_for


@pytest.fixture
def two(pg_url):
    """Two kernels' stores on one database, session s1 made by the first."""
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    new_session(a)
    yield a, b
    a.close()
    b.close()


def _chain(b, sid="s1") -> list[tuple]:
    row = b.session_row(sid)
    return [(n.id, n.parent_id, n.depth, n.cum, n.epoch) for n in b.nodes_since(sid, 0, epoch=row["count_epoch"])]


def _prompt(text):
    return lambda row, parent: {"system_prompt": text}


def _prepared(b) -> int:
    with b._pool.connection() as conn:
        return len(pg_statements.PREPARED.get(conn, ()))


def _guessed(b, sid, nodes, change=None):
    """Append on a guess: what it returns, and its round trips (`_turn`)."""
    assert b._guesses.get(sid) is not None
    return _turn(b, sid, nodes, change)


def _turn(b, sid, nodes, change=None):
    """Append: what it returns, and its round trips — a PREPARE the first time a connection
    needs a statement (a round trip of its own) not counted. (One commit a turn:
    test_pg_round_trips.py.)"""
    before = _prepared(b)
    with wire.traced(b._pool) as seen:
        try:
            got = b.append_nodes(sid, nodes, change)
        finally:
            prepares = _prepared(b) - before
    return got, seen["round_trips"] - prepares


# -- the chain's numbers: chain.py's rule, in SQL -------------------------------------------
def _state(b, case: str) -> None:
    if case == "no HEAD":
        return
    b.append_nodes("s1", msgs(("h1", "user", 3), ("h2", "assistant", 4)))
    if case == "HEAD of an older count epoch":
        b.update_session("s1", lambda row: {"count_epoch": 1})  # HEAD's counts are epoch 0's: stale
    elif case == "HEAD recounted":
        b.set_counts("s1", [("h1", 5, 1, 5, 1, "o200k_base"), ("h2", 6, 2, 11, 1, "o200k_base")],
                     lambda row: {"count_epoch": 1})


@pytest.mark.parametrize("case", ["no HEAD", "HEAD of this count epoch", "HEAD of an older count epoch",
                                  "HEAD recounted"])
def test_a_chain_on_a_guess_is_numbered_as_chain_rows_numbers_it(pg_url, case):
    b = PostgresStore(pg_url)
    try:
        new_session(b)
        _state(b, case)
        row = b.session_row("s1")
        parent = b.node("s1", row["head_id"], row["count_epoch"]) if row["head_id"] else None
        nodes = msgs(("q", "user", 7), ("a", "assistant", 9), ("t", "tool", 2))
        expected, fields = chain_rows(row, parent, nodes, None)
        b._guesses.after_turn("s1", row, parent)
        (new_row, written), trips = _guessed(b, "s1", nodes)
        assert trips == 1
        got = [(n.id, n.parent_id, n.depth, n.cum, n.epoch) for n in written]
        assert got == [(n.id, n.parent_id, n.depth, n.cum, n.epoch) for n in expected]
        assert _chain(b)[-3:] == got  # as stored (HEAD's counts those of the row's epoch)
        assert new_row["head_id"] == fields["head_id"] == "t" and new_row["rev"] == row["rev"] + 1
        assert [n.seq for n in written] == sorted(n.seq for n in written) and written[0].seq > 0
        assert new_row == b.session_row("s1")
    finally:
        b.close()


def test_the_numbers_of_a_chain_on_a_guess_by_case(pg_url):
    """The literals behind the rule's cases: 3 + 4 tokens under no HEAD, a current HEAD, a stale one."""
    b = PostgresStore(pg_url)
    try:
        new_session(b)
        b.append_nodes("s1", msgs(("h1", "user", 3)))  # read first: no guess yet
        b.append_nodes("s1", msgs(("h2", "assistant", 4)))  # on the guess
        assert _chain(b) == [("h1", None, 1, 3, 0), ("h2", "h1", 2, 7, 0)]
        b.update_session("s1", lambda row: {"count_epoch": 1})
        b._guesses.after_turn("s1", b.session_row("s1"), b.node("s1", "h2", 1))
        (_, written), trips = _guessed(b, "s1", msgs(("h3", "user", 5)))
        assert trips == 1 and [(n.parent_id, n.depth, n.cum, n.epoch) for n in written] == [("h2", 3, 12, -1)]
    finally:
        b.close()


# -- another kernel between the guess and the turn ------------------------------------------
def test_a_turn_on_a_guess_another_kernel_outdated_chains_under_its_head_and_writes_no_change(two):
    a, b = two
    a.append_nodes("s1", msgs(("a0", "user", 1)), _prompt("A0"))  # the row read first
    a.append_nodes("s1", msgs(("a1", "user", 2)), _prompt("A1"))  # on the guess
    b.append_nodes("s1", msgs(("b0", "user", 4)), _prompt("B"))  # a has not heard (it does not listen)
    (row, written), trips = _guessed(a, "s1", msgs(("a2", "user", 8)), _prompt("A2"))
    assert trips == 1
    assert [(n.id, n.parent_id, n.depth, n.cum) for n in written] == [("a2", "b0", 4, 15)]  # a chain, not a fork
    assert row["system_prompt"] == "B" and row["head_id"] == "a2" and row["rev"] == 4  # HEAD moved; A2 not written
    assert row == a.session_row("s1")
    assert _chain(a) == [("a0", None, 1, 1, 0), ("a1", "a0", 2, 3, 0), ("b0", "a1", 3, 7, 0), ("a2", "b0", 4, 15, 0)]
    (row, _), trips = _guessed(a, "s1", msgs(("a3", "user", 1)), _prompt("A3"))  # on the row it just read back
    assert trips == 1 and row["system_prompt"] == "A3" and a.session_row("s1")["system_prompt"] == "A3"


def test_a_row_put_back_at_the_same_rev_by_another_path_is_not_the_state_guessed(two):
    """An undo puts an earlier row back whole, rev and updated_at with it; a write from there
    reaches the guessed rev again, at another time: the guess does not hold."""
    a, b = two
    before = b.session_rows(["s1"])["s1"]  # rev 0
    a.append_nodes("s1", msgs(("a0", "user", 1)), _prompt("A0"))  # rev 1: a's guess
    assert b.undo_sessions(restore=[before], delete=[], expect_rev={"s1": 1})  # rev 0, HEAD none
    b.update_session("s1", lambda row: {"system_prompt": "B"})  # rev 1 again
    assert b.session_row("s1")["rev"] == a._guesses.get("s1").row["rev"] == 1
    (row, written), trips = _guessed(a, "s1", msgs(("a1", "user", 2)), _prompt("A1"))
    assert trips == 1 and row["system_prompt"] == "B"  # not the state guessed: A1 not written
    assert [(n.parent_id, n.depth) for n in written] == [(None, 1)]  # under HEAD as it is: none


# -- when the store learns the row moved ------------------------------------------------------
def test_a_read_of_the_row_another_kernel_wrote_drops_the_guess_and_the_turn_reads_it_first(two):
    a, b = two
    a.append_nodes("s1", msgs(("a0", "user", 1)))
    a.append_nodes("s1", msgs(("a1", "user", 1)))
    assert a.session_row("s1")["rev"] == 2 and a._guesses.get("s1") is not None  # as it left it: kept
    b.append_nodes("s1", msgs(("b0", "user", 1)))
    assert a.session_row("s1")["rev"] == 3 and a._guesses.get("s1") is None
    (row, _), trips = _turn(a, "s1", msgs(("a2", "user", 1)), _prompt("A2"))
    assert trips == 2 and row["system_prompt"] == "A2"  # decided on the row as it is


def test_a_kernels_sync_before_its_turn_keeps_the_usage_sample_after_another_kernels_turn(pg_url):
    """What a `%%chat` turn does: sync, then append with the provider's usage. Another
    kernel's turn before the sync: this turn's request saw it, and its sample is stored."""
    import ocw

    k1, k2 = ocw.Store(pg_url), ocw.Store(pg_url)
    try:
        s1 = k1.create_session(name="shared", model="gpt-4o", context_window=100_000)
        s2 = k2.open_session("shared")
        s1.append_many([("user", "q0"), ("assistant", "a0")], usage=1000)
        s1.append_many([("user", "q1"), ("assistant", "a1")], usage=1010)  # k1 holds a guess now
        s2.sync()
        s2.append_many([("user", "q2"), ("assistant", "a2")], usage=1020)
        s1.sync()
        s1.append_many([("user", "q3"), ("assistant", "a3")], usage=1030)
        row = k1.backend.session_row(s1.id)
        assert row["metadata"]["context_window"]["used"] == 1030 and row["head_id"] == s1.branch()[-1]
        assert len(s1.branch()) == 8
    finally:
        k1.close()
        k2.close()


def test_another_kernels_write_heard_drops_the_guess(two):
    a, b = two
    a.watch(lambda sid, rev: None)
    a.follow("s1")
    assert wait_ready(a._listener)
    a.append_nodes("s1", msgs(("a0", "user", 1)))
    assert a._guesses.get("s1") is not None
    b.append_nodes("s1", msgs(("b0", "user", 1)))
    assert wait_for(lambda: a._guesses.get("s1") is None)


def test_this_stores_other_writes_drop_its_guesses(two):
    a, _ = two
    a.append_nodes("s1", msgs(("a0", "user", 1)))
    assert a._guesses.get("s1") is not None
    a.update_session("s1", lambda row: {"system_prompt": "x"})
    assert a._guesses.get("s1") is None


def test_a_failed_turn_on_a_guess_writes_nothing_and_the_next_one_lands(two):
    a, _ = two
    a.append_nodes("s1", msgs(("a0", "user", 1)))
    row = a.session_row("s1")
    with pytest.raises(StoreError, match="refused the write"):
        _guessed(a, "s1", msgs(("a1", "user", 1), ("a0", "user", 1)))  # a duplicate id
    assert a.session_row("s1") == row and [n.id for n in a.nodes_since("s1", 0)] == ["a0"]
    (_, written), trips = _guessed(a, "s1", msgs(("a1", "user", 1)))
    assert trips == 1 and [(n.parent_id, n.depth) for n in written] == [("a0", 2)]


def test_a_session_deleted_after_the_guess_is_one_line_and_nothing_is_written(two):
    a, b = two
    a.append_nodes("s1", msgs(("a0", "user", 1)))
    assert a._guesses.get("s1") is not None
    assert b.delete_session("s1") == 1
    with pytest.raises(StoreError, match=r"^session s1 vanished from "):
        _guessed(a, "s1", msgs(("a1", "user", 1)))
    assert a.node_count("s1") == 0 and a.session_row("s1") is None


# -- the pure pieces -------------------------------------------------------------------------
def test_the_update_on_a_guess_guards_every_column_but_head_and_needs_no_state_without_one():
    cols = ("id", "rev")
    sql, args = guessed_update_sql(cols, {"head_id": "n"}, {"head_id"}, [3, "t"], 77)
    assert "CASE" not in sql and args == ["n", 77]
    assert sql.endswith("RETURNING id, rev, ocw_tell($1::text, $3::integer)")
    sql, args = guessed_update_sql(cols, {"head_id": "n", "metadata": {"k": 1}}, {"head_id", "metadata"},
                                             [3, "t"], 77)
    assert args == ["n", '{"k": 1}', 3, "t", 77]
    assert "head_id = $2, metadata = CASE WHEN rev = $4 AND updated_at = $5 THEN $3::json ELSE metadata END" in sql
    assert sql.endswith("ocw_tell($1::text, $6::integer)")


def test_a_guess_holds_the_row_as_a_read_gives_it():
    row = {"rev": 1, "metadata": {"samples": (1, 2)}}
    got = as_read(row)
    assert got == {"rev": 1, "metadata": {"samples": [1, 2]}} and got["metadata"] is not row["metadata"]
    g = Guesses()
    g.after_turn("s", row, None)
    g.after_turn("t", row, Node("n", 1, None, "user", None, 1))
    assert g.get("s").row["metadata"] == {"samples": [1, 2]}
    g.drop("s")
    assert g.get("s") is None and g.get("t") is not None
    g.drop()
    assert g.get("t") is None
