"""`ocw.Store`'s sessions (ocw/conversation/sessions.py) on a real DuckDB file: what a new
session starts with, the one-line refusals (nothing written), one Session object per id,
%new's file-away-and-create in one step, and sharing refused on a file."""
from __future__ import annotations

import pytest

from ocw.text.errors import InvalidArgument, OcwError, SessionNotFound, StoreError


def test_a_new_session_starts_with_the_documented_defaults(store):
    s = store.create_session()
    assert (s.model, s.context_window, s.system_prompt, s.provider_name) == ("ocw-offline", 8192, "", "offline")
    assert s.name == s.id and s.compaction_count == 0 and s.metadata["context_compaction_count"] == 0
    t = store.create_session(name="named", metadata={"note": "x"}, system_prompt="Be brief.")
    assert (t.name, t.metadata["note"], t.system_prompt) == ("named", "x", "Be brief.")
    assert store.open_session("named") is t and store.open_session(t.id) is t  # one object per session
    assert store.get_or_create_session("named") is t
    u = store.get_or_create_session("fresh", context_window=4_096)
    assert u.name == "fresh" and u.context_window == 4_096 and store.open_session("fresh") is u


@pytest.mark.parametrize("kwargs, message", [
    ({"model": "gpt-4o mini"}, "model takes a model name without spaces"),
    ({"context_window": 0}, "context_window"),
    ({"name": ""}, "name"),
    ({"provider": "nope"}, "provider"),
    ({"metadata": {"pins": []}}, "metadata['pins']"),
    ({"name": "x", "archive": ("s_x", "")}, "archive name"),
])
def test_bad_arguments_are_one_line_and_create_nothing(store, kwargs, message):
    with pytest.raises(InvalidArgument) as e:
        store.create_session(**kwargs)
    assert message in str(e.value).splitlines()[0]
    assert store.sessions() == []


def test_an_unknown_session_is_one_line(store):
    with pytest.raises(SessionNotFound, match="no session 'ghost' in "):
        store.open_session("ghost")


def test_new_files_the_old_session_away_and_creates_the_new_one_in_one_step(store):
    old = store.create_session(name="work")
    new = store.create_session(name="work", archive=(old.id, "work-1"))
    names = {r["id"]: r["name"] for r in store.sessions()}
    assert names == {old.id: "work-1", new.id: "work"}
    with pytest.raises(OcwError):  # the name is held by another session than the one to file away
        store.create_session(name="work", archive=(old.id, "work-2"))
    assert {r["name"] for r in store.sessions()} == {"work-1", "work"}


def test_a_created_session_is_taken_from_its_insert_and_reads_nothing(store, monkeypatch):
    """The row `insert_session` returns is the new session's: no read of the row or its
    summaries (an opened session's first sync reads them and its HEAD, the control), and the
    session then works as one opened would."""
    reads = []
    for name in ("session_row", "summaries", "session_rows", "nodes_since", "node"):
        real = getattr(store.backend, name)
        monkeypatch.setattr(store.backend, name, lambda *a, _r=real, _n=name, **k: reads.append(_n) or _r(*a, **k))
    s = store.create_session(name="new", context_window=4_096)
    assert reads == [] and (s.rev, s.head, s.context_window) == (0, None, 4_096)
    s.append_many([("user", "hello"), ("assistant", "hi")])
    assert s.rev == 1 and len(s.branch()) == 2 and s.branch()[-1] == s.head
    reads.clear()
    s.sync()
    assert reads == ["session_row"]  # after our own write the rev is the file's: nothing more is read
    store._sessions.clear()
    reads.clear()
    t = store.open_session("new")
    assert t is not s and reads == ["session_row", "summaries", "node"] and t.rev == 1 and t.head == s.head


def test_sharing_is_refused_on_a_file(store):
    store.create_session(name="mine")
    with pytest.raises(StoreError, match="sessions are shared on the team database only"):
        store.share_session("mine", "alice")


def test_on_the_team_database_another_kernels_write_refreshes_an_open_session(pg_url):
    """Two stores on one PostgreSQL database (two kernels): B appends to the session A has
    open; A's session syncs and its listeners get the new figure, with no command run.
    A's own write is not announced twice."""
    import time

    import ocw
    from ocw.store.postgres.listen import wait_ready

    a, b = ocw.Store(pg_url), ocw.Store(pg_url)
    try:
        s = a.create_session(name="shared", context_window=100_000)
        assert wait_ready(a.backend._listener), "the listener never started"
        seen = []
        s.events.subscribe(lambda name, payload: seen.append((name, payload)))
        s.append("user", "from A")
        own = len(seen)  # A's own write: announced once, by the write itself
        t = b.open_session("shared")
        t.append_many([("user", "from B"), ("assistant", "an answer " * 40)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(p.get("total") == t.occupancy()["total"]
                                                     for n, p in seen[own:] if n == "occupancy_changed"):
            time.sleep(0.02)
        assert s.head == t.head and s.occupancy()["total"] == t.occupancy()["total"]
        assert any(n == "occupancy_changed" and p["total"] == t.occupancy()["total"] for n, p in seen[own:])
        assert [n for n, _ in seen[:own]].count("occupancy_changed") <= 1
    finally:
        b.close()
        a.close()


def test_a_notice_naming_the_session_and_its_rev_syncs_it_once(tmp_db):
    """The older team schema's NOTIFY payload names the session and its rev (listen.py):
    a rev this kernel has not seen syncs the session and tells its listeners; its own rev
    (a write it adopted already) is skipped."""
    import ocw

    a, b = ocw.Store(tmp_db), ocw.Store(tmp_db)
    try:
        s = a.create_session(name="shared")
        seen = []
        s.events.subscribe(lambda name, payload: seen.append(name))
        a._on_remote_change(s.id, s._rev)  # our own: nothing
        assert seen == []
        t = b.open_session("shared")
        t.append_many([("user", "from B"), ("assistant", "an answer")])
        a._on_remote_change(s.id, t._rev)
        assert seen == ["occupancy_changed"] and s._rev == t._rev and s.head == t.head
    finally:
        b.close()
        a.close()
