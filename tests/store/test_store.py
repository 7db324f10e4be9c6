"""The store: paths, sessions, DuckDB settings, and the connection manager."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import duckdb
import pytest

import ocw
from ocw.text.errors import InvalidArgument, OcwError, SessionNotFound, StoreBusy, StoreError
from ocw.store.duckdb.store import DUCKDB_CONFIG, default_db_path
from waiting import until


# -- where the file lives -----------------------------------------------------------
def test_ocw_db_env_chooses_the_file(tmp_path, monkeypatch):
    path = tmp_path / "from-env" / "mine.duckdb"
    monkeypatch.setenv("OCW_DB", str(path))
    store = ocw.Store()
    try:
        assert store.path == str(path)
        store.create_session(name="x")
    finally:
        store.close()
    assert path.exists()
    con = duckdb.connect(str(path), config=DUCKDB_CONFIG)
    assert con.execute("SELECT name FROM sessions").fetchall() == [("x",)]
    con.close()


def test_default_path_is_per_user(tmp_path, monkeypatch):
    monkeypatch.delenv("OCW_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_db_path() == str(tmp_path / "data" / "ocw" / "ocw.duckdb")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == str(tmp_path / "home" / ".local" / "share" / "ocw" / "ocw.duckdb")


def test_memory_store():
    store = ocw.Store(":memory:")
    s = store.create_session(model="gpt-4o", context_window=1000, name="m")
    a = s.append("user", "hi")
    assert store.open_session("m").head == a
    time.sleep(0.15)  # an in-memory database is never released (it would vanish)
    assert store.open_session("m").branch() == [a]
    assert store.db.opens == 1
    store.close()


def test_extension_autoinstall_and_autoload_are_off(store):
    with store.db.connect() as con:
        settings = dict(con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN"
            " ('autoinstall_known_extensions', 'autoload_known_extensions')").fetchall())
    assert settings == {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}


# -- sessions ---------------------------------------------------------------------
def test_create_and_open_by_name_and_id(store):
    s = store.create_session(model="gpt-4.1", context_window=32000, system_prompt="Be kind.", name="work")
    assert (s.name, s.model, s.context_window, s.system_prompt) == ("work", "gpt-4.1", 32000, "Be kind.")
    assert s.head is None and s.generation == 0 and s.compaction_count == 0
    assert s.metadata == {"context_compaction_count": 0}
    assert store.open_session("work") is s
    assert store.open_session(s.id) is s
    unnamed = store.create_session(model="gpt-4o", context_window=1000)
    assert unnamed.name == unnamed.id
    # A fresh Store on the same file sees both (a new kernel).
    store.close()
    other = ocw.Store(store.path)
    try:
        again = other.open_session("work")
        assert again.id == s.id and again.system_prompt == "Be kind."
        assert other.open_session(unnamed.id).model == "gpt-4o"
    finally:
        other.close()


def test_id_wins_over_a_name_that_looks_like_an_id(store):
    a = store.create_session(name="first")
    b = store.create_session(name=a.id)  # a name that is another session's id
    assert b.id != a.id and b.name == a.id
    assert store.open_session(a.id) is a  # the id match wins


def test_duplicate_name_is_an_error(store):
    store.create_session(name="dup")
    with pytest.raises(StoreError) as e:
        store.create_session(name="dup")
    assert "dup" in str(e.value) and e.value.hint
    assert [x["name"] for x in store.sessions()].count("dup") == 1


def test_missing_session(store):
    with pytest.raises(SessionNotFound):
        store.open_session("nope")
    assert isinstance(SessionNotFound(), OcwError)


def test_get_or_create(store):
    a = store.get_or_create_session("g", model="gpt-4o", context_window=500)
    b = store.get_or_create_session("g", model="other", context_window=9)
    assert a is b and b.model == "gpt-4o"


@pytest.mark.parametrize("window", [0, -5, 1.5, "8k", True, 2**31, float("nan")])
def test_bad_context_window(store, window):
    with pytest.raises(InvalidArgument, match="context_window takes a whole number from 1 to 2\\*\\*31-1"):
        store.create_session(context_window=window)
    assert store.sessions() == []


def test_sessions_listing(store):
    a = store.create_session(model="gpt-4o", context_window=1000, name="a")
    b = store.create_session(model="gpt-4", context_window=2000, name="b")
    a.append("user", "one")
    a.append("assistant", "two")
    rows = {r["name"]: r for r in store.sessions()}
    assert set(rows) == {"a", "b"}
    assert rows["a"]["messages"] == 2 and rows["b"]["messages"] == 0
    assert rows["a"]["tokens"] == a.occupancy()["breakdown"]["messages"]
    assert rows["b"]["model"] == "gpt-4" and rows["b"]["context_window"] == 2000
    assert store.sessions()[0]["name"] == "a"  # most recently used first
    b.append("user", "now b")
    assert store.sessions()[0]["name"] == "b"


def test_metadata_is_json_and_persists(store):
    s = store.create_session(name="meta", metadata={"tool_result_cap": 1234, "tags": ["x", "数据"]})
    s.set_metadata(note={"nested": [1, 2]})
    store.close()
    other = ocw.Store(store.path)
    t = other.open_session("meta")
    assert t.metadata == {"context_compaction_count": 0, "tool_result_cap": 1234, "tags": ["x", "数据"],
                          "note": {"nested": [1, 2]}}
    assert t.tool_result_cap == 1234
    other.close()


def test_transaction_is_all_or_nothing(store):
    s = store.create_session(name="t")
    with pytest.raises(RuntimeError):
        with store.db.transaction() as con:
            con.execute("UPDATE sessions SET name = 'renamed' WHERE id = ?", [s.id])
            raise RuntimeError("boom")
    with store.db.connect() as con:
        assert con.execute("SELECT name FROM sessions WHERE id = ?", [s.id]).fetchone() == ("t",)


def test_store_on_a_non_database_file(tmp_path):
    bad = tmp_path / "not.duckdb"
    bad.write_bytes(b"this is not a duckdb file" * 100)
    with pytest.raises(StoreError):
        ocw.Store(str(bad))


# -- the connection manager ---------------------------------------------------------
HOLDER = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    """
)


def hold_lock(path: str, seconds: float) -> subprocess.Popen:
    """Another process (not ocw) holding DuckDB's lock on `path` for `seconds`."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, path, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def can_open_elsewhere(path: str) -> bool:
    code = "import sys, duckdb; duckdb.connect(sys.argv[1]).close()"
    return subprocess.run([sys.executable, "-c", code, path], capture_output=True).returncode == 0


def test_connection_is_released_when_idle(tmp_db):
    store = ocw.Store(tmp_db, idle_close=0.05)
    s = store.create_session(name="idle")
    s.append("user", "hello")
    deadline = time.monotonic() + 5
    while store.db._con is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.db._con is None
    assert not os.path.exists(tmp_db + ".wal")  # closing checkpointed, off the turn's path
    assert can_open_elsewhere(tmp_db)
    opens = store.db.opens
    s.append("user", "again")  # reopens transparently
    assert store.db.opens == opens + 1
    assert s.branch()[-1] == s.head
    store.close()


def test_connection_is_held_through_a_burst(store):
    s = store.create_session(name="burst")
    opens = store.db.opens
    for i in range(20):
        s.append("user", f"m{i}")
        s.occupancy()
    assert store.db.opens - opens <= 1  # not one open per operation


HOLD_UNTIL_TOLD = textwrap.dedent(
    """
    import sys, duckdb
    con = duckdb.connect(sys.argv[1])
    print("locked", flush=True)
    sys.stdin.readline()
    con.close()
    """
)


def test_waits_while_another_process_holds_the_file(tmp_db):
    """The file held by another process: the append waits (signalling on the sidecar)
    and goes through once the holder lets go — no error reaches the caller. No timing
    assumed: the holder is released only after the store is seen waiting (its waiting
    signal, watched: the fixed 0.1 s sleep and "waited > 0.2 s" it replaces failed
    under load)."""
    ocw.Store(tmp_db).close()
    store = ocw.Store(tmp_db, idle_close=0.01)
    s = store.create_session(name="w")
    until(lambda: store.db._con is None, "the idle close", poll=0.005)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_TOLD, tmp_db], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        waiting = threading.Event()
        signal = store.db.sidecar.signal_waiting  # what a waiting opener does each round: seen, then done

        def seen_waiting():
            waiting.set()
            signal()

        store.db.sidecar.signal_waiting = seen_waiting

        def release_once_waited_for():
            assert waiting.wait(timeout=30), "the store never waited for the file"
            holder.stdin.write("go\n")
            holder.stdin.flush()

        releaser = threading.Thread(target=release_once_waited_for, daemon=True)
        releaser.start()
        nid = s.append("user", "waited for the lock")  # no error reaches the caller
        releaser.join(timeout=30)
        assert holder.wait(timeout=30) == 0
        assert s.head == nid and s.node(nid)["content"][0]["text"] == "waited for the lock"
        assert store.db.waits >= 1
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        store.close()


def test_store_busy_after_lock_timeout(tmp_db):
    ocw.Store(tmp_db).close()
    holder = hold_lock(tmp_db, 3)
    try:
        with pytest.raises(StoreBusy) as e:
            ocw.Store(tmp_db, lock_timeout=0.3)
        assert e.value.hint and isinstance(e.value, StoreError)
    finally:
        holder.kill()
        holder.wait()


def test_two_stores_in_one_process_take_turns(tmp_db):
    """Two Store objects on one file (two notebooks in one kernel, or a test) hand the
    file to each other through the sidecar lock, and each sees the other's writes."""
    a = ocw.Store(tmp_db)
    b = ocw.Store(tmp_db)
    sa = a.create_session(name="shared", model="gpt-4o", context_window=10000)
    sb = b.open_session("shared")
    ids = []
    for i in range(6):
        ids.append((sa if i % 2 == 0 else sb).append("user", f"turn {i}"))
    sa.sync()
    sb.sync()
    assert sa.branch() == sb.branch() == ids
    assert sa.occupancy()["total"] == sb.occupancy()["total"]
    assert os.path.exists(tmp_db + ".ocw-lock")
    a.close()
    b.close()


def test_the_connection_is_kept_between_cells_at_human_pace(tmp_db):
    """Uncontended, the file stays open: a cell after a pause does not pay a reopen
    (~20 ms each, which made every human-paced turn 24–35 ms before Store v2)."""
    store = ocw.Store(tmp_db)
    try:
        s = store.create_session(name="paced")
        s.append("user", "first")
        opens = store.db.opens
        for i in range(3):
            time.sleep(0.3)  # a person reading the reply
            s.append("user", f"cell {i}")
            s.occupancy()
        assert store.db.opens == opens and store.db._con is not None
    finally:
        store.close()


def test_an_idle_wal_is_checkpointed_by_the_reaper_not_the_caller(tmp_db, monkeypatch):
    from ocw.store.duckdb.db import Db

    monkeypatch.setattr(Db, "CHECKPOINT_BYTES", 0)  # any WAL counts as large
    store = ocw.Store(tmp_db, checkpoint_idle=0.05)
    try:
        s = store.create_session(name="wal")
        s.append("user", "x" * 2000)
        before = store.db.checkpoints
        deadline = time.monotonic() + 5
        while store.db.checkpoints == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.db.checkpoints == before + 1  # once, while idle, on the reaper thread
        assert store.db._con is not None  # and the connection stays open
    finally:
        store.close()


@pytest.mark.parametrize("value", [0, -1, True, "1", float("inf"), float("nan"), None])
def test_a_bad_store_option_is_one_line_naming_it(tmp_db, value):
    with pytest.raises(InvalidArgument, match=r"^Store\(idle_close=\.\.\.\) takes a number of seconds above 0"):
        ocw.Store(tmp_db, idle_close=value)
    assert not os.path.exists(tmp_db)  # refused before the file was made


def test_a_session_deleted_by_another_store_is_said_to_have_vanished(tmp_db):
    a, b = ocw.Store(tmp_db), ocw.Store(tmp_db)
    try:
        s = a.create_session(name="gone")
        s.append("user", "first")
        b.backend.delete_session(s.id)
        with pytest.raises(StoreError, match="vanished"):
            s.append("user", "second")
    finally:
        a.close()
        b.close()


# -- reading nodes back (a fresh Store: nothing cached) --------------------------------
def test_a_range_read_without_an_upper_bound_reads_to_the_end(tmp_db):
    a = ocw.Store(tmp_db)
    s = a.create_session(name="r", model="gpt-4o")
    ids = [s.append("user", f"turn {i}") for i in range(4)]
    a.close()
    b = ocw.Store(tmp_db)
    try:
        got = b.backend.nodes_since(s.id, 0)  # the whole session (the export's, the benchmark's read)
        assert [n.id for n in got] == ids
        third = got[2].seq
        assert [n.id for n in b.backend.nodes_since(s.id, third)] == ids[2:]
        assert [n.id for n in b.backend.nodes_since(s.id, third, third)] == [ids[2]]
    finally:
        b.close()


def test_contents_are_read_from_runs_far_apart(tmp_db):
    """Content is read by seq runs: nodes more than 4096 apart are two reads, and both
    come back (so does a lone node at either end)."""
    from ocw.store.duckdb.store import SEQ_GAP

    assert SEQ_GAP == 4096
    a = ocw.Store(tmp_db)
    s = a.create_session(name="c", model="gpt-4o")
    first = s.append("user", "the first")
    a.close()
    con = duckdb.connect(tmp_db, config=DUCKDB_CONFIG)  # push the sequence 5000 on, as 5000 other rows would
    con.execute("SELECT nextval('node_seq') FROM range(5000)").fetchall()
    con.close()
    b = ocw.Store(tmp_db)
    try:
        s = b.open_session("c")
        last = s.append("assistant", "the last")
        nodes = b.backend.nodes_since(s.id, 0)
        assert [n.id for n in nodes] == [first, last] and nodes[1].seq - nodes[0].seq > 5000
        contents = b.backend.content(s.id, nodes)
        assert contents[first] == [{"type": "text", "text": "the first"}]
        assert contents[last] == [{"type": "text", "text": "the last"}]
    finally:
        b.close()


def test_recounted_counts_are_stored_beside_the_rows(tmp_db):
    a = ocw.Store(tmp_db)
    s = a.create_session(name="n", model="gpt-4o")
    nid = s.append("user", "count me")
    a.backend.set_counts(s.id, [(nid, 321, 1, 321, 7, "cl100k_base")])
    a.close()
    b = ocw.Store(tmp_db)
    try:
        node = b.backend.node(s.id, nid, 7)
        assert (node.tokens, node.depth, node.cum, node.epoch) == (321, 1, 321, 7)
        assert b.backend.node(s.id, nid, 0).epoch == 0 and b.backend.node(s.id, nid, 0).tokens != 321
    finally:
        b.close()
