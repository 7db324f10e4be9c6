"""The DuckDB store: one file, many sessions, an append-only node DAG per session.

DuckDB locks a file to one process. Two kernels on one file must both work, and
a turn must stay cheap, so `_Db` holds a connection through a burst of work and
lets go once idle, or soon after another process signals that it waits (a
sidecar file, `<db>.ocw-lock`); opening waits, with a bounded retry, while the
other process holds the lock. Every write bumps the session's `rev`, which lets
a process notice another's writes with one cheap read (see Session.sync).

The store's interface (`Store` + `Session`) is all the context engine sees, so
a server database could stand behind it later without touching the engine.
"""
from __future__ import annotations

import errno
import json
import os
import random
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

import duckdb

from . import checks, ownership
from .errors import InvalidArgument, SessionNotFound, StoreBusy, StoreError
from .migrations import migrate

try:  # advisory locks for the hand-over between kernels
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None
try:
    import msvcrt as _msvcrt
except ImportError:
    _msvcrt = None

# No code path may download anything at run time (DuckDB would fetch extensions).
DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def _try_lock(fd: int) -> bool:
    """Exclusive, non-blocking advisory lock on `fd`: True if taken, False if another
    holder has it. OSError: no advisory locks here (platform or filesystem)."""
    if _fcntl is not None:
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    if _msvcrt is not None:  # pragma: no cover - Windows
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            _msvcrt.locking(fd, _msvcrt.LK_NBLCK, 1)
            return True
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN, errno.EDEADLK):
                return False
            raise
    raise OSError("no advisory file locks on this platform")


def _unlock(fd: int) -> None:
    if _fcntl is not None:
        _fcntl.flock(fd, _fcntl.LOCK_UN)
    elif _msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        _msvcrt.locking(fd, _msvcrt.LK_UNLCK, 1)


def default_db_path() -> str:
    env = os.environ.get("OCW_DB")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "ocw", "ocw.duckdb")


def new_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex[:12]


class _Db:
    """A connection held through a burst of work, handed over when another process waits.

    DuckDB lets one process at a time open a file. Kernels sharing a file take
    turns through a sidecar file, `<db>.ocw-lock`, and an advisory lock on it
    (flock; a byte lock on Windows) that a process takes BEFORE it opens DuckDB
    and drops only AFTER DuckDB's close has returned:

    - Safety. DuckDB's own file lock is not enough for close → reopen hand-overs
      between processes. Two processes that each connect, insert, commit and
      close 400 times, retrying on DuckDB's lock error, lost committed rows
      (798 of 800 with no error raised; 528 of 800 with "Could not read enough
      bytes from file") in 6 of 8 runs here (DuckDB 2.0.1); with a sidecar lock
      held from before each connect to after each close: 12 of 12 runs clean.
    - Fairness. A process that wants the file and cannot have it touches the
      sidecar (its mtime is the "someone is waiting" signal) and polls the lock
      every few milliseconds (a cheap syscall, where a failed `duckdb.connect`
      costs ~9 ms). The holder checks the signal after each burst of work and,
      from its reaper thread, between bursts. When someone waits, it lets go as
      soon as it pauses for `contended_idle` seconds, or once it has had the
      file for `contended_hold` seconds even while busy, so both kernels' turns
      interleave. (A hand-over costs a close and an open, ~40 ms, so a busy
      holder keeps the file for a share rather than a single operation.)
    - Cost. Uncontended, the connection stays open through a burst and closes
      `idle_close` seconds after the last use. Closing checkpoints the WAL, in
      the reaper thread, off the turn's critical path (so DuckDB's automatic
      checkpoint, which would stall a commit, rarely has a WAL big enough to
      fire). `max_hold` bounds a continuous hold even when no signal arrives.

    Where no advisory lock can be taken (a filesystem without them), only
    DuckDB's lock and the retry below guard the file. Callers only ever see a
    wait, or `StoreBusy` after `lock_timeout` seconds.
    """

    def __init__(self, path: str, *, idle_close: float = 0.1, max_hold: float = 5.0,
                 contended_hold: float = 0.1, contended_idle: float = 0.01, lock_timeout: float = 60.0):
        self.path = path
        self.memory = path == ":memory:"
        self.idle_close = idle_close
        self.max_hold = max_hold
        self.contended_hold = contended_hold
        self.contended_idle = contended_idle
        self.lock_timeout = lock_timeout
        self._cond = threading.Condition(threading.RLock())
        self._lock = self._cond  # held through every burst
        self._con: duckdb.DuckDBPyConnection | None = None
        self._opened_at = 0.0
        self._release_at: float | None = None
        self._last_used = 0.0
        self._yielded_at = -1e9
        self._depth = 0
        self._reaper: threading.Thread | None = None
        self._lock_fd: int | None = None
        self._mark: int | None = None  # the sidecar's mtime when we took the file
        self.sidecar = None if self.memory else path + ".ocw-lock"
        # Counters, for tests and the benchmark.
        self.opens = 0  # times the file was opened
        self.waits = 0  # opens that had to wait for another holder
        self.handoffs = 0  # times we let go early because another process waited

    # -- the sidecar ------------------------------------------------------------
    def _signal_waiting(self) -> None:
        try:
            now = time.time_ns()
            os.utime(self.sidecar, ns=(now, now))
        except OSError:
            pass

    def _sidecar_lock(self, deadline: float) -> None:
        """Take the advisory lock on the sidecar, signalling while we wait."""
        try:
            fd = os.open(self.sidecar, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return  # read-only place: DuckDB's own lock (and its retry) alone
        delay = 0.0005
        waited = False
        while True:
            try:
                if _try_lock(fd):
                    break
            except OSError:
                os.close(fd)  # no advisory locks here: DuckDB's own lock (and its retry) alone
                return
            if time.monotonic() >= deadline:
                os.close(fd)
                raise StoreBusy(f"database {self.path} is held by another process") from None
            waited = True
            self._signal_waiting()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.003)
        self._lock_fd = fd
        self.waits += waited

    def _sidecar_unlock(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            try:
                _unlock(fd)
            finally:
                os.close(fd)

    def _contended(self) -> bool:
        """Has another process signalled since we took the file?"""
        if self._mark is None:
            return False
        try:
            return os.stat(self.sidecar).st_mtime_ns != self._mark
        except OSError:
            return False

    # -- open / close -----------------------------------------------------------
    def _connect(self, deadline: float, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        """duckdb.connect, retried while another process holds DuckDB's own lock."""
        delay = 0.005
        waited = False
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only, config=DUCKDB_CONFIG)
                break
            except duckdb.ConnectionException as e:
                if not (read_only and "different configuration" in str(e)):
                    raise StoreError(f"cannot open {self.path}: {e}") from None
                # Open read-write elsewhere in this process: share that instance (it
                # has replayed its WAL already; this connection only reads).
                con = duckdb.connect(self.path, config=DUCKDB_CONFIG)
                break
            except duckdb.IOException as e:
                if "lock" not in str(e).lower():
                    raise StoreError(f"cannot open {self.path}: {e}") from None
                if time.monotonic() >= deadline:
                    raise StoreBusy(f"database {self.path} is locked by another process") from None
                waited = True
                self._signal_waiting()
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.05)
        self.waits += waited
        return con

    def _open(self) -> None:
        if not self.memory:
            ownership.make_folder(self.path)
        deadline = time.monotonic() + self.lock_timeout
        if not self.memory:
            self._sidecar_lock(deadline)
            if self._lock_fd is None and time.monotonic() - self._yielded_at < 0.2:
                # No advisory lock to queue on: the waiter polls DuckDB's lock every
                # ≤50 ms. Give it that long to get in before taking the file back.
                time.sleep(0.06)
        try:
            if not self.memory:
                ownership.replace_empty_file(self.path)  # under the lock: no kernel writes it now
            self._con = self._connect(deadline)
        except BaseException:
            self._sidecar_unlock()
            raise
        if not self.memory:
            try:
                self._mark = os.stat(self.sidecar).st_mtime_ns
            except OSError:
                self._mark = None
        self._opened_at = self._last_used = time.monotonic()
        self._release_at = None
        self.opens += 1
        if not self.memory and self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="ocw-db-release", daemon=True)
            self._reaper.start()

    @contextmanager
    def read_only(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short read-only look at an existing file, for the ownership check: a
        read-only open replays no WAL into the file and checkpoints nothing. The
        sidecar lock is taken only if the file already has one (an ocw file), so
        nothing is created beside a file that may not be ocw's."""
        with self._cond:
            if self._con is not None:
                yield self._con
                return
            deadline = time.monotonic() + self.lock_timeout
            if self.sidecar and os.path.exists(self.sidecar):
                self._sidecar_lock(deadline)
            try:
                con = self._connect(deadline, read_only=True)
                try:
                    yield con
                finally:
                    con.close()
            finally:
                self._sidecar_unlock()

    def _close(self) -> None:
        try:
            if self._con is not None:
                try:
                    self._con.close()  # checkpoints the WAL
                finally:
                    self._con = None
        finally:
            self._mark = None
            self._release_at = None
            self._sidecar_unlock()
            self._cond.notify_all()

    def _hand_over(self) -> None:
        self.handoffs += 1
        self._yielded_at = time.monotonic()
        self._close()

    def _reap(self) -> None:
        """Between bursts: close once idle; if another process waits, as soon as this
        one pauses (`contended_idle`) or has had its share (`contended_hold`)."""
        with self._cond:
            try:
                while self._con is not None:
                    now = time.monotonic()
                    if self._contended() and (now - self._opened_at >= self.contended_hold
                                              or now - self._last_used >= self.contended_idle):
                        self._hand_over()
                    elif self._release_at is not None and now >= self._release_at:
                        self._close()
                    else:
                        wait = self.contended_idle
                        if self._release_at is not None:
                            wait = min(wait, max(0.0, self._release_at - now))
                        self._cond.wait(wait)
            finally:
                self._reaper = None

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._cond:
            if self._con is None:
                self._open()
            self._depth += 1
            try:
                yield self._con  # type: ignore[misc]
            finally:
                self._depth -= 1
                if self._depth == 0 and not self.memory and self._con is not None:
                    self._after_burst()

    def _after_burst(self) -> None:
        self._last_used = time.monotonic()
        held = self._last_used - self._opened_at
        if held >= self.max_hold:
            self._close()
        elif held >= self.contended_hold and self._contended():
            self._hand_over()
        else:
            self._release_at = time.monotonic() + self.idle_close

    def close(self) -> None:
        with self._cond:
            self._close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All or nothing: on any exception the file is exactly as before."""
        with self.connect() as con:
            con.begin()
            try:
                yield con
            except BaseException:
                con.rollback()
                raise
            con.commit()


class Store:
    """Sessions in one DuckDB file (or `":memory:"`, only when asked for by name).

    Opening never writes to a file that is not ocw's (see ocw.ownership): a bad
    path, a foreign database or a newer ocw's file is refused with one line."""

    def __init__(self, path: str | os.PathLike | None = None, **db_options):
        self.path = ownership.check_path(default_db_path() if path is None else path)
        for key, value in db_options.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise InvalidArgument(f"Store({key}=...) takes a number of seconds above 0, not {value!r}")
        self.db = _Db(self.path, **db_options)
        self._sessions: dict = {}
        self._sessions_lock = threading.Lock()
        try:
            if ownership.is_existing_database(self.path):
                with self.db.read_only() as con:
                    ownership.classify(con, self.path)
            with self.db.connect() as con:
                migrate(con, path=self.path)
        except duckdb.Error as e:
            self.db.close()
            raise StoreError(f"cannot open ocw database {self.path}: {e}") from None
        except BaseException:
            self.db.close()
            raise

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # -- sessions -------------------------------------------------------------
    def create_session(
        self,
        *,
        model: str = "ocw-offline",
        context_window: int = 8192,
        system_prompt: str = "",
        name: str | None = None,
        provider: str = "offline",
        metadata: dict | None = None,
        archive: tuple[str, str] | None = None,
    ):
        """A new session. With `archive=(old_id, new_name)` the session that holds
        `name` now (it must be `old_id`) is renamed in the same transaction, so
        `%new` either files the old one away AND creates the new one, or neither."""
        from .config import PROVIDER_NAMES
        from .session import check_metadata

        checks.model(model)
        checks.window(context_window)
        checks.text(system_prompt, "system_prompt")
        if name is not None:
            checks.name(name, "name")
        checks.choice(provider, "provider", PROVIDER_NAMES)
        if metadata is not None:
            check_metadata(metadata)
        sid = new_id("s_")
        name = name or sid
        meta = {"context_compaction_count": 0, **(metadata or {})}
        if archive is not None:
            checks.name(archive[1], "archive name")
        with self.db.transaction() as con:
            if archive is not None:
                holder = con.execute("SELECT id FROM sessions WHERE name = ?", [name]).fetchall()
                if holder != [(archive[0],)]:
                    raise StoreError(f"the session named {name!r} changed meanwhile; nothing was created",
                                     hint="run the cell again")
                con.execute("UPDATE sessions SET name = ?, rev = rev + 1 WHERE id = ?", [archive[1], archive[0]])
            if con.execute("SELECT 1 FROM sessions WHERE name = ?", [name]).fetchone():
                raise StoreError(f"a session named {name!r} already exists", hint="open it, or pick another name")
            con.execute(
                "INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, head_id,"
                " occupancy_generation, metadata, rev) VALUES (?, ?, ?, ?, ?, ?, NULL, 0, ?, 0)",
                [sid, name, provider, model, context_window, system_prompt, json.dumps(meta)],
            )
        return self._session_object(sid)

    def session_rows(self, ids: list[str]) -> dict[str, dict]:
        """The sessions' rows as stored (every column), by id."""
        with self.db.connect() as con:
            cur = con.execute("SELECT * FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)])
            cols = [d[0] for d in cur.description]
            return {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}

    def undo_sessions(self, *, restore: list[dict], delete: list[str], expect_rev: dict[str, int]) -> bool:
        """Take back what a failed cell did to the sessions table, in one transaction:
        put the `restore` rows back exactly as they were and delete the `delete`
        sessions (which the cell created) — but only if every session in
        `expect_rev` is still at that rev, i.e. nothing was written since (no
        message, no compaction, no other kernel). Returns whether it undid."""
        with self.db.transaction() as con:
            for sid, rev in expect_rev.items():
                row = con.execute("SELECT rev FROM sessions WHERE id = ?", [sid]).fetchone()
                if row is None or row[0] != rev:
                    return False  # checked before any write: the commit is of nothing
            for sid in delete:
                if con.execute("SELECT 1 FROM nodes WHERE session_id = ? LIMIT 1", [sid]).fetchone():
                    return False
            for sid in delete:
                con.execute("DELETE FROM sessions WHERE id = ?", [sid])
            for row in restore:
                cols = [c for c in row if c != "id"]
                con.execute(f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                            [row[c] for c in cols] + [row["id"]])
        with self._sessions_lock:
            for sid in delete:
                self._sessions.pop(sid, None)
        return True

    def open_session(self, id_or_name: str):
        checks.text(id_or_name, "id_or_name", allow_empty=False)
        with self.db.connect() as con:
            row = con.execute(
                "SELECT id FROM sessions WHERE id = ? OR name = ? ORDER BY (id = ?) DESC LIMIT 1",
                [id_or_name, id_or_name, id_or_name],
            ).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {id_or_name!r} in {self.path}")
        return self._session_object(row[0])

    def get_or_create_session(self, name: str, **kwargs):
        try:
            return self.open_session(name)
        except SessionNotFound:
            return self.create_session(name=name, **kwargs)

    def _session_object(self, sid: str):
        """One Session object per id per Store, so every view shares its caches and events."""
        from .session import Session

        with self._sessions_lock:
            s = self._sessions.get(sid)
            if s is None:
                s = self._sessions[sid] = Session(self, sid)
        s.sync()
        return s

    def sessions(self) -> list[dict]:
        """Every session, newest use first: id, name, model, messages, tokens, last use."""
        with self.db.connect() as con:
            rows = con.execute(
                """
                SELECT s.id, s.name, s.provider, s.model, s.context_window, s.updated_at, s.created_at,
                       count(n.id) FILTER (WHERE n.role <> 'llm') AS messages,
                       coalesce(sum(n.tokens) FILTER (WHERE n.role <> 'llm'), 0) AS tokens
                FROM sessions s LEFT JOIN nodes n ON n.session_id = s.id
                GROUP BY ALL ORDER BY s.updated_at DESC, s.created_at DESC
                """
            ).fetchall()
        keys = ["id", "name", "provider", "model", "context_window", "updated_at", "created_at", "messages", "tokens"]
        return [dict(zip(keys, r)) for r in rows]

    def close(self) -> None:
        self.db.close()
