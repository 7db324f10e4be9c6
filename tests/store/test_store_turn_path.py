"""The store's turn path (issue 14): an append whose session row is the version this
store last saw writes without reading it — two statements, the row update naming the
version it expects — and an append after anyone else wrote reads the row and HEAD's
node first and still chains under the HEAD the file holds."""
from __future__ import annotations

from contextlib import contextmanager

import duckdb
import pytest

import ocw
from ocw.store.duckdb.store import DUCKDB_CONFIG


class Counting:
    """A connection that counts the statements the store runs on it."""

    def __init__(self, con, log):
        self._con, self._log = con, log

    def execute(self, sql, *args):
        self._log.append(" ".join(sql.split()[:2]).upper())
        return self._con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._con, name)


def count_statements(store, monkeypatch) -> list[str]:
    """Every statement the store runs in a transaction is logged (first two words)."""
    log: list[str] = []
    db = store.db
    real = db.transaction

    @contextmanager
    def transaction():
        with real() as con:
            yield Counting(con, log)

    monkeypatch.setattr(db, "transaction", transaction)
    return log


def raw(path: str, sql: str, args=()):
    """Run SQL on the file from outside the store (the store has handed it over)."""
    con = duckdb.connect(path, config=DUCKDB_CONFIG)
    try:
        return con.execute(sql, list(args)).fetchall()
    finally:
        con.close()


def test_a_known_turn_is_two_statements_and_a_stale_one_reads_first(store, monkeypatch):
    s = store.create_session(name="t", model="gpt-4o")
    s.append("user", "first")  # after this the store knows the row and HEAD
    log = count_statements(store, monkeypatch)
    s.append("assistant", "second")
    assert log == ["UPDATE SESSIONS", "INSERT INTO"]
    other = ocw.Store(store.path)  # another store (a second kernel) writes: the row moves
    other.open_session("t").append("user", "from the other store")
    other.close()
    log.clear()
    s.append("user", "third")
    # the update found another version and wrote nothing; then the row and HEAD are read
    assert log == ["UPDATE SESSIONS", "SELECT ID,", "SELECT ID,", "UPDATE SESSIONS", "INSERT INTO"]
    log.clear()
    s.append("assistant", "fourth")
    assert log == ["UPDATE SESSIONS", "INSERT INTO"]  # known again


def test_an_append_lands_under_the_head_another_store_wrote(tmp_db):
    a, b = ocw.Store(tmp_db), ocw.Store(tmp_db)
    try:
        sa = a.create_session(name="shared", model="gpt-4o")
        first = sa.append("user", "a1")
        sa.append("assistant", "a2")
        sb = b.open_session("shared")
        theirs = sb.append("user", "b1")
        mine = sa.append("assistant", "a3")  # A's known HEAD is stale: it must chain under b1
        sa.sync()
        assert sa.node(mine)["parent_id"] == theirs
        assert sa.branch()[0] == first and sa.branch()[-2:] == [theirs, mine]
        with a.db.connect() as con:  # two Dbs of one process took turns: the file is attached to one of them
            rows = dict(con.execute("SELECT id, cum_tokens FROM nodes").fetchall())
            tokens = dict(con.execute("SELECT id, tokens FROM nodes").fetchall())
        assert rows[mine] == rows[theirs] + tokens[mine]  # its running total continues b1's
        sb.sync()
        assert sa.occupancy()["total"] == sb.occupancy()["total"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("change", ["updated_at", "rev"])
def test_a_version_that_differs_in_rev_or_time_alone_is_not_taken_for_the_known_one(store, change):
    """The update names the version by `rev` AND `updated_at`: a row that matches one
    of them but not the other is another version (a cell's undo puts back a row's rev)."""
    s = store.create_session(name="v", model="gpt-4o")
    a = s.append("user", "a")
    b = s.append("assistant", "b")
    store.db.close()  # let another connection at the file
    rev, ts = raw(store.path, "SELECT rev, updated_at FROM sessions WHERE id = ?", [s.id])[0]
    if change == "updated_at":  # same rev, HEAD moved back to a, another time
        raw(store.path, "UPDATE sessions SET head_id = ?, updated_at = updated_at + INTERVAL 1 SECOND WHERE id = ?",
            [a, s.id])
    else:  # same time, HEAD moved back to a, another rev
        raw(store.path, "UPDATE sessions SET head_id = ?, rev = rev + 7, updated_at = ? WHERE id = ?", [a, ts, s.id])
    c = s.append("user", "c")
    assert raw(store.path, "SELECT parent_id FROM nodes WHERE id = ?", [c]) == [(a,)]  # not under b
    assert raw(store.path, "SELECT head_id FROM sessions WHERE id = ?", [s.id]) == [(c,)]
    assert b != a


def test_a_chain_takes_increasing_seqs_in_one_insert(store, monkeypatch):
    s = store.create_session(name="chain", model="gpt-4o")
    s.append("user", "start")
    log = count_statements(store, monkeypatch)
    ids = s.append_many([("user", "q"), ("assistant", "r"), ("user", "q2"), ("assistant", "r2")])
    assert log.count("INSERT INTO") == 1
    seqs = dict(raw_seq(store, ids))
    assert [seqs[i] for i in ids] == sorted(seqs.values()) and len(set(seqs.values())) == 4
    parents = [s.node(i)["parent_id"] for i in ids]
    assert parents[1:] == ids[:-1]


def raw_seq(store, ids):
    with store.db.connect() as con:
        return con.execute("SELECT id, seq FROM nodes WHERE id IN (SELECT unnest(?))", [ids]).fetchall()


def test_a_failed_commit_leaves_no_known_head_behind(store, monkeypatch):
    """The node the store appended last is kept only once committed: a turn whose
    write failed must not become the parent of the next one."""
    s = store.create_session(name="f", model="gpt-4o")
    good = s.append("user", "kept")

    def refuse(row, parent):
        raise RuntimeError("refused inside the transaction")

    with pytest.raises(RuntimeError):
        store.backend.append_nodes(s.id, [{"id": "n_lost", "role": "user", "name": None,
                                           "content": [{"type": "text", "text": "lost"}], "tokens": 3,
                                           "encoding": s.encoding.name}], refuse)
    nxt = s.append("assistant", "after")
    assert s.node(nxt)["parent_id"] == good
    with store.db.connect() as con:
        assert con.execute("SELECT count(*) FROM nodes WHERE id = 'n_lost'").fetchone() == (0,)


# -- the tail's range reads (ocw/store/tail.py), on a real file --------------------------------------------
@pytest.fixture
def long_chain(tmp_path):
    """A session of 700 messages in one chain: more than FIRST_CHUNK (512) below its head."""
    st = ocw.Store(str(tmp_path / "tail.duckdb"))
    s = st.create_session(name="long")
    ids = s.append_many([("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(700)])
    yield st, s, ids
    st.close()


def test_a_fresh_tail_walks_the_whole_branch_across_its_range_reads(long_chain):
    from ocw.store.tail import TailRows

    st, s, ids = long_chain
    tail = TailRows(st.backend, s.id)
    out = tail.ancestors(s.head)
    assert [n.id for n in out] == ids[::-1]  # every message, the first one (depth 1) included
    assert (out[0].depth, out[-1].depth, tail.loaded_from) == (700, 1, 0)


def test_a_short_walk_reads_one_chunk_below_the_head_not_the_whole_session(long_chain):
    """Memory is what the walk needed: 5 messages above a depth read 512 rows below the head, not 700."""
    from ocw.store.tail import TailRows

    st, s, ids = long_chain
    tail = TailRows(st.backend, s.id)
    out = tail.ancestors(s.head, stop_depth=695)
    assert [n.id for n in out] == ids[:-6:-1]
    assert len(tail.rows) == 513 and tail.loaded_from == 700 - 512


def test_a_walk_to_a_known_boundary_reads_just_that_stretch(long_chain):
    """stop_seq (the boundary's seq, known from the summary) brings the stretch in one range read."""
    from ocw.store.tail import TailRows

    st, s, ids = long_chain
    tail = TailRows(st.backend, s.id)
    boundary = tail.get(ids[-6])
    out = tail.ancestors(s.head, stop_depth=boundary.depth, stop_seq=boundary.seq)
    assert [n.id for n in out] == ids[:-6:-1]
    assert tail.loaded_from == boundary.seq and len(tail.rows) == 6


def test_trim_forgets_rows_below_a_new_boundary_and_never_claims_rows_it_lacks(long_chain):
    from ocw.store.tail import TailRows

    st, s, ids = long_chain
    tail = TailRows(st.backend, s.id)
    tail.ancestors(s.head, stop_depth=695)  # rows from seq 188 up
    tail.trim(100)  # below what is loaded: nothing to forget, and rows 100..187 are NOT loaded
    assert tail.loaded_from == 188 and len(tail.rows) == 513
    assert [n.id for n in tail.ancestors(s.head)] == ids[::-1]  # the whole branch still walks
    tail.trim(651)  # a new boundary: rows below it go
    assert tail.loaded_from == 651 and len(tail.rows) == 50
    fresh = TailRows(st.backend, s.id)
    fresh.trim(651)  # nothing loaded yet: trimming loads nothing and claims nothing
    assert fresh.loaded_from == 651 and fresh.rows == {}


def test_a_branch_whose_parent_row_is_gone_ends_the_walk_instead_of_looping(long_chain):
    """A damaged file (a middle row deleted by hand): the walk stops where the rows stop."""
    from ocw.store.tail import TailRows

    st, s, ids = long_chain
    st.backend.close()
    raw(st.backend.path, "DELETE FROM nodes WHERE id = ?", [ids[99]])
    tail = TailRows(st.backend, s.id)
    out = tail.ancestors(s.head)
    assert [n.id for n in out] == ids[:99:-1]  # head down to the 101st message; the 100th is gone
    assert tail.loaded_from == 0


def test_clear_forgets_every_row_so_a_row_gone_from_the_file_is_not_served(long_chain):
    """clear() (the session's history was rewritten elsewhere): nothing read before is served
    again — a row deleted since is looked up afresh and found missing."""
    from ocw.store.tail import TailRows

    st, s, ids = long_chain
    tail = TailRows(st.backend, s.id)
    assert tail.get(ids[-1]) is not None and len(tail.rows) == 1
    with st.db.connect() as con:
        con.execute("DELETE FROM nodes WHERE id = ?", [ids[-1]])
    tail.clear()
    assert tail.rows == {} and tail.loaded_from is None and tail.loaded_to is None
    assert tail.get(ids[-1]) is None
