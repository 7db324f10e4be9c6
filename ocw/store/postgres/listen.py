"""Another kernel's writes, noticed: a background LISTEN on the PostgreSQL store.

Every change of a session row sends `NOTIFY ocw_sessions` at commit (a trigger,
ocw/store/postgres/migrations.py), with no payload: the channel is the whole database's
and any role that may CONNECT may LISTEN, so it says only "a session changed". A
turn's write notifies only the kernels that watch its session (schema p005), each on
a channel of its own (p007: `channel`, a random name, LISTENed beside `ocw_sessions`),
and each once until it says it has heard (p008: `ocw_heard`, before each re-read),
so the thread records each session the kernel opens (`follow`) as watched by its
connection on its channel — after its LISTENs, and followed by one
`callback(sid, None, None)`, since a turn committed before the record was seen may
not have notified.
One daemon thread per store holds its own connection, LISTENs, and calls
`callback(None, None, pid)` for each burst of notifications (those within `SETTLE`
of the first, answered together once it has passed; our own commits left out), with
a server process that wrote one; the caller re-reads its open sessions through the row policies (an
older schema's `'<id> <rev>'` payload still gives `callback(id, rev, pid)`). Invariant: a callback is never skipped
silently — when the connection drops, notifications sent meanwhile are lost,
so after reconnecting the thread calls `callback(None, None, None)` ("anything may
have changed"), and the caller syncs every session it has open. A callback
that raises is logged and the thread goes on.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Callable

from ocw.store.postgres import url as pg_url
from ocw.store.postgres.conn import CONNECT_TIMEOUT, driver, one_line
from ocw.store.postgres.watch_schema import NOTIFY_CHANNEL

log = logging.getLogger("ocw")
POLL = 0.1  # seconds between checks of the stop flag and of sessions newly followed
# Seconds a notification waits for the rest of its burst: all that arrive meanwhile are
# answered together, each session (or "some session") once. Payload-free, a notification
# reaches every kernel listening to the database (a turn sends one only when some other
# kernel watches its session, p005; any other change always does), and each answer is a
# read per open session: with 8 writers on shared sessions, ~7 reads for every turn written.
# The thread sleeps through the window and then reads what came at once: woken for each
# notification it cost the kernel about 0.06 ms of CPU per commit anywhere in the database.
SETTLE = 0.05
RETRY = (0.1, 0.25, 0.5, 1.0)  # seconds before reconnect attempts: a view is stale at most ~1 s after an outage


class Listener:
    def __init__(self, url: str, where: str, callback: Callable[[str | None, int | None, int | None], None],
                 mine: Callable[[int], bool] = lambda pid: False):
        self.url, self.where, self.callback, self.mine = url, where, callback, mine
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # set once LISTEN and the watch of every followed session are in place
        self.reconnects = 0
        self.pid = 0  # the listening connection's server process (its watches are its own)
        # Turns of the sessions we watch notify here alone (p007): unguessable, so it tells no one else anything.
        self.channel = f"{NOTIFY_CHANNEL}_{secrets.token_hex(8)}"
        self._lock = threading.Lock()
        self._followed: set[str] = set()
        self._pending: set[str] = set()  # followed, not yet recorded as watched on this connection

    def follow(self, sid: str) -> None:
        """Watch session `sid` from now on: recorded within POLL, then caught up once
        (`callback(sid, None, None)`); `ready` is clear until then."""
        with self._lock:
            if sid in self._followed:
                return
            self._followed.add(sid)
            self._pending.add(sid)
            self.ready.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ocw-pg-listen", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _call(self, sid, rev, pid=None) -> None:
        try:
            self.callback(sid, rev, pid)
        except Exception:
            log.exception("ocw: refreshing after another kernel's write failed")

    def _answer(self, batch: list) -> None:
        """One callback per session named in `batch` (its last rev), and one for the
        payload-free "some session changed" — none for our own commits (`mine`). Nothing
        is dropped that a callback would act on differently: each callback means "sync
        this session (or every open one) now", and it runs after the whole burst."""
        calls: dict = {}
        for n in batch:
            if n.pid is not None and self.mine(n.pid):
                continue
            sid, _, rev = n.payload.rpartition(" ")
            calls[sid or None] = (int(rev) if sid and rev.lstrip("-").isdigit() else None, n.pid)
        for sid, (rev, pid) in calls.items():
            self._call(sid, rev, pid)

    def _run(self) -> None:
        psycopg = driver()
        failures = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(pg_url.connect_url(self.url), autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                     application_name="ocw-listen") as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}; LISTEN {self.channel}")
                    self.pid = conn.info.backend_pid
                    with self._lock:  # a new connection: every followed session is watched again
                        self._pending = set(self._followed)
                    # After a reconnect the "sync all" below catches every session up.
                    self._watch(conn, catch_up=not failures)
                    if failures:  # a reconnect (every lost connection counts one failure before it)
                        self._call(None, None)  # what was sent while we were away is lost: sync all
                    failures = 0
                    while not self._stop.is_set():
                        if self._pending:
                            self._watch(conn)
                        batch = list(conn.notifies(timeout=POLL, stop_after=1))
                        if not batch:
                            continue
                        # The rest of the burst, answered together: it waits in the socket
                        # meanwhile and is read at once, not woken for one by one. Turns
                        # meanwhile told us nothing (p008): we had not heard. Heard now,
                        # before the re-read, so any turn that this re-read misses tells us.
                        self._stop.wait(SETTLE)
                        if self._followed:  # (a listener that watches nothing has nothing to say)
                            self._heard(conn)
                        batch += conn.notifies(timeout=0)
                        self._answer(batch)
                    self._unwatch(conn)
            except psycopg.Error as e:
                if self._stop.is_set():
                    return
                self.reconnects += 1
                # Said once per outage (the reconnect attempts go on quietly, backing off).
                log.log(logging.WARNING if failures == 0 else logging.DEBUG,
                        "ocw: lost the notification connection to %s (%s); reconnecting",
                        self.where, one_line(e, pg_url.secrets_of(self.url)))
                self._stop.wait(RETRY[min(failures, len(RETRY) - 1)])
                failures += 1
        self.ready.clear()

    def _watch(self, conn, catch_up: bool = True) -> None:
        """Record the sessions followed since the last call as watched by this connection —
        those this role can see (row security), through `ocw_watch` (schema p005), with
        the channel its turns are to notify (p007) — then,
        with `catch_up`, call back once for each: a turn committed before the record was
        visible did not notify."""
        with self._lock:
            sids, self._pending = sorted(self._pending), set()
        if sids:
            seen = [sid for (sid,) in conn.execute("SELECT id FROM sessions WHERE id = ANY(%s)", [sids])]
            conn.execute("SELECT ocw_watch(%s, %s)", [seen, self.channel])
            self._heard(conn)  # a watch is told of turns once it says it has heard (p008); re-read next
        for sid in sids if catch_up else ():
            self._call(sid, None)
        with self._lock:  # ready: every session followed so far watched and caught up
            if not self._pending:
                self.ready.set()

    @staticmethod
    def _heard(conn) -> None:
        """Say that every watch of this connection has heard (`ocw_heard`, schema p008): a
        watch told of a turn is not told again until then. Said before the re-read it
        precedes, and it waits for any turn in flight that found us told already, so the
        re-read sees every turn that did not tell us (ocw/store/postgres/watch_schema.py)."""
        conn.execute("SELECT ocw_heard()")

    @staticmethod
    def _unwatch(conn) -> None:
        """Leaving: our watches go with us (else they stay until an `ocw_watch` clears them)."""
        try:
            conn.execute("SELECT ocw_unwatch()")
        except Exception:  # the connection is going anyway; a leftover watch costs only a NOTIFY
            pass


def wait_ready(listener: Listener | None, timeout: float = 10.0) -> bool:
    """Tests: block until the listener LISTENs (notifications before that are not seen)."""
    deadline = time.monotonic() + timeout
    while listener is None or not listener.ready.wait(0.05):
        if time.monotonic() >= deadline:
            return False
    return True
