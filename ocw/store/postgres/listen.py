"""Another kernel's writes, noticed: a background LISTEN on the PostgreSQL store.

Every change of a session row sends `NOTIFY ocw_sessions` at commit (a trigger,
ocw/store/postgres/schema.py), with no payload: the channel is the whole database's
and any role that may CONNECT may LISTEN, so it says only "a session changed".
One daemon thread per store holds its own connection, LISTENs, and calls
`callback(None, None, pid)` for each notification, with the server process that
wrote it; the caller re-reads its open sessions through the row policies (an
older schema's `'<id> <rev>'` payload still gives `callback(id, rev, pid)`). Invariant: a callback is never skipped
silently — when the connection drops, notifications sent meanwhile are lost,
so after reconnecting the thread calls `callback(None, None, None)` ("anything may
have changed"), and the caller syncs every session it has open. A callback
that raises is logged and the thread goes on.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ocw.store.postgres import url as pg_url
from ocw.store.postgres.conn import CONNECT_TIMEOUT, driver, one_line
from ocw.store.postgres.schema import NOTIFY_CHANNEL

log = logging.getLogger("ocw")
POLL = 0.5  # seconds between checks of the stop flag
RETRY = (0.1, 0.25, 0.5, 1.0)  # seconds before reconnect attempts: a view is stale at most ~1 s after an outage


class Listener:
    def __init__(self, url: str, where: str, callback: Callable[[str | None, int | None, int | None], None]):
        self.url, self.where, self.callback = url, where, callback
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # set once LISTEN is in place (tests wait on it)
        self.reconnects = 0

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

    def _run(self) -> None:
        psycopg = driver()
        failures = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(pg_url.connect_url(self.url), autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                     application_name="ocw-listen") as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    if failures:  # a reconnect (every lost connection counts one failure before it)
                        self._call(None, None)  # what was sent while we were away is lost: sync all
                    failures = 0
                    self.ready.set()
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=POLL):
                            sid, _, rev = n.payload.rpartition(" ")
                            if not sid:  # the payload-free notification: "some session changed"
                                self._call(None, None, n.pid)
                            else:
                                self._call(sid, int(rev) if rev.lstrip("-").isdigit() else None, n.pid)
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


def wait_ready(listener: Listener | None, timeout: float = 10.0) -> bool:
    """Tests: block until the listener LISTENs (notifications before that are not seen)."""
    deadline = time.monotonic() + timeout
    while listener is None or not listener.ready.wait(0.05):
        if time.monotonic() >= deadline:
            return False
    return True
