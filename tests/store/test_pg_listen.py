"""Issue 16 item 3: a kernel notices another kernel's writes to its session and
refreshes its ring and widget, with no command run — LISTEN/NOTIFY on the
PostgreSQL store. Two processes (this one and a writer), then two real
kernels (a widget's comm updates in kernel A when kernel B chats)."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import psycopg
import pytest

import ocw
from ocw.context import events as ev
from ocw.store.postgres.listen import wait_ready
from ocw.widgets.ring import ContextWidget
from test_kernel import Kernel
from waiting import wait_for

WRITER = textwrap.dedent("""
    import json, sys, ocw
    store = ocw.Store(sys.argv[1])
    s = store.open_session("shared")
    ids = s.append_many([("user", "a question from the other kernel"), ("assistant", "its answer " * 40)])
    print(json.dumps({"head": ids[-1], "total": s.occupancy()["total"], "rev": s._rev}))
    store.close()
""")


@contextlib.contextmanager
def listening(pg_url: str, name: str = "test"):
    """A started Listener on `pg_url`, ready (LISTEN sent), stopped on leaving; yields
    the list its callback appends (session, rev) to."""
    from ocw.store.postgres.listen import Listener

    global _the_listener
    heard: list = []
    listener = _the_listener = Listener(pg_url, name, lambda sid, rev, pid: heard.append((sid, rev)))
    listener.start()
    try:
        assert wait_ready(listener)
        yield heard
    finally:
        listener.stop()


_the_listener = None  # the one `listening` started last


def other_process_writes(url: str) -> dict:
    out = subprocess.run([sys.executable, "-c", WRITER, url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)




@pytest.fixture
def shared(pg_url):
    store = ocw.Store(pg_url)
    s = store.create_session(model="gpt-4o", context_window=100_000, name="shared")
    s.append("user", "the first message, from this kernel")
    assert wait_ready(store.backend._listener), "the listener never started"
    yield store, s
    store.close()


def test_another_process_write_refreshes_the_session_and_its_widget(shared, pg_url):
    store, s = shared
    widget = ContextWidget(s)
    before = widget.total
    seen = []
    s.events.subscribe(lambda name, payload: seen.append((name, payload, threading.current_thread().name)))
    wrote = other_process_writes(pg_url)
    # No sync, no command here: the listener brings it.
    assert wait_for(lambda: widget.total == wrote["total"]), (widget.total, wrote)
    assert s._row["head_id"] == wrote["head"] and s._rev == wrote["rev"]
    assert widget.total > before
    occupancy = [(p, t) for n, p, t in seen if n == ev.OCCUPANCY_CHANGED]
    assert occupancy and occupancy[-1][0]["total"] == wrote["total"] and occupancy[-1][1] == "ocw-pg-listen"
    assert s.branch()[-1] == wrote["head"] and len(s.branch()) == 3
    widget.close()


def test_our_own_writes_are_not_synced_again(shared):
    store, s = shared
    synced = []
    real_sync = s.sync

    def counting_sync():
        synced.append(threading.current_thread().name)
        return real_sync()

    s.sync = counting_sync
    for i in range(5):
        s.append("user", f"message {i}")
    marker = store.create_session(name="marker")  # a later notification: when it is seen, ours were too
    seen_marker = []
    store._sessions[marker.id] = marker
    real_marker_sync = marker.sync
    marker.sync = lambda: seen_marker.append(1) or real_marker_sync()
    with psycopg.connect(pg_url_of(store)) as conn:  # another connection touches the marker session
        conn.execute("UPDATE sessions SET rev = rev + 1 WHERE id = %s", [marker.id])
        conn.commit()
    assert wait_for(lambda: seen_marker)
    # The notification carries no session id (schema p002: nothing another role may not
    # see), so the other connection's one write syncs every open session once — `s`
    # before `marker`, in the order they were opened; our five writes synced nothing.
    assert [t for t in synced if t == "ocw-pg-listen"] == ["ocw-pg-listen"]


def test_a_notification_refreshes_only_the_session_that_moved(shared):
    """The notification names no session (schema p002): every open session is re-read,
    and only the one whose row moved publishes its occupancy (its widgets re-render)."""
    store, s = shared
    quiet = store.create_session(model="gpt-4o", context_window=100_000, name="quiet")
    published = {"shared": [], "quiet": []}
    s.events.subscribe(lambda name, payload: name == ev.OCCUPANCY_CHANGED and published["shared"].append(1))
    quiet.events.subscribe(lambda name, payload: name == ev.OCCUPANCY_CHANGED and published["quiet"].append(1))
    store._sessions[s.id] = store._sessions.pop(s.id)  # "quiet" first: done with when "shared" publishes
    synced = []
    real_sync = quiet.sync
    quiet.sync = lambda: synced.append(threading.current_thread().name) or real_sync()
    wrote = other_process_writes(pg_url_of(store))
    assert wait_for(lambda: s._rev == wrote["rev"] and published["shared"])
    assert "ocw-pg-listen" in synced  # "quiet" was re-read first ...
    assert published["quiet"] == []  # ... and, unchanged, published nothing


def pg_url_of(store) -> str:
    return str(store.path)


def test_notifications_missed_while_disconnected_are_caught_up(shared, pg_url):
    store, s = shared
    listener = store.backend._listener
    widget = ContextWidget(s)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        killed = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                               " WHERE application_name = 'ocw-listen' AND datname = current_database()").fetchall()
    assert killed == [(True,)]
    listener.ready.clear()
    wrote = other_process_writes(pg_url)  # written while the listener may be away
    assert wait_for(lambda: listener.reconnects >= 1 and listener.ready.is_set())
    assert wait_for(lambda: widget.total == wrote["total"]), (widget.total, wrote)
    assert s._row["head_id"] == wrote["head"]
    widget.close()


def test_a_deleted_session_is_left_for_the_next_command(shared, pg_url):
    store, s = shared
    listener = store.backend._listener
    heard, callback = [], listener.callback
    listener.callback = lambda *a: (callback(*a), heard.append(a))  # appended once the refresh returned
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM sessions WHERE id = %s", [s.id])
    assert wait_for(lambda: heard), "the listener never heard of the delete"
    assert listener._thread.is_alive()  # the refresh found no session, and the listener did not crash
    with pytest.raises(ocw.text.errors.StoreError, match="vanished"):
        s.sync()


# -- two real kernels -------------------------------------------------------------------------------
@pytest.mark.timeout(240)
def test_a_kernels_widget_refreshes_when_another_kernel_chats(pg_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCW_") and k not in (
        "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env.update(OCW_DB=pg_url, JPY_SESSION_NAME="team.ipynb", OCW_PROVIDER="offline")
    a = Kernel(env, str(tmp_path / "kernel-a.log"))
    b = Kernel(env, str(tmp_path / "kernel-b.log"))
    try:
        a.run("%load_ext ocw")
        a.run("%%chat\nhello from kernel A")
        a.run("%context")
        first = a.run("import ocw; print(ocw.current_session().occupancy()['total'])").stdout
        comms = [m["content"]["comm_id"] for m in a.all if m["msg_type"] == "comm_open"
                 and "total" in m["content"].get("data", {}).get("state", {})]
        assert comms, "kernel A opened no context widget"
        b.run("%load_ext ocw")
        b.run("%%chat\nand hello from kernel B, in the same notebook's session")
        b_total = int(b.run("import ocw; print(ocw.current_session().occupancy()['total'])").stdout)
        assert b_total > int(first)
        # Kernel A runs nothing: its widget's comm is updated by the listener.
        updates = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(u == b_total for u in updates):
            for m in a.drain(0.5):
                if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] in comms:
                    state = m["content"]["data"].get("state", {})
                    if "total" in state:
                        updates.append(state["total"])
        assert b_total in updates, (updates, b_total)
        assert int(a.run("import ocw; print(len(ocw.current_session().branch()))").stdout) == 4
    finally:
        a.close()
        b.close()


def test_a_kernel_that_does_not_watch_a_session_is_not_woken_by_its_turns(pg_url):
    """p007: two kernels write one session; a third has a session of its own open. The
    pair's turns wake the other of the pair (its own channel) and never the third — its
    listener calls back only for a NOTIFY on `ocw_sessions` sent after those turns
    (notifications arrive in commit order, so anything of the turns' would be first)."""
    stores = [ocw.Store(pg_url) for _ in range(3)]
    try:
        a = stores[0].create_session(name="pair", model="gpt-4o", context_window=100_000)
        b = stores[1].open_session("pair")
        stores[2].create_session(name="solo", model="gpt-4o", context_window=100_000)
        assert all(wait_ready(st.backend._listener) for st in stores)
        calls = []
        third = stores[2].backend._listener
        third.callback = lambda sid, rev, pid, _f=third.callback: (calls.append((sid, rev, pid)), _f(sid, rev, pid))
        for i in range(4):
            a.append_many([("user", f"q{i}"), ("assistant", f"a{i}")])
        assert wait_for(lambda: b.head == a.head), "the other kernel of the pair was not told"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("NOTIFY ocw_sessions")
            sentinel = conn.info.backend_pid
            assert wait_for(lambda: calls), "the third kernel heard nothing at all"
        assert calls == [(None, None, sentinel)]
    finally:
        for st in stores:
            st.close()


def test_a_kernel_not_yet_done_with_a_burst_is_told_of_it_once_and_then_shows_its_last_turn(pg_url):
    """p008 through the listeners: a kernel's listener says it has heard as soon as it
    records its watch; once one of another kernel's turns has told it, the next 19 tell
    it nothing while it has not said it heard (held here just before its `ocw_heard`);
    once it has, its one re-read shows the last of the 20, and the next turn tells it
    again."""
    stores = [ocw.Store(pg_url) for _ in range(2)]
    try:
        a = stores[0].create_session(name="pair", model="gpt-4o", context_window=100_000)
        b = stores[1].open_session("pair")
        assert all(wait_ready(st.backend._listener) for st in stores)
        listener = stores[1].backend._listener
        with psycopg.connect(pg_url, autocommit=True) as conn:  # recorded, then said heard (not NULL: an older ocw's)
            assert conn.execute("SELECT told FROM session_watchers WHERE pid = %s", [listener.pid]).fetchall() == [
                (False,)]
        batches, armed, held, gate = [], threading.Event(), threading.Event(), threading.Event()
        real_heard, real_answer = listener._heard, listener._answer

        def heard(conn):
            if armed.is_set():
                held.set()
                gate.wait(30)
            real_heard(conn)

        listener._heard = heard
        listener._answer = lambda batch: (batches.append([n.payload for n in batch]), real_answer(batch))[1]
        with psycopg.connect(pg_url, autocommit=True) as conn:  # anything heard before this is answered by now
            conn.execute("NOTIFY ocw_sessions, 'sentinel 1'")
        assert wait_for(lambda: any("sentinel 1" in b for b in batches))
        batches.clear()
        armed.set()
        a.append_many([("user", "q0"), ("assistant", "a0")])
        assert held.wait(15), "the other kernel's listener was not told of the first turn"
        for i in range(1, 20):
            a.append_many([("user", f"q{i}"), ("assistant", f"a{i}")])
        armed.clear()
        gate.set()
        assert wait_for(lambda: b.head == a.head), "the other kernel did not catch up"
        assert batches == [[""]]  # 20 turns, one notification
        a.append_many([("user", "q20"), ("assistant", "a20")])
        assert wait_for(lambda: b.head == a.head and len(batches) == 2)
        assert batches == [[""], [""]]
    finally:
        for st in stores:
            st.close()


def test_a_followed_session_is_caught_up_once_then_its_turns_are_heard(pg_url):
    """p005: a turn notifies only if another kernel watches its session, so one committed
    before the watch was recorded was not heard: following a session records the watch
    (after LISTEN), then calls back once for it; from then on another kernel's turn
    notifies; a session of no interest to the listener is not watched."""
    writer = ocw.Store(pg_url)
    try:
        s = writer.create_session(name="followed")
        other = writer.create_session(name="not-followed")
        with listening(pg_url) as heard:
            listener = _the_listener
            s.append("user", "before anyone watches")  # nobody watches: no NOTIFY
            listener.follow(s.id)
            assert wait_for(lambda: (s.id, None) in heard) and wait_ready(listener)
            assert heard == [(s.id, None)]  # the catch-up, once
            pid = listener.pid
            assert {w for w in _watched(pg_url) if w[1] == pid} == {(s.id, pid)}  # (the writer's own listener
            # watches both of its sessions: its own watch calls for no NOTIFY)
            other.append("user", "a turn on a session nobody else watches")
            s.append("user", "a turn on the watched one")
            assert wait_for(lambda: len(heard) == 2)
            assert heard == [(s.id, None), (None, None)]
        assert [w for w in _watched(pg_url) if w[1] == pid] == []  # the listener left: its watch with it
    finally:
        writer.close()


def test_a_session_followed_before_the_first_connection_is_caught_up_once(pg_url):
    """Sessions a kernel opens while its listener is still connecting are watched on the first
    connection and each read once then (what was committed before is not missed); a later
    reconnect catches up by "sync all" instead."""
    from ocw.store.postgres.listen import Listener

    writer = ocw.Store(pg_url)
    heard: list = []
    listener = Listener(pg_url, "test", lambda sid, rev, pid: heard.append((sid, rev)))
    try:
        s = writer.create_session(name="early")
        listener.follow(s.id)  # before start: the first connection takes it
        s.append("user", "written before the listener connected")
        listener.start()
        assert wait_ready(listener) and wait_for(lambda: heard)
        assert heard == [(s.id, None)]
    finally:
        listener.stop()
        writer.close()


def _watched(url) -> set:
    with psycopg.connect(url, autocommit=True) as conn:
        return set(conn.execute("SELECT session_id, pid FROM session_watchers").fetchall())


def test_closing_the_store_ends_the_listener_and_its_connection(pg_url):
    store = ocw.Store(pg_url)
    listener = store.backend._listener
    assert wait_ready(listener), "the listener never started"
    thread = listener._thread
    store.close()
    assert wait_for(lambda: not thread.is_alive()), "the listener thread outlived its store"
    assert not listener.ready.is_set()  # it left its loop, not only its connection


def test_stop_gives_a_stuck_refresh_2_seconds_then_returns(pg_url):
    """A refresh that never returns (a callback blocked) must not hang the kernel's close:
    stop() waits for the thread at most its default 2 s, then returns with the daemon thread
    still alive. The wait bound is read off the real thread's join (a spy that calls through),
    not from a clock, so load on the machine cannot change the verdict."""
    from ocw.store.postgres.listen import Listener
    from ocw.store.postgres.watch_schema import NOTIFY_CHANNEL

    entered, release = threading.Event(), threading.Event()

    def stuck(sid, rev, pid):
        if sid == "s_stuck":
            entered.set()
            release.wait(30)

    listener = Listener(pg_url, "the test database", stuck)
    listener.start()
    try:
        assert wait_ready(listener), "the listener never started"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"NOTIFY {NOTIFY_CHANNEL}, 's_stuck 3'")
        assert entered.wait(15), "the notification never reached the callback"
        thread, joins = listener._thread, []
        real_join = thread.join
        thread.join = lambda timeout=None: (joins.append(timeout), real_join(timeout))[1]
        listener.stop()
        assert joins == [2.0]
        assert thread.is_alive()  # stop gave up waiting; it did not hang on the stuck refresh
    finally:
        release.set()
    assert wait_for(lambda: not thread.is_alive()), "the released thread did not end"


def test_stopping_the_listener_returns_once_its_thread_has_ended(pg_url):
    """stop() waits for the thread (up to its 2 s bound): a store closed is a store whose
    listener no longer runs, not one that will stop within the next poll."""
    from ocw.store.postgres.listen import Listener

    heard = []
    listener = Listener(pg_url, "test", lambda sid, rev, pid: heard.append((sid, rev, pid)))
    listener.stop()  # never started: nothing to wait for
    listener = Listener(pg_url, "test", lambda sid, rev, pid: heard.append((sid, rev, pid)))
    listener.start()
    assert wait_ready(listener)
    listener.stop()
    assert not listener._thread.is_alive() and not listener.ready.is_set()
    assert heard == []


def test_a_notification_with_a_payload_is_passed_on_as_session_and_rev(pg_url):
    """The trigger of schema p002 sends no payload ("some session changed"); one with
    `<session> <rev>` (p001's trigger: -1 for a deleted session) is passed on parsed."""
    with listening(pg_url) as heard:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for payload in ("s1 7", "s2 -1", "s3 x", ""):
                conn.execute("SELECT pg_notify('ocw_sessions', %s)", [payload])
        assert wait_for(lambda: len(heard) == 4)
        assert heard == [("s1", 7), ("s2", -1), ("s3", None), (None, None)]


def test_each_lost_notification_connection_is_warned_once(pg_url, caplog):
    """A lost LISTEN connection is said once, as a warning, then retried quietly; the
    next outage (after a reconnect) is said again."""
    import logging

    import psycopg

    from ocw.store.postgres.listen import Listener

    heard = []
    listener = Listener(pg_url, "the test db", lambda sid, rev, pid: heard.append((sid, rev)))
    caplog.set_level(logging.DEBUG, logger="ocw")
    listener.start()
    try:
        for outage in (1, 2):
            assert wait_ready(listener)
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                             " WHERE application_name = 'ocw-listen' AND datname = current_database()")
            assert wait_for(lambda: heard.count((None, None)) == outage)  # reconnected: "sync all"
            warned = [r for r in caplog.records if r.levelno == logging.WARNING
                      and r.getMessage().startswith("ocw: lost the notification connection to the test db (")]
            assert len(warned) == outage and listener.reconnects >= outage
    finally:
        listener.stop()


def test_wait_ready_is_true_once_listening_and_false_at_its_deadline(pg_url):
    from ocw.store.postgres.listen import Listener

    assert wait_ready(None, timeout=0.2) is False  # no listener (a DuckDB store's)
    listener = Listener(pg_url, "test", lambda sid, rev, pid: None)
    assert wait_ready(listener, timeout=0.2) is False  # not started: never ready
    listener.start()
    try:
        assert wait_ready(listener, timeout=10) is True and listener.ready.is_set()
    finally:
        listener.stop()


def test_a_burst_is_answered_once_per_session_and_our_own_commits_not_at_all():
    """`_answer` (what the listener does with the notifications of one SETTLE window):
    payload-free ones from other writers collapse into one "some session changed";
    a named session is called once, with its last rev; notifications of our own
    connections (`mine`) are left out."""
    from types import SimpleNamespace as N

    from ocw.store.postgres.listen import Listener

    heard = []
    listener = Listener("postgresql://x@localhost/db", "test", lambda sid, rev, pid: heard.append((sid, rev, pid)),
                        mine=lambda pid: pid == 1)
    listener._answer([N(payload="", pid=7), N(payload="", pid=1), N(payload="", pid=8), N(payload="s1 3", pid=7),
                      N(payload="s1 4", pid=9), N(payload="s2 2", pid=1)])
    assert heard == [(None, None, 8), ("s1", 4, 9)]
    heard.clear()
    listener._answer([N(payload="", pid=1), N(payload="s1 5", pid=1)])  # only our own: nothing to sync
    assert heard == []


def test_many_commits_at_once_give_one_callback(pg_url):
    """Twenty other transactions committed in one round trip reach the listener as one
    burst: one callback, not twenty (each would be a read per open session). A
    marker sent after that callback, delivered in order, shows nothing else came."""
    with listening(pg_url) as heard:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            with conn.pipeline() as p:
                for _ in range(20):
                    conn.execute("SELECT pg_notify('ocw_sessions', '')")
                    p.sync()  # each its own transaction (one transaction's copies would be merged by the server)
            assert wait_for(lambda: heard)
            conn.execute("SELECT pg_notify('ocw_sessions', 'marker 1')")
        assert wait_for(lambda: ("marker", 1) in heard)
        assert heard == [(None, None), ("marker", 1)]


def test_commits_spread_over_the_settle_window_give_one_callback(pg_url, monkeypatch):
    """A burst is what arrives within SETTLE of its first notification, however spread:
    the listener waits out the window and reads what came meanwhile at once — one
    callback for five commits 20 ms apart; a commit after the window is the next burst."""
    from ocw.store.postgres import listen

    monkeypatch.setattr(listen, "SETTLE", 0.5)
    with listening(pg_url) as heard:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for _ in range(5):
                conn.execute("SELECT pg_notify('ocw_sessions', '')")
                time.sleep(0.02)
            assert wait_for(lambda: heard)
            conn.execute("SELECT pg_notify('ocw_sessions', 'marker 1')")
        assert wait_for(lambda: ("marker", 1) in heard)
        assert heard == [(None, None), ("marker", 1)]


def test_reconnect_attempts_back_off():
    """No server to reach: each failed attempt waits RETRY's next step before the next one
    (0.1, 0.25, 0.5 s …), not a tight loop of connection attempts."""
    from ocw.store.postgres.listen import RETRY, Listener

    class Recording(threading.Event):
        def __init__(self):
            super().__init__()
            self.waits = []

        def wait(self, timeout=None):
            self.waits.append(timeout)
            return super().wait(timeout)

    dead = "postgresql://ocw@127.0.0.1:9/nowhere"  # the discard port: nothing listens there
    listener = Listener(dead, "nowhere", lambda sid, rev, pid: None)
    listener._stop = Recording()
    listener.start()
    try:
        assert wait_for(lambda: listener.reconnects >= 5)
    finally:
        listener.stop()
    # (0.1, 0.25, 0.5 …): each failed attempt waits the next step, then the last step for good.
    assert RETRY == (0.1, 0.25, 0.5, 1.0) and listener._stop.waits[:5] == [0.1, 0.25, 0.5, 1.0, 1.0]
    assert not listener.ready.is_set()
