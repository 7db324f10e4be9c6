"""Connections to a PostgreSQL store: a small pool, and psycopg's errors said in one line.

Invariant: no message that leaves this module carries a password. Every
psycopg error becomes a `StoreError` whose text is the first line of the
server's or libpq's words, with every secret of the URL masked (ocw/text/secrets.py
scrubbing), prefixed by where (user, host, database: ocw/store/postgres/url.py `display`),
and a hint that says what to do. A missing driver is one line too.

The pool keeps a few idle autocommit connections; a caller takes one for a
read or a transaction and gives it back. No lock spans callers: two threads
of one kernel writing to two sessions use two connections, and the database
serialises writers per session (ocw/store/postgres/store.py), never globally.
"""
from __future__ import annotations

import re
import select
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from ocw.store.postgres import url as pg_url
from ocw.text.errors import StoreError
from ocw.text.secrets import scrub_values

CONNECT_TIMEOUT = 10  # seconds: an unreachable server is one line after this, not a hang
KEEP_IDLE = 4  # idle connections kept per store
CHECK_AFTER = 30.0  # seconds idle after which a kept connection is checked before use (a server restart)


def driver():
    """psycopg, or a one-line StoreError saying how to install it."""
    try:
        import psycopg
    except ImportError:
        raise StoreError("the PostgreSQL driver psycopg is not installed, so ocw cannot use a postgresql:// database",
                         hint="pip install 'ocw[postgres]' (or pip install 'psycopg[binary]'), then restart the kernel"
                         ) from None
    global _filtered
    if not _filtered:  # psycopg's loggers exist now: mask secrets in them too
        from ocw.text.secrets import install_log_filter

        install_log_filter()
        _filtered = True
    return psycopg


_filtered = False


_HINTS = (
    (re.compile(r"password authentication failed|no password supplied|authentication failed", re.I),
     "check the user and its password (in the URL, PGPASSWORD, ~/.pgpass or the service file)"),
    (re.compile(r"database .* does not exist", re.I), "create the database (createdb NAME) or fix its name in the URL"),
    (re.compile(r"role .* does not exist", re.I), "use a user the server knows (postgresql://USER@host/db)"),
    (re.compile(r"connection refused|could not connect|no such file or directory|timeout expired"
                r"|could not translate host name|network is unreachable|server closed the connection"
                r"|terminating connection|the connection is (closed|lost)|consuming input failed", re.I),
     "is the PostgreSQL server running and reachable? check host and port"),
    (re.compile(r"definition of service .* not found|service file", re.I),
     "check the service name and PGSERVICEFILE / ~/.pg_service.conf"),
    (re.compile(r"statement timeout|canceling statement", re.I),
     "the server's statement_timeout stopped the write; nothing of it was stored"),
    (re.compile(r"permission denied", re.I),
     "the team database's admin lets this role in with: ocw db grant postgresql://ADMIN@host/db ROLE "
     "(README: A team database)"),
)


def one_line(e: BaseException, secrets) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    text = re.sub(r"^connection failed: ", "", text)
    values = [s.get() for s in secrets]
    return scrub_values(text, values) or ""


def store_error(e: BaseException, where: str, secrets, doing: str = "use") -> StoreError:
    """A psycopg error as one StoreError line (no secret, no traceback)."""
    text = one_line(e, secrets)
    hint = next((h for pattern, h in _HINTS if pattern.search(text)), None)
    return StoreError(f"cannot {doing} the ocw database {where}: {text}", hint=hint or "see %ocw doctor")


DEFAULT_LOCK_TIMEOUT = 10.0  # seconds; the notebook's is %config Ocw.lock_timeout


def lock_ms(seconds: float) -> int:
    return max(1, int(round(seconds * 1000)))


def application_name() -> str:
    """What this process's connections say they are (pg_stat_activity), so another
    kernel's bounded lock wait can name it: `ocw kernel 5f3a9c1e (pid 1234)`."""
    from ocw.store.holder import this_process

    return f"ocw {this_process()}"[:63]


def lock_holders(conn) -> list[str]:
    """Who else is in a write transaction on the sessions table now (row locks are
    not listed by row: a transaction writing sessions holds RowShareLock or
    RowExclusiveLock on the table), named by their application_name."""
    rows = conn.execute(
        "SELECT DISTINCT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'relation' AND l.relation = to_regclass('sessions') AND l.granted"
        " AND l.mode IN ('RowShareLock', 'RowExclusiveLock') AND l.pid <> pg_backend_pid()"
        " AND a.state <> 'idle'").fetchall()
    names = [r[0][4:] if (r[0] or "").startswith("ocw ") else (r[0] or "a client") for r in rows]
    return sorted(n for n in names if n)


def _has_input(conn) -> bool:
    """Has the server sent something to an idle connection? Nothing is due on one;
    what comes is a server closing it (a terminated backend, an idle timeout, a
    shutdown: its last words, then EOF). A zero-wait poll of the socket, no round
    trip — so a connection the server closed is checked and replaced, instead of
    failing the next cell once with "is the server running?"."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError):
        return True  # no usable socket: let the check decide


class Pool:
    def __init__(self, url: str, where: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT):
        self.lock_timeout = lock_timeout  # seconds a statement waits for a lock (then LockNotAvailable)
        self._set_timeout: dict[int, float] = {}  # id(connection) -> the lock_timeout it has
        self.url = url  # without its password (ocw/store/postgres/url.py)
        self.where = where
        self.secrets = pg_url.secrets_of(url)
        self._idle: list = []  # (connection, when it went idle)
        self._lock = threading.Lock()
        self.connects = 0  # for tests and the benchmark
        self.info = None  # the last connection's (user, host, port, dbname)
        self.pids: set[int] = set()  # server processes of our open connections: our own writes' NOTIFY
        self._pid_of: dict[int, int] = {}  # id(connection) -> its server process (a broken one no longer says)
        # No server-side prepared statements (ours or psycopg's own): set when a connection turns
        # out to reach the server through a pooler, or a turn finds a statement missing twice
        # or one there it never prepared (ocw/store/postgres/append.py).
        self.plain = False

    def go_plain(self, conn=None) -> None:
        """From now on no connection of this pool prepares a statement on the server:
        a pooler gives each transaction whichever server connection is free."""
        self.plain = True
        with self._lock:
            conns = [c for c, _ in self._idle] + ([conn] if conn is not None else [])
        for c in conns:
            c.prepare_threshold = None

    def _connect(self):
        psycopg = driver()
        try:
            conn = psycopg.connect(pg_url.connect_url(self.url), autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                   application_name=application_name())
            # Not `options=`: that would replace the URL's own (a search_path, say).
            cur = conn.execute(f"SET lock_timeout = {lock_ms(self.lock_timeout)}; SELECT pg_backend_pid()")
            cur.nextset()
            server_pid = cur.fetchone()[0]
        except psycopg.Error as e:
            raise store_error(e, self.where, self.secrets, "connect to") from None
        self.connects += 1
        if server_pid != conn.info.backend_pid and not self.plain:
            # The server process is not the one the connection was told of: a pooler (PgBouncer,
            # say) stands between, and may hand each transaction another server connection,
            # where a statement prepared on this one is not (ocw/store/postgres/append.py).
            self.go_plain()
        if self.plain:
            conn.prepare_threshold = None
        self._set_timeout[id(conn)] = self.lock_timeout
        i = conn.info
        self.pids.add(i.backend_pid)
        self._pid_of[id(conn)] = i.backend_pid
        self.info = (i.user, i.host, i.port, i.dbname)
        return conn

    @contextmanager
    def connection(self) -> Iterator:
        psycopg = driver()
        conn = self._take(psycopg)
        if self.plain and conn.prepare_threshold is not None:  # one that was out when the pool went plain
            conn.prepare_threshold = None
        if self._set_timeout.get(id(conn)) != self.lock_timeout:  # %config Ocw.lock_timeout changed
            try:
                conn.execute(f"SET lock_timeout = {lock_ms(self.lock_timeout)}")
                self._set_timeout[id(conn)] = self.lock_timeout
            except BaseException:
                self._discard(conn)
                raise
        try:
            yield conn
        finally:
            healthy = (not conn.closed and not conn.broken
                       and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)
            with self._lock:
                if healthy and len(self._idle) < KEEP_IDLE:
                    self._idle.append((conn, time.monotonic()))
                    conn = None
            if conn is not None:
                self._discard(conn)

    def _take(self, psycopg):
        """A kept connection, or a new one. One kept for a while is checked first (one
        empty round trip): a server restarted between two cells costs a reconnect, not
        an error."""
        while True:
            with self._lock:
                conn, since = self._idle.pop() if self._idle else (None, 0.0)
            if conn is None:
                return self._connect()
            if conn.closed or conn.broken:
                self._discard(conn)
                continue
            if time.monotonic() - since < CHECK_AFTER and not _has_input(conn):
                return conn
            try:
                conn.execute("")
                return conn
            except psycopg.Error:
                self._discard(conn)

    def _discard(self, conn) -> None:
        self._set_timeout.pop(id(conn), None)
        self.pids.discard(self._pid_of.pop(id(conn), None))
        try:
            conn.close()
        except Exception:  # pragma: no cover - closing a dead connection
            pass

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            self._discard(conn)
