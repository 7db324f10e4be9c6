"""What the PostgreSQL store adds to the shared contract: the database itself holds
the invariants (constraints and triggers refuse a bad write from any client),
writers are serialised per session and never globally, and the schema has its
own numbered migrations, marker and newer-schema guard."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from ocw.text.errors import ForeignDatabase, InvalidArgument, NewerSchema, StoreError
from ocw.store.postgres import statements as pg_statements
from ocw.store.postgres import migrations as pg_migrations
from ocw.store.postgres.listen import wait_ready
from ocw.store.postgres.schema import SCHEMA_VERSION
from ocw.store.postgres.store import PostgresStore
from test_pg_roles import team  # noqa: F401  (the fixture: alice, bob and carol on a database `ocw db init` made)
from pg_server import OLD_TELL_SQL
from test_store_contract import msgs, new_session, summary
from waiting import wait_for


@pytest.fixture
def pg(pg_url):
    b = PostgresStore(pg_url)
    yield b
    b.close()


def sql(url, query, args=None):
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else None


# -- invariants the database enforces ---------------------------------------------------------
def test_node_rows_cannot_be_updated_by_anyone(pg, pg_url):
    new_session(pg)
    pg.append_nodes("s1", msgs(("a", "user", 3)))
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
        sql(pg_url, "UPDATE nodes SET tokens = 99 WHERE id = 'a'")
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
        sql(pg_url, "UPDATE nodes SET content = '[]'")
    assert sql(pg_url, "SELECT tokens, content FROM nodes") == [(3, '[{"type": "text", "text": "text of a"}]')]


def test_head_is_a_message_of_its_own_session(pg):
    new_session(pg, "s1")
    new_session(pg, "s2")
    pg.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 1)))
    pg.append_nodes("s2", msgs(("x", "user", 1)))
    pg.insert_summary("s1", summary("sum", "a", 1), lambda row: {})
    before = pg.session_row("s1")
    with pytest.raises(StoreError, match="HEAD of session s1 cannot be the summary sum"):
        pg.update_session("s1", lambda row: {"head_id": "sum"})
    with pytest.raises(StoreError, match="refused the write"):
        pg.update_session("s1", lambda row: {"head_id": "x"})  # s2's node
    with pytest.raises(StoreError, match="refused the write"):
        pg.update_session("s1", lambda row: {"head_id": "no-such-node"})
    assert pg.session_row("s1") == before
    assert pg.update_session("s1", lambda row: {"head_id": "a"})["head_id"] == "a"  # a rewind is fine
    assert pg.update_session("s1", lambda row: {"head_id": None})["head_id"] is None


def test_a_column_that_is_not_writable_is_refused_and_nothing_changes(pg):
    new_session(pg, "s1")
    before = pg.session_row("s1")
    for column in ("rev", "id", "owner"):
        with pytest.raises(ValueError, match=f"^not a writable session column: {column}$"):
            pg.update_session("s1", lambda row: {column: 1})
    assert pg.session_row("s1") == before
    assert pg.update_session("s1", lambda row: {"name": "kept"})["rev"] == before["rev"] + 1


def test_a_parent_in_another_session_or_a_wrong_depth_is_refused(pg, pg_url):
    new_session(pg, "s1")
    new_session(pg, "s2")
    pg.append_nodes("s1", msgs(("a", "user", 1)))
    insert = ("INSERT INTO nodes (id, session_id, parent_id, role, content, tokens, depth, cum_tokens, epoch)"
              " VALUES (%s, %s, %s, 'user', '[]', 1, %s, 1, 0)")
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        sql(pg_url, insert, ["b", "s2", "a", 2])  # parent of another session
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="depth 3, its parent a is at depth 1"):
        sql(pg_url, insert, ["b", "s1", "a", 3])
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="depth 2, its parent None|at depth 0"):
        sql(pg_url, insert, ["r", "s1", None, 2])
    sql(pg_url, insert, ["b", "s1", "a", 2])  # the control: the right depth under its own session's node
    assert pg.node_count("s1") == 2 and pg.node_count("s2") == 0


def test_a_summary_under_another_sessions_node_is_refused(pg, pg_url):
    """The summary's parent is held to its session by the depth trigger (p003), as the
    composite key held it before: refused with the key's SQLSTATE."""
    new_session(pg, "s1")
    new_session(pg, "s2")
    pg.append_nodes("s1", msgs(("a", "user", 1)))
    insert = ("INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, epoch, cover_count)"
              " VALUES (%s, %s, %s, 'llm', 'context/summary', '[]', 5, 0, 1)")
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="parent a of node sx is not a node of session s2"):
        sql(pg_url, insert, ["sx", "s2", "a"])
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="parent gone of node sy is not a node"):
        sql(pg_url, insert, ["sy", "s1", "gone"])
    sql(pg_url, insert, ["sz", "s1", "a"])  # the control: under its own session's node
    assert [n.id for n in pg.summaries("s1")] == ["sz"] and pg.summaries("s2") == []


def test_head_is_judged_at_commit_by_the_row_as_it_ends(pg, pg_url):
    """The deferred HEAD check (p003): a row written before its nodes (as a copy is)
    passes once they are in; a HEAD of another session fails at commit, on INSERT and
    UPDATE alike; a value the row no longer holds at commit is not judged."""
    new_session(pg, "s2")
    pg.append_nodes("s2", msgs(("x", "user", 1)))
    row = ("INSERT INTO sessions (id, name, model, context_window, head_id) VALUES (%s, %s, 'gpt-4o', 1000, %s)")
    node = ("INSERT INTO nodes (id, session_id, parent_id, role, content, tokens, depth, cum_tokens, epoch)"
            " VALUES (%s, %s, NULL, 'user', '[]', 1, 1, 1, 0)")
    with psycopg.connect(pg_url) as conn:  # one transaction: the row first, its HEAD node after
        conn.execute(row, ["c1", "copied", "c1-a"])
        conn.execute(node, ["c1-a", "c1"])
    assert pg.session_row("c1")["head_id"] == "c1-a"
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="HEAD x of session c2 is not a node of that session"):
        with psycopg.connect(pg_url) as conn:
            conn.execute(row, ["c2", "stolen", "x"])
    assert pg.session_row("c2") is None
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="HEAD x of session c1 is not a node"):
        with psycopg.connect(pg_url) as conn:
            conn.execute("UPDATE sessions SET head_id = 'x' WHERE id = 'c1'")
    with psycopg.connect(pg_url) as conn:  # moved to s2's node and back before commit: the row ends right
        conn.execute("UPDATE sessions SET head_id = 'x' WHERE id = 'c1'")
        conn.execute("UPDATE sessions SET head_id = 'c1-a' WHERE id = 'c1'")
    assert pg.session_row("c1")["head_id"] == "c1-a"
    with psycopg.connect(pg_url) as conn:  # moved away, then the session deleted: nothing left to judge
        conn.execute("UPDATE sessions SET head_id = 'x' WHERE id = 'c1'")
        conn.execute("DELETE FROM sessions WHERE id = 'c1'")
    assert pg.session_row("c1") is None and pg.session_row("s2")["head_id"] == "x"


def test_every_key_into_nodes_is_its_primary_key(pg, pg_url):
    """p003: the parent, HEAD and recount keys reference nodes(id) alone, and no other
    index on nodes leads with the session but the (session_id, seq) range index — so
    no key check can be planned as a read of the whole session."""
    keys = sql(pg_url, "SELECT conname, conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
                       " WHERE contype = 'f' AND confrelid = 'nodes'::regclass ORDER BY conname")
    assert [(name, table, d.split(" DEFERRABLE")[0]) for name, table, d in keys] == [
        ("node_counts_node_id_fkey", "node_counts", "FOREIGN KEY (node_id) REFERENCES nodes(id) ON DELETE CASCADE"),
        ("nodes_parent_fk", "nodes", "FOREIGN KEY (parent_id) REFERENCES nodes(id)"),
        ("sessions_head_fk", "sessions", "FOREIGN KEY (head_id) REFERENCES nodes(id)")]
    indexes = sql(pg_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'nodes' ORDER BY indexname")
    assert [i for (i,) in indexes] == ["nodes_parent", "nodes_pkey", "nodes_seq_key", "nodes_session_seq"]


def _notified(listener) -> list:
    """The notifications `listener` has received by now (each one's sending pid)."""
    return [n.pid for n in listener.notifies(timeout=0.5)]


def test_a_turn_notifies_only_when_another_kernels_listener_watches_its_session(pg, pg_url):
    """p005: a turn's NOTIFY is sent only if a server process other than the writer's own
    listener watches the session; a watch ends with its process (cleared by the next
    `ocw_watch`) or by `ocw_unwatch`; a watch of a session that is gone is no error.
    Other writes notify whatever the watches (the trigger)."""
    new_session(pg, "s1")
    new_session(pg, "s2")
    ear = psycopg.connect(pg_url, autocommit=True)  # hears every NOTIFY of the database
    other = psycopg.connect(pg_url, autocommit=True)  # another kernel's listener
    own = psycopg.connect(pg_url, autocommit=True)  # this kernel's own listener
    try:
        ear.execute("LISTEN ocw_sessions")
        turn = iter(range(100))

        def append(sid):
            k = next(turn)
            pg.append_nodes(sid, msgs((f"{sid}-{k}", "user", 1)))
            return _notified(ear)

        assert append("s1") == []  # nobody watches: no NOTIFY
        own.execute("SELECT ocw_watch(ARRAY['s1'])")
        pg._watcher = lambda: own.info.backend_pid
        assert append("s1") == []  # only the writer's own listener watches
        other.execute("SELECT ocw_watch(ARRAY['s1', 'gone'])")  # "gone": deleted meanwhile, skipped
        writers = append("s1")
        assert len(writers) == 1 and writers[0] in pg._pool.pids  # once, by the writer
        assert append("s2") == []  # a watch is of its session only
        other.execute("SELECT ocw_unwatch()")
        assert append("s1") == []
        other.execute("SELECT ocw_watch(ARRAY['s1'])")
        assert len(append("s1")) == 1
        gone_pid = other.info.backend_pid
        other.close()  # its process ends; its watch row stays until the next ocw_watch clears it
        assert wait_for(lambda: sql(pg_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [gone_pid]) == [(0,)])
        own.execute("SELECT ocw_watch(ARRAY['s1'])")
        assert append("s1") == []
        assert sql(pg_url, "SELECT count(*) FROM session_watchers WHERE pid = %s", [gone_pid]) == [(0,)]
        pg.update_session("s2", lambda r: {"system_prompt": "new"})  # not a turn: the trigger, watched or not
        assert len(_notified(ear)) == 1
    finally:
        for c in (ear, other, own):
            c.close()


def test_a_turn_notifies_each_watcher_on_its_own_channel_and_an_older_ones_on_the_shared_one(pg, pg_url):
    """p007: `ocw_notify` sends one NOTIFY per channel of the session's other watchers —
    a watch recorded without a channel (an ocw from before p007) on `ocw_sessions` —
    and nothing to a watcher of another session. A channel is a plain name of 1 to 63
    characters: any other is refused when recorded, so none can fail a writer's NOTIFY."""
    new_session(pg, "s1")
    new_session(pg, "s2")
    chan = {k: f"ocw_sessions_{k * 16}" for k in "ab"}
    one, two, old = (psycopg.connect(pg_url, autocommit=True) for _ in range(3))
    try:
        one.execute(f"LISTEN {chan['a']}")
        one.execute("SELECT ocw_watch(ARRAY['s1'], %s)", [chan["a"]])
        two.execute(f"LISTEN {chan['b']}")
        two.execute("SELECT ocw_watch(ARRAY['s2'], %s)", [chan["b"]])
        old.execute("LISTEN ocw_sessions")
        old.execute("SELECT ocw_watch(ARRAY['s1'])")
        pg.append_nodes("s1", msgs(("a", "user", 1)))
        writer = [n.pid for n in one.notifies(timeout=10, stop_after=1)]
        assert len(writer) == 1 and writer[0] in pg._pool.pids
        assert [(n.channel, n.pid) for n in old.notifies(timeout=10, stop_after=1)] == [("ocw_sessions", writer[0])]
        two.execute(f"NOTIFY {chan['b']}, 'end'")  # after the turn: anything of the turn's would come first
        assert [n.payload for n in two.notifies(timeout=10, stop_after=1)] == ["end"]
        for bad in ("Upper", "with-dash", "x" * 64, ""):
            with pytest.raises(psycopg.errors.CheckViolation):
                two.execute("SELECT ocw_watch(ARRAY['s1'], %s)", [bad])
        two.execute("SELECT ocw_watch(ARRAY['s1'], %s)", ["x" * 63])  # the longest name there is
        assert sql(pg_url, "SELECT channel FROM session_watchers WHERE pid = %s AND session_id = 's1'",
                   [two.info.backend_pid]) == [("x" * 63,)]
    finally:
        for c in (one, two, old):
            c.close()


def _told(url, pid) -> list:
    return sql(url, "SELECT told FROM session_watchers WHERE pid = %s", [pid])


def test_a_watcher_is_told_of_turns_once_until_it_says_it_has_heard(pg, pg_url):
    """p008: a turn tells a watcher that has heard everything (`told` false): one NOTIFY
    on its channel, and `told` set; later turns tell it nothing until its `ocw_heard`. A
    watch an older ocw recorded (`told` NULL: it never says it heard) is told of every
    turn, on `ocw_sessions`. A turn that fails tells no one and leaves the mark as it was."""
    new_session(pg, "s1")
    chan = "ocw_sessions_" + "c" * 16
    new, old = (psycopg.connect(pg_url, autocommit=True) for _ in range(2))
    try:
        new.execute(f"LISTEN {chan}")
        new.execute("SELECT ocw_watch(ARRAY['s1'], %s)", [chan])
        new.execute("SELECT ocw_heard()")
        old.execute("LISTEN ocw_sessions")
        old.execute("SELECT ocw_watch(ARRAY['s1'])")
        assert _told(pg_url, new.info.backend_pid) == [(False,)] and _told(pg_url, old.info.backend_pid) == [(None,)]
        for k in range(3):
            pg.append_nodes("s1", msgs((f"a{k}", "user", 1)))
        assert len(_notified(new)) == 1 and len(_notified(old)) == 3
        assert _told(pg_url, new.info.backend_pid) == [(True,)] and _told(pg_url, old.info.backend_pid) == [(None,)]
        new.execute("SELECT ocw_heard()")
        assert _told(pg_url, new.info.backend_pid) == [(False,)]
        with pytest.raises(StoreError, match="refused the write"):
            pg.append_nodes("s1", msgs(("a0", "user", 1)))  # a duplicate id: rolled back, its NOTIFYs with it
        assert _notified(new) == [] and _notified(old) == []
        assert _told(pg_url, new.info.backend_pid) == [(False,)]
        pg.append_nodes("s1", msgs(("b", "user", 1)))
        pg.append_nodes("s1", msgs(("c", "user", 1)))
        assert len(_notified(new)) == 1 and len(_notified(old)) == 2
    finally:
        new.close()
        old.close()


def _head_read_after(pg, pg_url, listener, statement: str) -> str:
    """Append "b" to s1; between its two round trips (the session locked, its HEAD statement
    run) `listener` runs `statement` on a thread of its own, which must wait on a lock
    (pg_stat_activity) and not have returned yet; then it reads s1's HEAD. Returns what it
    read, once the turn has committed."""
    seen = []

    def run_then_read():
        listener.execute(statement)
        seen.append(listener.execute("SELECT head_id FROM sessions WHERE id = 's1'").fetchone()[0])

    thread = threading.Thread(target=run_then_read)
    pid = listener.info.backend_pid

    def change(row, parent):
        thread.start()
        assert wait_for(lambda: sql(pg_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                    [pid]) == [("Lock",)])
        assert not seen  # still waiting for this turn
        return None

    pg._guesses.drop()  # the turn that reads the row first: `change` runs between its round trips
    pg.append_nodes("s1", msgs(("b", "user", 1)), change)
    thread.join(15)
    assert len(seen) == 1, "the statement never returned"
    return seen[0]


def test_a_watcher_saying_it_heard_waits_for_a_turn_that_found_it_told_already(pg, pg_url):
    """p008's invariant: a turn that finds a watcher told already sends it nothing, so if
    that watcher says it heard while the turn holds the session, its `ocw_heard` waits
    for the turn's commit (the turn locked its row) and the re-read after it sees the
    turn. The next turn tells it again."""
    new_session(pg, "s1")
    chan = "ocw_sessions_" + "d" * 16
    other = psycopg.connect(pg_url, autocommit=True)  # another kernel's listener
    try:
        other.execute(f"LISTEN {chan}")
        other.execute("SELECT ocw_watch(ARRAY['s1'], %s)", [chan])
        other.execute("SELECT ocw_heard()")
        pg.append_nodes("s1", msgs(("a", "user", 1)))
        assert len(_notified(other)) == 1  # told: not told again until it has heard
        assert _head_read_after(pg, pg_url, other, "SELECT ocw_heard()") == "b"  # after the turn's commit
        assert _notified(other) == []  # the turn found it told: nothing sent, nothing missed
        pg.append_nodes("s1", msgs(("c", "user", 1)))
        assert len(_notified(other)) == 1  # it has heard: told again
    finally:
        other.close()


def test_a_watch_recorded_while_a_turn_holds_its_session_beside_a_dead_one_waits_without_a_deadlock(pg, pg_url):
    """p008: a turn locks every other watch of its session (`ocw_tell`), one of a process
    that has ended too; `ocw_watch` clears those. It clears them last: clearing first, a
    kernel recording its watch while a turn held the session would hold the dead watch's
    row while it waited for the session, and the turn would wait for that row."""
    new_session(pg, "s1")
    sql(pg_url, "INSERT INTO session_watchers (session_id, pid, told) VALUES ('s1', 999999, false)")  # died, left it
    turn = psycopg.connect(pg_url)
    listener = psycopg.connect(pg_url, autocommit=True)
    errors = []

    def watch():
        try:
            listener.execute("SELECT ocw_watch(ARRAY['s1'], %s)", ["ocw_sessions_" + "e" * 16])
        except psycopg.Error as e:
            errors.append(e)

    try:
        turn.execute("SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE")  # a turn's first statement
        recorder = threading.Thread(target=watch)
        recorder.start()
        pid = listener.info.backend_pid
        assert wait_for(lambda: sql(pg_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                    [pid]) == [("Lock",)])
        turn.execute("SELECT ocw_tell('s1', 0)")  # its next: every other watch locked, the dead one too
        turn.commit()
        recorder.join(15)
        assert errors == []
        assert sql(pg_url, "SELECT session_id, pid FROM session_watchers") == [("s1", pid)]
    finally:
        turn.close()
        listener.close()


def test_a_watch_recorded_while_a_turn_holds_its_session_waits_for_the_turns_commit(pg, pg_url):
    """A turn tells its session's watchers under the session's lock, before its commit
    (ocw/store/postgres/append.py). Another kernel recording its watch meanwhile is held
    until that commit (its foreign key takes the row FOR KEY SHARE, which waits for FOR
    UPDATE), so its re-read after recording sees the turn — which, having found no
    watcher, did not notify. The next turn finds the watch and notifies."""
    new_session(pg, "s1")
    pg.append_nodes("s1", msgs(("a", "user", 1)))
    ear = psycopg.connect(pg_url, autocommit=True)
    other = psycopg.connect(pg_url, autocommit=True)  # another kernel's listener
    try:
        ear.execute("LISTEN ocw_sessions")
        assert _head_read_after(pg, pg_url, other, "SELECT ocw_watch(ARRAY['s1'])") == "b"  # after the commit
        assert _notified(ear) == []  # the turn saw no watcher: nothing sent, nothing missed
        pg.append_nodes("s1", msgs(("c", "user", 1)))
        assert len(_notified(ear)) == 1  # the next turn sees the watch
    finally:
        ear.close()
        other.close()


def test_every_committed_change_notifies_once_and_a_turn_after_its_commit(pg, pg_url):
    """p004: an append sends its NOTIFY after its COMMIT (the trigger stands down for
    that transaction only), once; a change by any other statement or client is
    still notified by the trigger; a write that fails notifies nothing. (The
    listener watches s1, as another kernel with it open does: p005.)"""
    new_session(pg, "s1")
    listener = psycopg.connect(pg_url, autocommit=True)
    try:
        listener.execute("LISTEN ocw_sessions")
        listener.execute("SELECT ocw_watch(ARRAY['s1'])")
        row, _ = pg.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 1)))
        writers = _notified(listener)
        assert len(writers) == 1 and writers[0] in pg._pool.pids
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("UPDATE sessions SET rev = rev + 1 WHERE id = 's1'")  # any client: the trigger
            assert _notified(listener) == [other.info.backend_pid]
            with other.transaction():  # a transaction that promised to notify itself: the trigger stands down
                other.execute("SELECT set_config('ocw.notify_after_commit', 'on', true)")
                other.execute("UPDATE sessions SET rev = rev + 1 WHERE id = 's1'")
            assert _notified(listener) == []
            other.execute("UPDATE sessions SET rev = rev + 1 WHERE id = 's1'")  # the promise ended with it
            assert _notified(listener) == [other.info.backend_pid]
        pg.update_session("s1", lambda r: {"system_prompt": "new"})  # the store's other writes: the trigger
        assert len(_notified(listener)) == 1
        with pytest.raises(StoreError, match="refused the write"):
            pg.append_nodes("s1", msgs(("a", "user", 1)))  # a duplicate id: nothing committed
        assert _notified(listener) == []
        assert pg.session_row("s1")["head_id"] == "b"
    finally:
        listener.close()


def test_generation_and_compaction_count_never_go_down(pg):
    new_session(pg)
    pg.update_session("s1", lambda row: {"occupancy_generation": 3,
                                         "metadata": {**row["metadata"], "context_compaction_count": 2}})
    with pytest.raises(StoreError, match="occupancy generation of session s1 cannot go down \\(3 -> 2\\)"):
        pg.update_session("s1", lambda row: {"occupancy_generation": 2})
    with pytest.raises(StoreError, match="compaction count of session s1 cannot go down"):
        pg.update_session("s1", lambda row: {"metadata": {"context_compaction_count": 1}})
    with pytest.raises(StoreError, match="compaction count"):
        pg.update_session("s1", lambda row: {"metadata": {}})  # dropping the key is going down too
    row = pg.session_row("s1")
    assert (row["occupancy_generation"], row["metadata"]["context_compaction_count"], row["rev"]) == (3, 2, 1)
    # Equal and higher pass (a rewind keeps both; a compaction raises both).
    pg.update_session("s1", lambda row: {"occupancy_generation": 3, "metadata": {"context_compaction_count": 2}})
    assert pg.update_session("s1", lambda row: {"occupancy_generation": 4})["occupancy_generation"] == 4


def test_a_summary_needs_a_boundary_and_a_count(pg, pg_url):
    new_session(pg)
    pg.append_nodes("s1", msgs(("a", "user", 1)))
    with pytest.raises(StoreError, match="refused the write"):
        pg.insert_summary("s1", summary("s", "a", 0), lambda row: {})  # covers nothing
    assert pg.summaries("s1") == [] and pg.session_row("s1")["rev"] == 1


# -- per-session serialisation, never global ---------------------------------------------------
def test_a_held_session_blocks_only_its_own_writers(pg, pg_url):
    """Another client holds session A's row lock (an open transaction). A write to
    session B goes through meanwhile; a write to A waits, and when the holder
    commits a HEAD move, the waiting append lands under the HEAD it re-read."""
    new_session(pg, "A")
    new_session(pg, "B")
    pg.append_nodes("A", msgs(("a1", "user", 1), ("a2", "assistant", 1)))
    holder = psycopg.connect(pg_url)
    holder.execute("SELECT * FROM sessions WHERE id = 'A' FOR UPDATE")
    done = {}

    def write(sid, nid):
        pg.append_nodes(sid, msgs((nid, "user", 1)))
        done[sid] = time.monotonic()

    ta = threading.Thread(target=write, args=("A", "a3"))
    tb = threading.Thread(target=write, args=("B", "b1"))
    ta.start()
    tb.start()
    tb.join(20)
    assert "B" in done and "A" not in done  # B did not wait for A's lock
    watcher = psycopg.connect(pg_url, autocommit=True)
    deadline = time.monotonic() + 20
    while not watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
        assert time.monotonic() < deadline, "A's write never queued on the row lock"
        time.sleep(0.01)  # polling the server's lock table; the condition is the queued lock
    watcher.close()
    assert "A" not in done and ta.is_alive()  # A waits while the lock is held
    holder.execute("UPDATE sessions SET head_id = 'a1', rev = rev + 1 WHERE id = 'A'")  # a rewind, committed next
    holder.commit()
    ta.join(20)
    holder.close()
    assert "A" in done
    assert pg.node("A", "a3").parent_id == "a1"  # under the HEAD its transaction re-read, not a2
    assert pg.session_row("A")["head_id"] == "a3" and pg.session_row("A")["rev"] == 3


def test_ctrl_c_during_a_turns_write_leaves_the_session_as_it_was_and_the_connection_usable(pg, pg_url):
    """Ctrl-C while a turn's write waits on another client's lock (the first round
    trip's pipeline is in flight): the server cancels it, KeyboardInterrupt reaches the
    caller, nothing is written, and the pooled connection is out of pipeline mode and
    idle — the next turn goes through on it."""
    import signal

    new_session(pg, "A")
    pg.append_nodes("A", msgs(("a1", "user", 1)))
    holder = psycopg.connect(pg_url)
    holder.execute("SELECT * FROM sessions WHERE id = 'A' FOR UPDATE")
    main = threading.get_ident()

    def interrupt_once_queued():
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            deadline = time.monotonic() + 20
            while not watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)  # polling the server's lock table; the condition is the queued lock
        signal.pthread_kill(main, signal.SIGINT)

    t = threading.Thread(target=interrupt_once_queued)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pg.append_nodes("A", msgs(("a2", "assistant", 1)))
    finally:
        t.join(30)
        holder.rollback()
        holder.close()
    (conn, _), = pg._pool._idle
    assert conn.pgconn.pipeline_status == 0 and conn.info.transaction_status == conn.info.transaction_status.IDLE
    assert [n.id for n in pg.nodes_since("A", 0)] == ["a1"] and pg.session_row("A")["rev"] == 1
    row, written = pg.append_nodes("A", msgs(("a3", "assistant", 1)))
    assert [n.id for n in written] == ["a3"] and row["rev"] == 2 and pg.node("A", "a3").parent_id == "a1"


# -- schema: migrations, marker, guards -------------------------------------------------------------
def test_a_new_database_is_marked_and_migrated_once(pg_url):
    PostgresStore(pg_url).close()
    assert sql(pg_url, "SELECT version FROM schema_version ORDER BY version") == [(v,) for v in
                                                                                 range(1, SCHEMA_VERSION + 1)]
    meta = dict(sql(pg_url, "SELECT key, value FROM ocw_meta"))
    assert meta["app"] == "ocw" and meta["schema_version"] == str(SCHEMA_VERSION) and meta["needs_ocw"]
    b = PostgresStore(pg_url)  # reopening applies nothing again
    new_session(b)
    b.close()
    assert len(sql(pg_url, "SELECT version FROM schema_version")) == SCHEMA_VERSION == 8
    assert sql(pg_url, "SELECT id FROM sessions") == [("s1",)]


def test_a_schema_5_database_upgrades_to_a_plpgsql_watch_check_that_answers_as_before(pg_url, monkeypatch):
    """p006: `ocw_watched` (p005's SQL function) becomes PL/pgSQL — still SECURITY DEFINER,
    with its fixed search_path and its owner — and answers as before: watched by another
    process only."""
    from ocw.store.postgres import schema as pg_schema

    def check():
        return sql(pg_url, "SELECT l.lanname, p.prosecdef, p.proconfig, pg_get_userbyid(p.proowner) FROM pg_proc p"
                           " JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'ocw_watched'")

    with monkeypatch.context() as m:
        m.setattr(pg_schema, "MIGRATIONS", pg_migrations.MIGRATIONS[:5])
        m.setattr(pg_schema, "SCHEMA_VERSION", 5)
        PostgresStore(pg_url).close()
    (lang, definer, config, owner), = check()
    assert (lang, definer, config) == ("sql", True, ["search_path=public, pg_temp"])
    b = PostgresStore(pg_url)
    try:
        assert check() == [("plpgsql", True, ["search_path=public, pg_temp"], owner)]
        new_session(b)
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("SELECT ocw_watch(ARRAY['s1'])")
            pid = other.info.backend_pid
            asked = "SELECT ocw_watched(%s, %s)"
            assert [sql(pg_url, asked, [sid, own])[0][0] for sid, own in
                    (("s1", 0), ("s1", pid), ("s2", 0))] == [True, False, False]
    finally:
        b.close()


def test_a_schema_7_database_takes_its_ocws_watches_and_upgrades_to_telling_them_of_every_turn(pg_url, monkeypatch):
    """A database at schema 7 has what that ocw calls: `ocw_watch(ids, channel)` (p007).
    Upgraded (p008), a watch that ocw recorded (`told` NULL: it never says it heard) is
    told of every turn, on its own channel."""
    from ocw.store.postgres import schema as pg_schema

    chan = "ocw_sessions_" + "f" * 16
    with monkeypatch.context() as m:
        m.setattr(pg_schema, "MIGRATIONS", pg_migrations.MIGRATIONS[:7])
        m.setattr(pg_schema, "SCHEMA_VERSION", 7)
        m.setattr(pg_statements, "TELL_SQL", OLD_TELL_SQL)  # that ocw's turn
        old = PostgresStore(pg_url)
        new_session(old)
        old.close()
    watcher = psycopg.connect(pg_url, autocommit=True)
    try:
        watcher.execute(f"LISTEN {chan}")
        watcher.execute("SELECT ocw_watch(ARRAY['s1'], %s)", [chan])
        assert sql(pg_url, "SELECT session_id, channel FROM session_watchers") == [("s1", chan)]
        b = PostgresStore(pg_url)
        try:
            assert sql(pg_url, "SELECT max(version) FROM schema_version") == [(8,)]
            assert _told(pg_url, watcher.info.backend_pid) == [(None,)]
            b.append_nodes("s1", msgs(("a", "user", 1)))
            b.append_nodes("s1", msgs(("b", "user", 1)))
            assert len(_notified(watcher)) == 2
        finally:
            b.close()
    finally:
        watcher.close()


def test_a_schema_2_database_upgrades_and_its_branch_takes_new_turns(pg_url, monkeypatch):
    """p003 on a database with rows: the keys are rebuilt over them, the branch reads
    as before, and the next append lands under the old HEAD with the new checks."""
    from ocw.store.postgres import schema as pg_schema

    with monkeypatch.context() as m:
        m.setattr(pg_schema, "MIGRATIONS", pg_migrations.MIGRATIONS[:2])
        m.setattr(pg_statements, "TELL_SQL", OLD_TELL_SQL)  # that ocw's turn
        m.setattr(pg_schema, "SCHEMA_VERSION", 2)
        old = PostgresStore(pg_url)
        new_session(old)
        old.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 2)))
        old.close()
    assert sql(pg_url, "SELECT value FROM ocw_meta WHERE key = 'schema_version'") == [("2",)]
    b = PostgresStore(pg_url)
    try:
        assert sql(pg_url, "SELECT version FROM schema_version ORDER BY version") == [(1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)]
        assert [(n.id, n.parent_id, n.depth) for n in b.nodes_since("s1", 0)] == [("a", None, 1), ("b", "a", 2)]
        row, written = b.append_nodes("s1", msgs(("c", "user", 1)))
        assert (row["head_id"], written[0].parent_id, written[0].depth) == ("c", "b", 3)
    finally:
        b.close()
    assert sql(pg_url, "SELECT count(*) FROM pg_constraint WHERE conname = 'nodes_session_id_id_key'") == [(0,)]


def _opener(url, stores: list, errors: list):
    """A kernel opening the store (in a thread): the store, or its error, appended."""
    def open_it():
        try:
            stores.append(PostgresStore(url))
        except Exception as e:  # pragma: no cover - shown by the assertion
            errors.append(e)
    return open_it


def test_two_kernels_opening_a_new_database_at_once_both_work(pg_url):
    stores, errors = [], []
    open_it = _opener(pg_url, stores, errors)
    threads = [threading.Thread(target=open_it) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and len(stores) == 3
    assert sql(pg_url, "SELECT count(*) FROM schema_version") == [(SCHEMA_VERSION,)]
    for s in stores:
        s.close()


def objects(url):
    return sql(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")


def test_another_applications_database_is_refused_untouched(pg_url):
    sql(pg_url, "CREATE TABLE invoices (id int)")
    with pytest.raises(ForeignDatabase, match=r"is another application's database \(it holds invoices\)"):
        PostgresStore(pg_url)
    assert objects(pg_url) == [("invoices",)]
    # A marker of someone else's app is foreign too.
    sql(pg_url, "DROP TABLE invoices")
    sql(pg_url, "CREATE TABLE ocw_meta (key text, value text)")
    sql(pg_url, "INSERT INTO ocw_meta VALUES ('app', 'notocw')")
    with pytest.raises(ForeignDatabase):
        PostgresStore(pg_url)
    assert objects(pg_url) == [("ocw_meta",)]


def test_a_newer_ocws_database_is_refused_with_the_version_it_needs(pg_url):
    PostgresStore(pg_url).close()
    sql(pg_url, "UPDATE ocw_meta SET value = %s WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    sql(pg_url, "UPDATE ocw_meta SET value = '9.1.0' WHERE key = 'needs_ocw'")
    sql(pg_url, "UPDATE ocw_meta SET value = '9.2.0' WHERE key = 'written_by'")
    with pytest.raises(NewerSchema, match=f"written by ocw 9.2.0 \\(PostgreSQL schema {SCHEMA_VERSION + 1}\\)") as e:
        PostgresStore(pg_url)
    assert "9.1.0" in e.value.hint
    assert dict(sql(pg_url, "SELECT key, value FROM ocw_meta"))["written_by"] == "9.2.0"  # nothing rewritten
    # At exactly this version it opens (the boundary's other side).
    sql(pg_url, "UPDATE ocw_meta SET value = %s WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
    PostgresStore(pg_url).close()


def test_ocw_can_live_in_its_own_schema_beside_other_tables(pg_url):
    sql(pg_url, "CREATE TABLE invoices (id int)")
    sql(pg_url, "CREATE SCHEMA ocw")
    url = pg_url + "?options=-csearch_path%3Docw"
    b = PostgresStore(url)
    new_session(b)
    b.close()
    assert sql(pg_url, "SELECT id FROM ocw.sessions") == [("s1",)] and objects(pg_url) == [("invoices",)]


# -- connections --------------------------------------------------------------------------------------
def kill_ocw_connections(url) -> int:
    """Terminate ocw's connections and wait until their backends are gone. pg_terminate_backend
    only sends the signal: a test that wrote at once could find the socket still open
    (seen failing once in a CI run) — which is not "a connection the server closed"."""
    rows = sql(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'ocw %' AND datname = current_database()")
    deadline = time.monotonic() + 10
    while sql(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'ocw %'"
                   " AND datname = current_database()")[0][0]:
        assert time.monotonic() < deadline, "ocw's connections were still open 10 s after pg_terminate_backend"
        time.sleep(0.02)
    return len(rows)


def test_a_connection_dropped_between_cells_is_replaced(pg, pg_url, monkeypatch):
    from ocw.store.postgres import conn as pg_conn

    new_session(pg)
    monkeypatch.setattr(pg_conn, "CHECK_AFTER", 0.0)  # as if the kernel sat idle for a while
    before = pg._pool.connects
    assert kill_ocw_connections(pg_url) >= 1
    assert pg.session_row("s1")["id"] == "s1"  # checked, found dead, replaced: no error
    assert pg._pool.connects == before + 1


def test_a_connection_dropped_mid_burst_is_replaced_without_an_error(pg, pg_url, monkeypatch):
    """Issue 25: a kept connection the server closed a moment ago (within CHECK_AFTER)
    is seen closed by a zero-wait poll of its socket and replaced; it used to fail
    the next write once with "is the PostgreSQL server running?"."""
    from ocw.store.postgres import conn as pg_conn

    new_session(pg)
    monkeypatch.setattr(pg_conn, "CHECK_AFTER", 1e9)  # no timed check: the poll alone
    assert kill_ocw_connections(pg_url) >= 1
    before = pg._pool.connects
    row, _ = pg.append_nodes("s1", msgs(("a", "user", 1)))
    assert row["head_id"] == "a" and pg.node_count("s1") == 1 and pg._pool.connects == before + 1


# -- what is read back ------------------------------------------------------------------------
def test_a_nodes_name_and_counts_are_read_back_as_written(pg, pg_url):
    new_session(pg)
    chain = msgs(("a", "user", 3), ("b", "tool", 4))
    chain[1]["name"] = "lookup"  # a tool result names its tool
    pg.append_nodes("s1", chain)
    pg.insert_summary("s1", summary("sum", "a", 1), lambda row: {})
    other = PostgresStore(pg_url)  # nothing cached
    try:
        b = other.node("s1", "b")
        assert (b.id, b.parent_id, b.role, b.name, b.tokens, b.depth, b.cum, b.epoch) == \
            ("b", "a", "tool", "lookup", 4, 2, 7, 0)
        assert [(n.id, n.name) for n in other.nodes_since("s1", 0)] == [("a", None), ("b", "lookup"),
                                                                        ("sum", "context/summary")]
        assert [(n.is_summary, n.parent_id, n.depth, n.cum, n.epoch, n.cover_count) for n in other.summaries("s1")] \
            == [(True, "a", None, None, 0, 1)]  # beside the branch: no depth or total, of the session's epoch
        assert other.content("s1", other.nodes_since("s1", 0)) == {
            "a": [{"type": "text", "text": "text of a"}], "b": [{"type": "text", "text": "text of b"}],
            "sum": [{"type": "text", "text": "sum"}]}
        assert other.content("s1", []) == {}
    finally:
        other.close()


def test_watch_hears_other_connections_commits_not_its_own(pg, pg_url):
    """Notifications come in commit order on one connection: once the later one is
    heard, this store's own commit in between would have been too. The trigger's
    notification carries no payload (schema p002): "some session changed", (None, None);
    one with a payload (as p001's trigger sent) is passed on as (session, rev)."""
    new_session(pg)
    heard = []
    pg.watch(lambda sid, rev: heard.append((sid, rev)))
    other = PostgresStore(pg_url)
    try:
        assert wait_ready(pg._listener)
        deadline = time.monotonic() + 10
        other.update_session("s1", lambda row: {"model": "gpt-4.1"})
        while len(heard) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heard == [(None, None)]
        pg.update_session("s1", lambda row: {"model": "gpt-4o"})  # our own commit: not heard
        sql(pg_url, "SELECT pg_notify('ocw_sessions', 's1 7')")
        while len(heard) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heard == [(None, None), ("s1", 7)]
    finally:
        other.close()


def test_a_new_session_refuses_to_archive_a_holder_that_moved_meanwhile(pg):
    """`%new` files the name's holder away and creates the new session in one
    transaction — only if the name is still held by the session it read."""
    new_session(pg, "s1", name="notes")
    pg.update_session("s1", lambda row: {"name": "renamed"})  # another kernel, meanwhile
    row = {"id": "s2", "name": "notes", "provider": "offline", "model": "gpt-4o", "context_window": 1000,
           "system_prompt": "", "metadata": {}}
    for archive in (("s1", "notes-1"), ("s9", "notes-1")):
        with pytest.raises(StoreError, match="the session named 'notes' changed meanwhile; nothing was created"):
            pg.insert_session(row, archive=archive)
        assert pg.session_row("s1")["name"] == "renamed" and pg.session_row("s2") is None
    pg.update_session("s1", lambda row: {"name": "notes"})
    assert pg.insert_session(row, archive=("s1", "notes-1"))["name"] == "notes"
    assert pg.session_row("s1")["name"] == "notes-1"


def test_undo_puts_rows_back_only_if_nothing_was_written_since(pg):
    """A cell's undo (%new undone, say): the rows as they were, the new session gone —
    only while every session is still at the rev the undo expects."""
    new_session(pg, "s1", name="notes")
    before = pg.session_rows(["s1"])["s1"]
    pg.update_session("s1", lambda row: {"name": "notes-1"})
    new_session(pg, "s2", name="notes")
    now = {sid: r["rev"] for sid, r in pg.session_rows(["s1", "s2"]).items()}
    stale = {"s1": now["s1"] - 1, "s2": now["s2"]}
    assert pg.undo_sessions(restore=[before], delete=["s2"], expect_rev=stale) is False
    assert pg.session_row("s1")["name"] == "notes-1" and pg.session_row("s2") is not None  # untouched
    assert pg.undo_sessions(restore=[before], delete=["s2"], expect_rev=now) is True
    assert pg.session_row("s1")["name"] == "notes" and pg.session_row("s2") is None
    assert pg.session_row("s1")["metadata"] == {"context_compaction_count": 0}  # its JSON text put back as JSON
    rev = pg.session_row("s1")["rev"]
    again = dict(before, metadata={"context_compaction_count": 3})  # a row with metadata as a dict
    assert pg.undo_sessions(restore=[again], delete=[], expect_rev={"s1": rev}) is True
    assert pg.session_row("s1")["metadata"] == {"context_compaction_count": 3}


def test_reads_without_an_epoch_are_of_epoch_0_beside_a_recount(pg, pg_url):
    """A node recounted for another epoch (a model with another tokenizer) keeps its own
    counts: a read that names no epoch gets epoch 0's, one that names 1 the recount."""
    new_session(pg)
    pg.append_nodes("s1", msgs(("a", "user", 3), ("b", "assistant", 4)))
    row = pg.set_counts("s1", [("a", 30, 1, 30, 1, "cl100k_base"), ("b", 40, 2, 70, 1, "cl100k_base")],
                        lambda row: {"count_epoch": 1})  # the session moves to the recount's epoch with it
    assert row["count_epoch"] == 1 and pg.session_row("s1")["count_epoch"] == 1
    assert pg.set_counts("s1", [], lambda row: None)["count_epoch"] == 1  # nothing to change: the row as it is
    other = PostgresStore(pg_url)
    try:
        assert [(n.tokens, n.cum, n.epoch) for n in (other.node("s1", "b"), other.leaves("s1")[0])] == \
            [(4, 7, 0), (4, 7, 0)]
        assert [(n.tokens, n.cum, n.epoch) for n in (other.node("s1", "b", 1), other.leaves("s1", 1)[0])] == \
            [(40, 70, 1), (40, 70, 1)]
    finally:
        other.close()


def test_a_session_shared_with_you_is_not_yours_to_delete(team):
    """Row security hides the DELETE's refusal (0 rows): the store says why, in one line,
    and nothing goes; a session that is not there at all deletes nothing, as DuckDB's."""
    alice, bob = PostgresStore(team.url(team.alice)), PostgresStore(team.url(team.bob))
    try:
        new_session(alice, "plan-1", name="plan")
        alice.append_nodes("plan-1", msgs(("a", "user", 3)))
        alice.share_session("plan-1", team.bob)
        with pytest.raises(StoreError, match=f"session 'plan' is shared with you by {team.alice}; only its owner "
                                             "deletes it, nothing was deleted"):
            bob.delete_session("plan-1")
        assert alice.node_count("plan-1") == 1 and bob.session_row("plan-1") is not None
        assert bob.delete_session("no-such-session") == 0
        assert alice.delete_session("plan-1") == 1 and alice.session_row("plan-1") is None
    finally:
        alice.close()
        bob.close()


def test_a_search_path_naming_no_schema_is_refused_in_one_line(pg_url):
    with pytest.raises(ForeignDatabase) as e:
        PostgresStore(pg_url + "?options=-csearch_path%3Dnowhere")
    assert "has no schema to write to (search_path names none that exists)" in str(e.value)
    assert "create the schema, or fix search_path" in e.value.user_message()
    assert objects(pg_url) == []  # nothing created anywhere


def test_a_migration_waits_for_the_migration_lock_of_any_ocw(pg_url):
    """Every ocw release migrates under the advisory lock keyed "ocw" (0x6F6377): a kernel
    opening a new database while another (of any version) migrates it waits for it."""
    assert 0x6F6377 == int.from_bytes(b"ocw", "big")
    opened, errors = [], []
    open_it = _opener(pg_url, opened, errors)
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [0x6F6377])  # another ocw, migrating
        t = threading.Thread(target=open_it)
        t.start()
        deadline = time.monotonic() + 10
        while t.is_alive() and time.monotonic() < deadline and not other.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]:
            time.sleep(0.01)
        assert t.is_alive() and objects(pg_url) == []  # waiting, nothing written yet
        other.execute("SELECT pg_advisory_unlock(%s)", [0x6F6377])
    t.join(30)
    assert errors == [] and len(opened) == 1
    assert ("sessions",) in objects(pg_url)
    opened[0].close()


@pytest.mark.parametrize("value", [True, "5", 0, -1, float("inf"), float("nan")])
def test_a_bad_store_option_is_one_line_naming_it(pg_url, value):
    with pytest.raises(InvalidArgument) as e:
        PostgresStore(pg_url, lock_timeout=value)
    assert str(e.value) == f"Store(lock_timeout=...) takes a number of seconds above 0, not {value!r}"
    assert objects(pg_url) == []  # refused before connecting: nothing created


def test_a_store_option_just_above_0_is_taken(pg_url):
    b = PostgresStore(pg_url, lock_timeout=0.001, idle_close=2)
    try:
        assert b._pool.lock_timeout == 0.001
    finally:
        b.close()


def test_a_database_error_is_one_line_naming_the_database(pg, pg_url):
    new_session(pg)
    sql(pg_url, "DROP TABLE node_counts")  # someone broke the schema by hand
    with pytest.raises(StoreError) as e:
        pg.node("s1", "a")
    assert str(e.value).startswith(f"cannot use the ocw database {pg.describe()}: ")
    assert 'relation "node_counts" does not exist' in str(e.value) and "\n" not in str(e.value)


def test_every_schema_version_names_the_ocw_that_first_wrote_it():
    """The marker's `needs_ocw` comes from this table: one entry per migration, in order,
    each a release (an older ocw reading a newer database names the release it needs)."""
    table = pg_migrations.OCW_VERSION_OF_SCHEMA
    assert list(table) == list(range(1, len(pg_migrations.MIGRATIONS) + 1)) == list(range(1, SCHEMA_VERSION + 1))
    assert all(v.count(".") == 2 and v.replace(".", "").isdigit() for v in table.values())
    assert [m.__name__[:4] for m in pg_migrations.MIGRATIONS] == [f"p{k:03d}" for k in table]
